package intercept

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/foldproxy/foldproxy/fold"
)

// recorder returns an interceptor that logs "name>" on the way in and
// "<name" on the way out.
func recorder(name string, log *[]string) Interceptor {
	return func(next Handler) Handler {
		return func(ctx context.Context, ex *Exchange) error {
			*log = append(*log, name+">")
			err := next(ctx, ex)
			*log = append(*log, "<"+name)
			return err
		}
	}
}

// TestChainOrder pins Chain's convention: the first listed runs outermost,
// so the request meets the interceptors in the order listed on its way in
// and the result meets them in reverse on its way back.
func TestChainOrder(t *testing.T) {
	var log []string
	names := []string{"metrics", "audit", "budget", "tokens", "scrub"}
	var ics []Interceptor
	for _, n := range names {
		ics = append(ics, recorder(n, &log))
	}
	ics = append(ics[:2], append([]Interceptor{nil}, ics[2:]...)...) // a nil interceptor is skipped
	h := Chain(func(ctx context.Context, ex *Exchange) error {
		log = append(log, "upstream")
		return nil
	}, ics...)
	if err := h(context.Background(), &Exchange{}); err != nil {
		t.Fatal(err)
	}
	want := "metrics> audit> budget> tokens> scrub> upstream <scrub <tokens <budget <audit <metrics"
	if got := strings.Join(log, " "); got != want {
		t.Errorf("chain order:\n got %s\nwant %s", got, want)
	}
}

// TestChainTokensInsideBudget checks the real tokens and budget
// interceptors in the fixed order: budget sets Remaining before tokens
// counts against it, tokens counts the scrubbed result, and audit sees the
// delivered result with its figures.
func TestChainTokensInsideBudget(t *testing.T) {
	c := newCounter(t, "")
	f := newFake(fold.Branch{ID: "b-1", Parent: "root-s1", Depth: 1, Budget: 40})
	long := strings.Repeat("secret-free line of output\n", 50)
	scrub := func(next Handler) Handler {
		return func(ctx context.Context, ex *Exchange) error {
			err := next(ctx, ex)
			ex.Result = json.RawMessage(strings.Replace(string(ex.Result), "SECRET", "[REDACTED:x]", 1))
			return err
		}
	}
	var audited Exchange
	audit := func(next Handler) Handler {
		return func(ctx context.Context, ex *Exchange) error {
			err := next(ctx, ex)
			audited = *ex
			return err
		}
	}
	var metered string
	metrics := func(next Handler) Handler {
		return func(ctx context.Context, ex *Exchange) error {
			err := next(ctx, ex)
			metered = ex.Outcome
			return err
		}
	}
	var remainingUpstream int
	up := func(ctx context.Context, ex *Exchange) error {
		remainingUpstream = ex.Remaining
		ex.Result = textResult(t, "SECRET\n"+long)
		return nil
	}
	h := Chain(up, metrics, audit, Budget(f, c, nil), Tokens(c), scrub)
	if err := h(context.Background(), &Exchange{Session: "s1", Method: "tools/call"}); err != nil {
		t.Fatal(err)
	}
	if remainingUpstream != 40 {
		t.Errorf("upstream saw Remaining %d, want 40 (set by budget on the way in)", remainingUpstream)
	}
	if !audited.Over || audited.ResultTokens <= 40 {
		t.Errorf("audit saw ResultTokens %d, Over %v; want over 40", audited.ResultTokens, audited.Over)
	}
	if audited.Outcome != OutcomeCut || metered != OutcomeCut || audited.DeliveredTokens > 40 || audited.CutHandle == "" {
		t.Errorf("audit saw outcome %q, delivered %d, handle %q; metrics saw %q", audited.Outcome, audited.DeliveredTokens, audited.CutHandle, metered)
	}
	if strings.Contains(string(audited.Result), "SECRET") || strings.Contains(string(f.charges[0].Result), "SECRET") {
		t.Errorf("a raw secret passed scrub: archived %s", f.charges[0].Result)
	}
}
