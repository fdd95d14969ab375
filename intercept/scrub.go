package intercept

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/foldproxy/foldproxy/intercept/secrets"
	"github.com/foldproxy/foldproxy/policy/jsonrpc"
)

// ErrWithheld is wrapped by the error an agent gets instead of a result
// that could not be scanned for secrets.
var ErrWithheld = errors.New("foldproxy withheld this result")

// redactedError replaces an error whose text held a secret. errors.Is
// still matches what the original matched, but the original (and its text)
// is not reachable through Unwrap.
type redactedError struct {
	msg  string
	orig error
}

func (e *redactedError) Error() string        { return e.msg }
func (e *redactedError) Is(target error) bool { return errors.Is(e.orig, target) }

// Scrub returns the interceptor that removes secrets from what an upstream
// sends back: ex.Result (every string in it), the message and data of
// ex.RPCError, and the text of ex.Err; and from the call's arguments as
// they are archived and counted (ex.Args, once the upstream has answered;
// the upstream itself gets them unchanged). Redactions are added to
// ex.Redactions and the time spent is stored in ex.ScrubTime.
//
// An upstream JSON-RPC error (a *jsonrpc.Error) that held a secret is
// replaced by a new *jsonrpc.Error, the same type, with the same code and
// the message and data scrubbed (its raw bytes are not kept); any other
// error that held one becomes a *jsonrpc.Error with code -32603. A clean
// error is left untouched, raw bytes included.
//
// Scrubbing fails closed: when a scan errors, panics or overruns its
// deadline, the result is withheld — ex.Result and ex.RPCError are cleared,
// ex.Outcome is OutcomeWithheld and ex.Err (also returned) wraps
// ErrWithheld and says why, e.g. "foldproxy withheld this result: it could
// not be scanned for secrets (scan timed out after 10s)". A nil or disabled
// scrubber passes everything through.
func Scrub(s *secrets.Scrubber) Interceptor {
	return func(next Handler) Handler {
		return func(ctx context.Context, ex *Exchange) (err error) {
			herr := next(ctx, ex)
			if s == nil || s.Disabled() {
				return herr
			}
			start := time.Now()
			// One deadline for all the work on this result: every scan
			// below, then counting (ex.WorkDeadline, read by Tokens).
			deadline := start.Add(s.Timeout())
			ex.WorkDeadline = deadline
			defer func() {
				if r := recover(); r != nil {
					err = withhold(ctx, s.Logger(), ex, s.Panicked(r))
				}
				ex.ScrubTime = time.Since(start)
			}()
			if len(ex.Args) > 0 {
				// The arguments went upstream as the agent sent them
				// (ex.Params); what is archived and counted from here on
				// is the scrubbed copy. A copy that cannot be scanned
				// withholds the exchange: nothing is delivered, so
				// nothing is archived.
				out, counts, dec, serr := s.ScrubJSONUntil(ctx, deadline, ex.Args)
				dec.Release() // nothing reads the arguments decoded
				if serr != nil {
					return withhold(ctx, s.Logger(), ex, serr)
				}
				ex.Args = out
				addCounts(ex, counts)
			}
			if len(ex.Result) > 0 {
				out, counts, dec, serr := s.ScrubJSONUntil(ctx, deadline, ex.Result)
				if serr != nil {
					return withhold(ctx, s.Logger(), ex, serr)
				}
				ex.Result, ex.decoded = out, dec
				addCounts(ex, counts)
				// Secrets split across the result's text items.
				out, counts, serr = s.ScrubItemsUntil(ctx, deadline, ex.Result)
				if serr != nil {
					return withhold(ctx, s.Logger(), ex, serr)
				}
				if len(counts) > 0 {
					ex.decoded.Release()
					ex.Result, ex.decoded = out, nil
					addCounts(ex, counts)
				}
			}
			if ex.RPCError != nil {
				rerr, counts, serr := scrubRPCError(ctx, s, deadline, ex.RPCError)
				if serr != nil {
					return withhold(ctx, s.Logger(), ex, serr)
				}
				ex.RPCError = rerr
				addCounts(ex, counts)
			}
			if ex.Err != nil {
				msg := ex.Err.Error()
				clean, counts, serr := s.ScrubTextUntil(ctx, deadline, msg)
				if serr != nil {
					return withhold(ctx, s.Logger(), ex, serr)
				}
				if clean != msg {
					ex.Err = &redactedError{msg: clean, orig: ex.Err}
					addCounts(ex, counts)
				}
				if herr != nil {
					herr = ex.Err
				}
			}
			return herr
		}
	}
}

// scrubRPCError scrubs an upstream's JSON-RPC error: its message and data
// when it implements RPCError, its text otherwise.
func scrubRPCError(ctx context.Context, s *secrets.Scrubber, deadline time.Time, e error) (error, map[string]int, error) {
	var re *jsonrpc.Error
	if !errors.As(e, &re) {
		msg := e.Error()
		clean, counts, err := s.ScrubTextUntil(ctx, deadline, msg)
		if err != nil || clean == msg {
			return e, nil, err
		}
		return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: clean}, counts, nil
	}
	clean, counts, err := s.ScrubTextUntil(ctx, deadline, re.Message)
	if err != nil {
		return nil, nil, err
	}
	data := re.Data
	cleanData := data
	if len(data) > 0 {
		var dc map[string]int
		cleanData, dc, _, err = s.ScrubJSONUntil(ctx, deadline, data)
		if err != nil {
			return nil, nil, err
		}
		for k, v := range dc {
			if counts == nil {
				counts = map[string]int{}
			}
			counts[k] += v
		}
	}
	if len(counts) == 0 {
		return e, nil, nil
	}
	return &jsonrpc.Error{Code: re.Code, Message: clean, Data: cleanData}, counts, nil
}

func addCounts(ex *Exchange, counts map[string]int) {
	if len(counts) == 0 {
		return
	}
	if ex.Redactions == nil {
		ex.Redactions = make(map[string]int, len(counts))
	}
	for k, v := range counts {
		ex.Redactions[k] += v
	}
}

// withhold fails an exchange closed: nothing of the upstream's answer is
// delivered.
//
// When the call itself has ended (ctx canceled by the agent, or past its
// deadline), that is not a scan failure: the exchange's outcome is
// OutcomeCanceled and ex.Err wraps ctx's error (context.Canceled or
// context.DeadlineExceeded), so that the proxy can tell a canceled call,
// which gets no response, from a result withheld for want of a scan.
func withhold(ctx context.Context, logger *slog.Logger, ex *Exchange, cause error) error {
	ex.Result = nil
	ex.RPCError = nil
	if cerr := ctx.Err(); cerr != nil {
		ex.Outcome = OutcomeCanceled
		ex.Err = fmt.Errorf("foldproxy: %s ended before its result was scanned: %w", ex.Method, cerr)
		logger.Debug("scrub: call ended during the scan", "session", ex.Session, "upstream", ex.Upstream, "method", ex.Method, "reason", cerr.Error())
		return ex.Err
	}
	ex.Outcome = OutcomeWithheld
	ex.Err = fmt.Errorf("%w: it could not be scanned for secrets (%v)", ErrWithheld, cause)
	logger.Warn("scrub: result withheld", "session", ex.Session, "upstream", ex.Upstream, "method", ex.Method, "reason", cause.Error())
	return ex.Err
}
