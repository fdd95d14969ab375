package main

import (
	"context"
	"fmt"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
)

func mcpListToolsRequest() mcp.ListToolsRequest { return mcp.ListToolsRequest{} }

// sizeCase is one result size of the overhead section.
type sizeCase struct {
	label string
	bytes int
	calls int // per round
	warm  int
}

// runOverhead measures section 1: the per-call latency of replay's emit
// through foldproxy over stdio against the same server over stdio directly,
// with a bare byte-copying relay (e2e/servers/relay) in front of the same
// server as the floor: no stdio proxy can cost less than it. foldproxy is
// measured as agents run it by default (a relay attached to the project's
// daemon) and with --standalone (one process); two bare relays in series,
// the floor of the default mode's two processes, are measured too (in the
// default row's note). All clients are up for the
// whole section and each round measures them back to back, in an order
// that rotates, so that they see the same machine.
func runOverhead(ctx context.Context, e *env, res *results) error {
	const sec = "1 call overhead"
	cases := []sizeCase{
		{"10 B", 10, 300, 50},
		{"1 KB", 1000, 300, 50},
		{"100 KB", 100_000, 60, 10},
		{"1 MB", 1_000_000, 12, 3},
	}
	if e.quick {
		for i := range cases {
			cases[i].calls = max(cases[i].calls/4, 5)
			cases[i].warm = max(cases[i].warm/4, 2)
		}
	}
	direct, err := connectStdio(ctx, "direct replay", e.replay, "-data", e.data)
	if err != nil {
		return err
	}
	defer direct.close()
	relay, err := connectStdio(ctx, "bare relay", e.relay, e.replay, "-data", e.data)
	if err != nil {
		return err
	}
	defer relay.close()
	// Two relays in series: the floor of the default mode, whose two
	// hops (the agent's stdio process, then the daemon) are two processes
	// that each read and write every message.
	relay2, err := connectStdio(ctx, "two bare relays", e.relay, e.relay, e.replay, "-data", e.data)
	if err != nil {
		return err
	}
	defer relay2.close()
	proxied, err := e.startProxy(ctx, "overhead", map[string]any{"replay": e.replayEntry()}, "replay__emit")
	if err != nil {
		return err
	}
	defer proxied.close()
	alone, err := e.startProxyArgs(ctx, "overhead-standalone", map[string]any{"replay": e.replayEntry()}, []string{"--standalone"}, "replay__emit")
	if err != nil {
		return err
	}
	defer alone.close()

	type side struct {
		p    *mcpPeer
		tool string
	}
	const nDirect, nRelay, nProxy, nAlone, nRelay2 = 0, 1, 2, 3, 4
	sides := [5]side{{direct, "emit"}, {relay, "emit"}, {proxied, "replay__emit"}, {alone, "replay__emit"}, {relay2, "emit"}}
	for _, c := range cases {
		e.log.Info("overhead", "size", c.label, "calls", c.calls, "rounds", e.rounds)
		var st [len(sides)]roundStats
		for i, s := range sides {
			if _, err := timeCalls(ctx, s.p, s.tool, c.bytes, c.warm); err != nil {
				return fmt.Errorf("warm-up %s: %w", sides[i].p.name, err)
			}
		}
		for r := 0; r < e.rounds; r++ {
			for k := range sides {
				i := (k + r) % len(sides)
				samples, err := timeCalls(ctx, sides[i].p, sides[i].tool, c.bytes, c.calls)
				if err != nil {
					return err
				}
				st[i].add(samples)
			}
		}
		d50, d99 := st[nDirect].P50(), st[nDirect].P99()
		f50, f99 := st[nRelay].P50(), st[nRelay].P99()
		g50 := st[nRelay2].P50()
		for _, v := range []struct {
			i     int
			label string
			floor string
		}{{nProxy, "", fmt.Sprintf(", two in series %s (%s)", ms(g50), ratio(float64(g50), float64(d50)))}, {nAlone, ", --standalone", ""}} {
			p50, p99 := st[v.i].P50(), st[v.i].P99()
			r50 := float64(p50) / float64(d50)
			x := row{Section: sec, Metric: c.label + " p50" + v.label, Value: ms(p50), Baseline: ms(d50) + " direct",
				Ratio: ratio(float64(p50), float64(d50)), Floor: ratio(float64(f50), float64(d50)),
				Num: msf(p50), Base: msf(d50), FloorNum: msf(f50), Unit: "ms",
				Note: fmt.Sprintf("%d calls x %d rounds; bare relay %s%s", c.calls, e.rounds, ms(f50), v.floor)}
			switch c.bytes {
			case 10:
				x.Target, x.Met = "<= 1.50x direct", met(r50 <= 1.5)
			case 100_000, 1_000_000:
				x.Target, x.Met = "<= 2.00x direct", met(r50 <= 2.0)
			}
			res.add(x)
			res.add(row{Section: sec, Metric: c.label + " p99" + v.label, Value: ms(p99), Baseline: ms(d99) + " direct",
				Ratio: ratio(float64(p99), float64(d99)), Floor: ratio(float64(f99), float64(d99)),
				Num: msf(p99), Base: msf(d99), FloorNum: msf(f99), Unit: "ms",
				Note: fmt.Sprintf("+%s per call at p50 (bare relay +%s)", ms(p50-d50), ms(f50-d50))})
		}
	}
	return nil
}

// timeCalls calls tool(bytes) n times in a row and returns each latency.
func timeCalls(ctx context.Context, p *mcpPeer, tool string, bytes, n int) ([]time.Duration, error) {
	out := make([]time.Duration, 0, n)
	args := map[string]any{"bytes": bytes}
	for range n {
		t0 := time.Now()
		r, err := p.call(ctx, tool, args)
		d := time.Since(t0)
		if err != nil {
			return nil, err
		}
		if got := len(resultText(r)); got != bytes {
			return nil, fmt.Errorf("%s: %s(%d) returned %d bytes of text", p.name, tool, bytes, got)
		}
		out = append(out, d)
	}
	return out, nil
}

// msf is a duration in milliseconds as a float.
func msf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
