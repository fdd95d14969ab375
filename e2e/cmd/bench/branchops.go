package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
)

// runBranchOps measures section 3: branch_create and branch_return through
// the real binary over stdio (Badger state, fsynced writes), next to ping
// and a 10-byte upstream call measured in the same rounds.
func runBranchOps(ctx context.Context, e *env, res *results) error {
	const sec = "3 branch ops (stdio)"
	// A round's p99 must rest on more than its few slowest samples: with
	// 150 calls it was the second slowest, one preemption on a shared
	// 2-core machine, and the ratio of two such p99s moved between 0.84x
	// and 3.35x for the same binary. 1,500 calls a round put 15 samples
	// above it (about 2 s per op and round).
	n, warm := 1500, 50
	if e.quick {
		n, warm = 200, 10
	}
	p, err := e.startProxy(ctx, "branchops", map[string]any{"replay": e.replayEntry()}, "replay__emit", "branch_create")
	if err != nil {
		return err
	}
	defer p.close()

	var ping, tiny, create, ret, floor roundStats
	one := func(pings, tinies, creates, rets, floors *[]time.Duration) error {
		t0 := time.Now()
		if err := p.Ping(ctx); err != nil {
			return fmt.Errorf("ping: %w", err)
		}
		t1 := time.Now()
		if _, err := p.call(ctx, "replay__emit", map[string]any{"bytes": 10}); err != nil {
			return err
		}
		t2 := time.Now()
		id, err := createBranch(ctx, p, map[string]any{"description": "bench branch", "timeout_seconds": 600})
		if err != nil {
			return err
		}
		t3 := time.Now()
		if _, err := p.call(ctx, "branch_return", map[string]any{"branch_id": id, "message": "done: nothing to report"}); err != nil {
			return err
		}
		t4 := time.Now()
		if err := refusedStatus(ctx, p); err != nil {
			return err
		}
		t5 := time.Now()
		if pings != nil {
			*pings = append(*pings, t1.Sub(t0))
			*tinies = append(*tinies, t2.Sub(t1))
			*creates = append(*creates, t3.Sub(t2))
			*rets = append(*rets, t4.Sub(t3))
			*floors = append(*floors, t5.Sub(t4))
		}
		return nil
	}
	for range warm {
		if err := one(nil, nil, nil, nil, nil); err != nil {
			return err
		}
	}
	e.log.Info("branch ops", "pairs", n, "rounds", e.rounds)
	for range e.rounds {
		var a, b, c, d, f []time.Duration
		for range n {
			if err := one(&a, &b, &c, &d, &f); err != nil {
				return err
			}
		}
		ping.add(a)
		tiny.add(b)
		create.add(c)
		ret.add(d)
		floor.add(f)
	}
	note := fmt.Sprintf("%d ops x %d rounds; durable Badger", n, e.rounds)
	for _, x := range []struct {
		name string
		st   *roundStats
	}{{"branch_create", &create}, {"branch_return", &ret}} {
		res.add(row{Section: sec, Metric: x.name + " p50", Value: ms(x.st.P50()), Baseline: ms(ping.P50()) + " ping",
			Ratio: ratio(float64(x.st.P50()), float64(ping.P50())), Num: msf(x.st.P50()), Base: msf(ping.P50()), Unit: "ms", Note: note})
		res.add(row{Section: sec, Metric: x.name + " p99", Value: ms(x.st.P99()), Baseline: ms(ping.P99()) + " ping",
			Ratio: ratio(float64(x.st.P99()), float64(ping.P99())), Num: msf(x.st.P99()), Base: msf(ping.P99()), Unit: "ms",
			Target: "<= 1.50x ping", Met: met(float64(x.st.P99()) <= 1.5*float64(ping.P99()))})
	}
	res.add(row{Section: sec, Metric: "10 B upstream call p50/p99", Value: ms(tiny.P50()) + " / " + ms(tiny.P99()),
		Baseline: ms(ping.P50()) + " / " + ms(ping.P99()) + " ping", Num: msf(tiny.P50()), Base: msf(ping.P50()), Unit: "ms",
		Note: "no-op round trips, same rounds"})
	// The ping's client sends no arguments and parses an empty result; a
	// tools/call costs the client (mcp-go) more on both sides. A fold
	// tools/call refused at once shows that part: the same client work and
	// the whole chain (audit record included), without a branch's work.
	res.add(row{Section: sec, Metric: "tools/call floor p50/p99", Value: ms(floor.P50()) + " / " + ms(floor.P99()),
		Baseline: ms(ping.P50()) + " / " + ms(ping.P99()) + " ping", Ratio: ratio(float64(floor.P99()), float64(ping.P99())),
		Num: msf(floor.P50()), Base: msf(ping.P50()), Unit: "ms",
		Note: "branch_status of an unknown id (refused), same rounds; ratio of the p99s"})
	return nil
}

// refusedStatus calls branch_status for a branch that does not exist and
// expects the refusal.
func refusedStatus(ctx context.Context, p *mcpPeer) error {
	r, err := p.CallTool(ctx, mcp.CallToolRequest{Params: mcp.CallToolParams{Name: "branch_status",
		Arguments: map[string]any{"branch_id": "b-0000000000000000"}}})
	if err != nil {
		return fmt.Errorf("%s: branch_status: %w%s", p.name, err, p.stderr.tail())
	}
	if !r.IsError {
		return fmt.Errorf("%s: branch_status of an unknown branch was not refused: %s", p.name, truncate(resultText(r), 200))
	}
	return nil
}

// createBranch calls branch_create and returns the new branch's id.
func createBranch(ctx context.Context, p *mcpPeer, args map[string]any) (string, error) {
	r, err := p.call(ctx, "branch_create", args)
	if err != nil {
		return "", err
	}
	var ans struct {
		BranchID string `json:"branch_id"`
	}
	if err := json.Unmarshal([]byte(resultText(r)), &ans); err != nil || ans.BranchID == "" {
		return "", fmt.Errorf("branch_create: no branch_id in %q (%v)", truncate(resultText(r), 200), err)
	}
	return ans.BranchID, nil
}
