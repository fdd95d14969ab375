package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/foldproxy/foldproxy/intercept"
)

// cutBytes is the size of the over-budget result.
const cutBytes = 10_000_000

// cutBudget is the branch's budget: all of it is left when the result comes.
const cutBudget = 8192

// generateText returns n bytes of the replay server's "text" kind: lines of
// twelve words, deterministic.
func generateText(n int) string {
	words := strings.Fields("the agent reads a file then runs the tests and folds the branch back into a short summary of what it found")
	var b strings.Builder
	b.Grow(n + 128)
	for i := 0; b.Len() < n; i++ {
		for j := 0; j < 12; j++ {
			if j > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(words[(i*7+j*3)%len(words)])
		}
		b.WriteString(".\n")
	}
	return b.String()[:n]
}

// runCut measures section 4: a 10 MB result arriving in a branch with 8,192
// tokens left, cut into the budget.
//
// In process, the tokens and budget interceptors run around an in-memory
// upstream with a real fold.Manager on Badger: the figure is the whole cut
// (count up to the budget, cut at a clean boundary, archive the call, store
// the remainder, force-return the branch). The same result at the root
// (unlimited: counted in full, archived, delivered) is the baseline.
//
// End to end, replay's emit(10 MB) is called through the binary over stdio
// inside such a branch, and at the root where it is forwarded whole.
func runCut(ctx context.Context, e *env, res *results) error {
	const sec = "4 10 MB cut"
	if err := runCutInProcess(ctx, e, res, sec); err != nil {
		res.fail(sec+" (in process)", err)
	}
	return runCutE2E(ctx, e, res, sec)
}

func runCutInProcess(ctx context.Context, e *env, res *results, sec string) error {
	dir, err := os.MkdirTemp(e.tmp, "cut-")
	if err != nil {
		return err
	}
	st, err := newStack(ctx, dir, nil)
	if err != nil {
		return err
	}
	defer st.close()
	const sess = "cut"
	if err := st.openSession(ctx, sess); err != nil {
		return err
	}
	result := toolResult(generateText(cutBytes))
	chain := st.budgetOnly(func(_ context.Context, ex *intercept.Exchange) error {
		ex.Result = result
		return nil
	})
	call := func(branch string) (*intercept.Exchange, time.Duration, error) {
		ex := &intercept.Exchange{
			Session: sess, Upstream: "replay", Method: "tools/call", Name: "emit", ExplicitBranch: branch,
			Params: json.RawMessage(`{"name":"emit","arguments":{"bytes":10000000}}`),
			Args:   json.RawMessage(`{"bytes":10000000}`), Start: time.Now(),
		}
		t0 := time.Now()
		err := chain(ctx, ex)
		return ex, time.Since(t0), err
	}
	cutOnce := func() (time.Duration, error) {
		id, err := st.createBranch(ctx, sess, map[string]any{"description": "cut bench", "budget": cutBudget, "timeout_seconds": 600})
		if err != nil {
			return 0, err
		}
		ex, d, err := call(id)
		if err != nil {
			return 0, err
		}
		if ex.Outcome != intercept.OutcomeCut || ex.DeliveredTokens > cutBudget {
			return 0, fmt.Errorf("in-process cut: outcome %q, %d tokens delivered (budget %d)", ex.Outcome, ex.DeliveredTokens, cutBudget)
		}
		return d, nil
	}
	rootOnce := func() (time.Duration, error) {
		ex, d, err := call("")
		if err != nil {
			return 0, err
		}
		if ex.Outcome != intercept.OutcomeOK {
			return 0, fmt.Errorf("in-process root call: outcome %q (%v)", ex.Outcome, ex.Err)
		}
		return d, nil
	}
	cutRounds, rootRounds := 15, 3
	if e.quick {
		cutRounds, rootRounds = 5, 1
	}
	if _, err := cutOnce(); err != nil { // warm-up
		return err
	}
	var cuts, roots []time.Duration
	e.log.Info("cut in process", "cuts", cutRounds, "root calls", rootRounds)
	for i := range cutRounds {
		d, err := cutOnce()
		if err != nil {
			return err
		}
		cuts = append(cuts, d)
		if i < rootRounds {
			d, err := rootOnce()
			if err != nil {
				return err
			}
			roots = append(roots, d)
		}
	}
	c50, r50 := median(cuts), median(roots)
	res.add(row{Section: sec, Metric: "in process: tokens+budget, cut p50", Value: ms(c50), Baseline: ms(r50) + " root, whole",
		Ratio: ratio(float64(c50), float64(r50)), Num: msf(c50), Base: msf(r50), Unit: "ms",
		Target: "<= 20 ms", Met: met(c50 <= 20*time.Millisecond),
		Note: fmt.Sprintf("max %s; %d cuts, %d root calls; Badger durable", ms(percentile(cuts, 100)), len(cuts), len(roots))})
	return nil
}

func runCutE2E(ctx context.Context, e *env, res *results, sec string) error {
	rounds := e.rounds
	if e.quick {
		rounds = 2
	}
	p, err := e.startProxy(ctx, "cut", map[string]any{"replay": e.replayEntry()}, "replay__emit", "branch_create")
	if err != nil {
		return err
	}
	defer p.close()
	direct, err := connectStdio(ctx, "direct replay", e.replay, "-data", e.data)
	if err != nil {
		return err
	}
	defer direct.close()

	args := func(branch string) map[string]any {
		a := map[string]any{"bytes": cutBytes}
		if branch != "" {
			a["branch_id"] = branch
		}
		return a
	}
	cutOnce := func() (time.Duration, error) {
		id, err := createBranch(ctx, p, map[string]any{"description": "cut bench", "budget": cutBudget, "timeout_seconds": 600})
		if err != nil {
			return 0, err
		}
		t0 := time.Now()
		r, err := p.call(ctx, "replay__emit", args(id))
		d := time.Since(t0)
		if err != nil {
			return 0, err
		}
		if n := len(resultText(r)); n >= cutBytes {
			return 0, fmt.Errorf("e2e cut: %d bytes delivered, want a cut result", n)
		}
		return d, nil
	}
	wholeOnce := func(peer *mcpPeer, tool string) (time.Duration, error) {
		t0 := time.Now()
		r, err := peer.call(ctx, tool, args(""))
		d := time.Since(t0)
		if err != nil {
			return 0, err
		}
		// The first block is the whole text; at the root, the summary of
		// the branch force-returned by the previous cut follows it once.
		if len(r.Content) == 0 {
			return 0, fmt.Errorf("%s: empty result", peer.name)
		}
		if tc, ok := mcp.AsTextContent(r.Content[0]); !ok || len(tc.Text) != cutBytes {
			return 0, fmt.Errorf("%s: the first block is not the %d bytes of text", peer.name, cutBytes)
		}
		return d, nil
	}
	if _, err := cutOnce(); err != nil { // warm-up
		return err
	}
	var cuts, roots, directs []time.Duration
	e.log.Info("cut end to end", "rounds", rounds)
	for range rounds {
		d, err := cutOnce()
		if err != nil {
			return err
		}
		cuts = append(cuts, d)
		if d, err = wholeOnce(p, "replay__emit"); err != nil {
			return err
		}
		roots = append(roots, d)
		if d, err = wholeOnce(direct, "emit"); err != nil {
			return err
		}
		directs = append(directs, d)
	}
	c50, r50, d50 := median(cuts), median(roots), median(directs)
	res.add(row{Section: sec, Metric: "end to end (stdio): emit 10 MB in branch, cut p50", Value: ms(c50), Baseline: ms(r50) + " root, whole",
		Ratio: ratio(float64(c50), float64(r50)), Num: msf(c50), Base: msf(r50), Unit: "ms",
		Note: fmt.Sprintf("%d rounds; includes scrubbing 10 MB", rounds)})
	res.add(row{Section: sec, Metric: "end to end (stdio): emit 10 MB at root p50", Value: ms(r50), Baseline: ms(d50) + " direct",
		Ratio: ratio(float64(r50), float64(d50)), Num: msf(r50), Base: msf(d50), Unit: "ms",
		Note: "forwarded whole: scrubbed, counted in full, archived"})
	return nil
}
