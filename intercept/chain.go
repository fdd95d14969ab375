package intercept

import (
	"context"
	"errors"
	"fmt"

	"github.com/foldproxy/foldproxy/intercept/secrets"
	"github.com/foldproxy/foldproxy/intercept/tokens"
)

// Parts are the components of foldproxy's standard chain. Every one is
// required: a chain that would fail or skip its work on every call is
// refused when it is built. To turn scrubbing off, pass a Scrubber made by
// secrets.NewScrubber from settings that disable it.
type Parts struct {
	Scrubber *secrets.Scrubber
	Counter  *tokens.Counter
	Brancher Brancher
	// Thresholds are the three warning fractions of a budget, ascending in
	// (0, 1); nil means the policy default.
	Thresholds []float64
	Auditor    *Auditor
	Metrics    *Metrics
	// AfterCall, when set, is called each time a call (a MessageResult
	// exchange) has passed the whole chain, delivered or not: serve wakes
	// its heap trimmer there, so that the garbage a call left is returned
	// once the process goes quiet. It must not block. Optional.
	AfterCall func()
}

// ErrChain is wrapped by the errors of NewChain and NewControlChain.
var ErrChain = errors.New("intercept: cannot build the chain")

func (p Parts) check(needAll bool) error {
	var missing []string
	if needAll {
		if p.Scrubber == nil {
			missing = append(missing, "no Scrubber (to turn scrubbing off, build one from settings that disable it)")
		}
		if p.Counter == nil {
			missing = append(missing, "no token Counter")
		}
		if p.Brancher == nil {
			missing = append(missing, "no Brancher (the branch manager)")
		}
		if p.Thresholds != nil {
			if err := checkThresholds(p.Thresholds); err != nil {
				missing = append(missing, err.Error())
			}
		}
	}
	if p.Auditor == nil {
		missing = append(missing, "no Auditor")
	}
	if p.Metrics == nil {
		missing = append(missing, "no Metrics")
	}
	if len(missing) == 0 {
		return nil
	}
	err := ErrChain
	for _, m := range missing {
		err = fmt.Errorf("%w: %s", err, m)
	}
	return err
}

func checkThresholds(t []float64) error {
	if len(t) != 3 {
		return fmt.Errorf("Thresholds has %d values, want 3 (caution, warning, critical)", len(t))
	}
	for i, f := range t {
		if !(f > 0 && f < 1) || (i > 0 && f <= t[i-1]) {
			return fmt.Errorf("Thresholds %v: want three ascending fractions in (0, 1)", t)
		}
	}
	return nil
}

// NewChain returns foldproxy's whole chain for a forwarded call, listed
// outermost first as Chain takes them: metrics, audit, budget, tokens,
// scrub, behind Parts.AfterCall when it is set. A result meets them in the reverse order on its way back to the
// agent: it is scrubbed first, so that nothing downstream (the count, the
// archive, the audit log) ever holds a raw secret; then counted, then
// charged to its branch (and cut at the budget), then audited, and the
// metrics see the whole exchange, from the request to the response's
// release. serve, the daemon and the benchmarks all build their chain
// here, and TestStandardChainOrder pins the order with the real parts.
//
// Every kind of message to the agent passes the chain; the five
// interceptors act on results (MessageResult) and pass a relayed
// notification or server-to-client request through untouched, as its
// innermost handler (the proxy's) scrubs it and reports its redactions.
func NewChain(p Parts) ([]Interceptor, error) {
	if err := p.check(true); err != nil {
		return nil, err
	}
	return p.withHooks(
		Observe(p.Metrics),
		Audit(p.Auditor),
		Budget(p.Brancher, p.Counter, p.Thresholds),
		Tokens(p.Counter),
		Scrub(p.Scrubber),
	), nil
}

// NewControlChain returns the interceptors for foldproxy's own control
// tools (branch_create and the others), outermost first: metrics, audit.
// Their answers are foldproxy's, so they are neither scrubbed nor charged
// here (the fold manager charges what it returns). Only Auditor and Metrics
// are needed.
func NewControlChain(p Parts) ([]Interceptor, error) {
	if err := p.check(false); err != nil {
		return nil, err
	}
	return p.withHooks(Observe(p.Metrics), Audit(p.Auditor)), nil
}

// withHooks returns ics, each acting on results only, behind the
// AfterCall hook when there is one.
func (p Parts) withHooks(ics ...Interceptor) []Interceptor {
	out := make([]Interceptor, 0, len(ics)+1)
	if p.AfterCall != nil {
		out = append(out, afterCall(p.AfterCall))
	}
	for _, ic := range ics {
		out = append(out, resultsOnly(ic))
	}
	return out
}

// resultsOnly runs ic for a result (MessageResult) and passes any other
// kind of exchange straight to the next handler.
func resultsOnly(ic Interceptor) Interceptor {
	return func(next Handler) Handler {
		h := ic(next)
		return func(ctx context.Context, ex *Exchange) error {
			if ex.Kind != MessageResult {
				return next(ctx, ex)
			}
			return h(ctx, ex)
		}
	}
}

// afterCall calls f once a result has passed the rest of the chain.
func afterCall(f func()) Interceptor {
	return func(next Handler) Handler {
		return func(ctx context.Context, ex *Exchange) error {
			err := next(ctx, ex)
			if ex.Kind == MessageResult {
				f()
			}
			return err
		}
	}
}
