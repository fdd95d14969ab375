package main

import (
	"context"
	"fmt"
	"strings"
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

// overheadSide is one way of reaching the fast server in the overhead
// section.
type overheadSide struct {
	label string // "" for foldproxy's default mode
	p     *rawPeer
	tool  string
	pids  []int // foldproxy's processes, whose CPU time is its work
	st    [4]roundStats
	cpu   [4]time.Duration // CPU time of pids over the timed calls, by size
	n     [4]int           // timed calls, by size
}

// runOverhead measures section 1: the per-call latency of emit(bytes) of
// the fast server (e2e/servers/fast: realistic tool output prepared in
// advance, raw JSON-RPC) through foldproxy over stdio, against the same
// server over stdio directly, with a bare byte-copying relay
// (e2e/servers/relay) in front of the same server as the floor, and two of
// them in series. Every side is driven by a raw JSON-RPC client (raw.go),
// clock to the last byte of the answer. foldproxy is measured as agents
// run it by default (a stdio process attached to the project's daemon,
// which on Linux serves the agent's pipes itself), with the attached
// process relaying every line (FOLDPROXY_ATTACH=relay, the fallback), and
// with --standalone (one process); with -base, the base binary's default
// mode and --standalone too. Besides the latency, the CPU time foldproxy's
// processes used over the calls is its work: for the large results, as MB
// of results per CPU second. All sides are up for the whole section and
// each round measures them back to back, in an order that rotates, so that
// they see the same machine.
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
	fastArgs := []string{"-data", e.data}
	var sides []*overheadSide
	defer func() {
		for _, s := range sides {
			s.p.close()
		}
	}()
	add := func(label string, p *rawPeer, tool string, pids []int) {
		sides = append(sides, &overheadSide{label: label, p: p, tool: tool, pids: pids})
	}
	direct, err := startRaw(ctx, "direct", nil, e.fast, fastArgs...)
	if err != nil {
		return err
	}
	add("direct", direct, "emit", nil)
	relay, err := startRaw(ctx, "bare relay", nil, e.relay, append([]string{e.fast}, fastArgs...)...)
	if err != nil {
		return err
	}
	add("bare relay", relay, "emit", nil)
	// Two relays in series: the floor of a default mode of two processes
	// that each read and write every message (the relay path).
	relay2, err := startRaw(ctx, "two bare relays", nil, e.relay, append([]string{e.relay, e.fast}, fastArgs...)...)
	if err != nil {
		return err
	}
	add("two bare relays", relay2, "emit", nil)
	type variant struct {
		label, bin string
		extra, env []string
	}
	variants := []variant{
		{"", e.proxy, nil, nil},
		{"relay path", e.proxy, nil, []string{"FOLDPROXY_ATTACH=relay"}},
		{"--standalone", e.proxy, []string{"--standalone"}, nil},
	}
	if e.base != "" {
		variants = append(variants, variant{"base", e.base, nil, nil}, variant{"base --standalone", e.base, []string{"--standalone"}, nil})
	}
	for _, v := range variants {
		name := "overhead"
		if v.label != "" {
			name += "-" + strings.NewReplacer(" ", "-", "--", "").Replace(v.label)
		}
		p, state, err := e.startFastProxy(ctx, name, v.bin, v.extra, v.env)
		if err != nil {
			return err
		}
		add(v.label, p, "fast__emit", proxyPIDs(p.pid(), state))
	}
	for ci, c := range cases {
		e.log.Info("overhead", "size", c.label, "calls", c.calls, "rounds", e.rounds)
		for _, s := range sides {
			for range c.warm {
				if err := s.p.call(ctx, s.tool, c.bytes); err != nil {
					return fmt.Errorf("warm-up %s: %w", s.p.name, err)
				}
			}
		}
		for r := 0; r < e.rounds; r++ {
			for k := range sides {
				s := sides[(k+r)%len(sides)]
				c0 := sumCPU(s.pids)
				samples := make([]time.Duration, 0, c.calls)
				for range c.calls {
					t0 := time.Now()
					if err := s.p.call(ctx, s.tool, c.bytes); err != nil {
						return err
					}
					samples = append(samples, time.Since(t0))
				}
				s.cpu[ci] += sumCPU(s.pids) - c0
				s.n[ci] += c.calls
				s.st[ci].add(samples)
			}
		}
		overheadRows(res, sec, e.rounds, c, ci, sides)
	}
	return nil
}

// findSide is the side labelled label, nil if none.
func findSide(sides []*overheadSide, label string) *overheadSide {
	for _, s := range sides {
		if s.label == label {
			return s
		}
	}
	return nil
}

// overheadRows adds section sec's rows for size case c (index ci): each
// foldproxy side's p50 (and p99) against the direct and bare-relay sides,
// and its results per CPU second for large results.
func overheadRows(res *results, sec string, rounds int, c sizeCase, ci int, sides []*overheadSide) {
	d, f, g := findSide(sides, "direct").st[ci], findSide(sides, "bare relay").st[ci], findSide(sides, "two bare relays").st[ci]
	d50, f50, g50 := d.P50(), f.P50(), g.P50()
	for _, s := range sides {
		if s.pids == nil {
			continue
		}
		p50, p99 := s.st[ci].P50(), s.st[ci].P99()
		suffix := ""
		if s.label != "" {
			suffix = ", " + s.label
		}
		x := row{Section: sec, Metric: c.label + " p50" + suffix, Value: ms(p50), Baseline: ms(d50) + " direct",
			Ratio: ratio(float64(p50), float64(d50)), Floor: ratio(float64(f50), float64(d50)), Floor2: ratio(float64(g50), float64(d50)),
			Num: msf(p50), Base: msf(d50), FloorNum: msf(f50), Floor2Num: msf(g50), Unit: "ms",
			Note: fmt.Sprintf("%d calls x %d rounds; bare relay %s, two in series %s; foldproxy's CPU %s a call",
				c.calls, rounds, ms(f50), ms(g50), ms(s.cpu[ci]/time.Duration(max(s.n[ci], 1))))}
		if s.label == "" || s.label == "--standalone" || s.label == "base" {
			switch c.bytes {
			case 10:
				x.Target, x.Met = "<= 1.50x direct", met(float64(p50) <= 1.5*float64(d50))
			case 100_000:
				x.Target, x.Met = "<= 2.00x direct", met(float64(p50) <= 2*float64(d50))
			case 1_000_000:
				x.Target, x.Met = "<= 2.50x direct", met(float64(p50) <= 2.5*float64(d50))
			}
		}
		res.add(x)
		if s.label == "" {
			res.add(row{Section: sec, Metric: c.label + " p99", Value: ms(p99), Baseline: ms(d.P99()) + " direct",
				Ratio: ratio(float64(p99), float64(d.P99())), Floor: ratio(float64(f.P99()), float64(d.P99())),
				Floor2: ratio(float64(g.P99()), float64(d.P99())),
				Num:    msf(p99), Base: msf(d.P99()), FloorNum: msf(f.P99()), Floor2Num: msf(g.P99()), Unit: "ms",
				Note: fmt.Sprintf("+%s per call at p50 (bare relay +%s)", ms(p50-d50), ms(f50-d50))})
		}
		if c.bytes >= 100_000 && s.cpu[ci] > 0 {
			v := mbps(int64(c.bytes)*int64(s.n[ci]), s.cpu[ci])
			y := row{Section: sec, Metric: c.label + " results per CPU second" + suffix, Value: fmt.Sprintf("%.1f MB/s", v),
				Num: v, Unit: "MB/s", Note: "the result bytes over the CPU time of foldproxy's processes (relay and daemon) during the calls"}
			if b := findSide(sides, "base"); b != nil && s != b && b.cpu[ci] > 0 {
				bv := mbps(int64(c.bytes)*int64(b.n[ci]), b.cpu[ci])
				y.Baseline, y.Base, y.Ratio = fmt.Sprintf("%.1f MB/s base", bv), bv, ratio(v, bv)
			}
			if s.label == "" || s.label == "base" {
				y.Target, y.Met = ">= 60 MB/s per core", met(v >= 60)
			}
			res.add(y)
		}
	}
}

// msf is a duration in milliseconds as a float.
func msf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
