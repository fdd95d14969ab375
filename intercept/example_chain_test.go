package intercept_test

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/foldproxy/foldproxy/fold"
	"github.com/foldproxy/foldproxy/intercept"
	"github.com/foldproxy/foldproxy/intercept/secrets"
	"github.com/foldproxy/foldproxy/intercept/tokens"
	"github.com/foldproxy/foldproxy/policy"
)

// mainThread stands in for the branch manager (*fold.Manager in serve):
// every call is charged to the session's main thread, whose budget is
// unlimited.
type mainThread struct{ used int }

func (m *mainThread) Attribute(_ context.Context, session, _ string) (*fold.Branch, error) {
	return &fold.Branch{ID: session + "-root", Session: session, Status: fold.StatusActive}, nil
}

func (m *mainThread) Charge(_ context.Context, _, branch string, fit func(fold.Budget) (fold.Charge, error)) (*fold.ChargeResult, error) {
	c, err := fit(fold.Budget{Branch: branch, Used: m.used, Remaining: -1})
	if err != nil {
		return nil, err
	}
	m.used += c.Tokens
	return &fold.ChargeResult{Used: m.used, Level: c.Level}, nil
}

// A chain built by NewChain over a stand-in for the upstream: the result
// comes back with its secret scrubbed, the redaction counted by rule, and
// the result's tokens counted and charged to the session's main thread.
func ExampleNewChain() {
	ctx := context.Background()
	set := policy.Default()
	scrubber, err := secrets.NewScrubber(set.Scrub, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	counter, err := tokens.NewCounter(set.Tokens)
	if err != nil {
		fmt.Println(err)
		return
	}
	auditor, err := intercept.NewAuditor(set.Audit, "", nil) // no audit file
	if err != nil {
		fmt.Println(err)
		return
	}
	calls := 0
	chain, err := intercept.NewChain(intercept.Parts{
		Scrubber: scrubber, Counter: counter, Brancher: &mainThread{}, Auditor: auditor, Metrics: intercept.NewMetrics(),
		AfterCall: func() { calls++ },
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	// The upstream answers with a token in its text.
	upstream := func(_ context.Context, ex *intercept.Exchange) error {
		ex.Result = json.RawMessage(`{"content":[{"type":"text","text":"deploy key ghp_A1b2C3d4E5f6G7h8J9k0L1m2N3p4Q5r6S7t8"}]}`)
		return nil
	}
	h := intercept.Chain(upstream, chain...)
	ex := &intercept.Exchange{Session: "s1", Upstream: "gh", Method: "tools/call", Name: "read", Params: json.RawMessage(`{"name":"read"}`)}
	if err := h(ctx, ex); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(ex.Kind, ex.Outcome)
	fmt.Println(string(ex.Result))
	fmt.Println("redactions:", ex.Redactions)
	fmt.Println("tokens counted:", ex.ResultTokens > 0, "charged to the main thread:", ex.BudgetUsed == ex.DeliveredTokens)
	fmt.Println("calls seen by AfterCall:", calls)
	// Output:
	// result ok
	// {"content":[{"type":"text","text":"deploy key [REDACTED:github-pat]"}]}
	// redactions: map[github-pat:1]
	// tokens counted: true charged to the main thread: true
	// calls seen by AfterCall: 1
}
