package intercept

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/foldproxy/foldproxy/intercept/secrets"
	"github.com/foldproxy/foldproxy/intercept/tokens"
)

// The scan's decoded strings are what the count reads shared texts from.
var _ tokens.Decoded = (*secrets.Decoded)(nil)

// Tokens returns the interceptor that counts what passes through: after the
// upstream answers, it sets ArgTokens, and ResultTokens and Over counted
// against ex.Remaining (no limit when negative). It never fails a call: a
// result it cannot parse is counted as raw JSON text. With a nil Counter it
// passes exchanges through untouched.
//
// Counting is part of the work that scrub.timeout bounds (ex.WorkDeadline,
// set by Scrub): a result not counted by then is withheld (fail closed),
// its Outcome OutcomeWithheld and ex.Err wrapping ErrWithheld.
func Tokens(c *tokens.Counter) Interceptor {
	return func(next Handler) Handler {
		return func(ctx context.Context, ex *Exchange) error {
			err := next(ctx, ex)
			if c == nil || ex.Result == nil {
				return err
			}
			var dec tokens.Decoded
			if ex.decoded.Of(ex.Result) {
				dec = ex.decoded
			}
			tc, ok := countBy(c, ex.WorkDeadline, ex.Args, ex.Result, dec, ex.Method, ex.Remaining)
			if ok && ex.decoded != nil {
				// The count has read the decoded texts (a count that did
				// not end in time may still be reading them: left to the
				// collector), and nothing after it does.
				ex.decoded.Release()
				ex.decoded = nil
			}
			if !ok {
				ex.Result, ex.RPCError = nil, nil
				ex.Outcome = OutcomeWithheld
				ex.Err = fmt.Errorf("%w: it could not be scanned for secrets and counted within scrub.timeout", ErrWithheld)
				return ex.Err
			}
			ex.ArgTokens, ex.ResultTokens, ex.Over = tc.Args, tc.Result, tc.Over
			ex.resultErr, ex.resultErrOf = tc.IsError, ex.Result
			return err
		}
	}
}

// inlineCountBytes is the size under which Tokens counts on the caller's
// goroutine and checks the deadline once done: counting is linear in the
// text's length, and that much takes well under a millisecond, so a
// goroutine to wait on would cost the common case for nothing. Larger texts
// are counted on a goroutine of their own so that the deadline ends the
// wait.
const inlineCountBytes = 64 << 10

// countBy counts an exchange (Counter.CountExchange) and reports whether the count
// finished by deadline (always, when deadline is zero). A count that
// overruns is left to finish on its own, its result discarded: counting
// takes time linear in the texts' size, so it ends soon after. It reads the
// texts it was given, which nothing writes once an upstream has answered. A
// count that panics on its own goroutine reports false rather than killing
// the process.
func countBy(c *tokens.Counter, deadline time.Time, args, res json.RawMessage, dec tokens.Decoded, method string, remaining int) (tokens.Counts, bool) {
	if deadline.IsZero() {
		return c.CountExchange(args, res, dec, method, remaining), true
	}
	if len(args)+len(res) < inlineCountBytes {
		tc := c.CountExchange(args, res, dec, method, remaining)
		return tc, !time.Now().After(deadline)
	}
	type outcome struct {
		tc tokens.Counts
		ok bool
	}
	done := make(chan outcome, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				done <- outcome{}
			}
		}()
		done <- outcome{c.CountExchange(args, res, dec, method, remaining), true}
	}()
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case o := <-done:
		return o.tc, o.ok
	case <-t.C:
		return tokens.Counts{}, false
	}
}
