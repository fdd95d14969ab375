package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"
)

// upstreamSpec is one of the three upstreams of the start-up section.
type upstreamSpec struct {
	name    string
	command string
	args    []string
	tool    string // a tool it lists, by its own name
}

// runStartup measures section 6: wall time from exec to the first
// tools/list that lists the tools of all three upstreams, against the same
// three servers started directly and concurrently (until each has answered
// tools/list). The upstreams are two replay servers and server-filesystem
// on Node when e2e/node_modules is installed, else three replay servers.
// With -base, the base binary too, the three rotating round by round.
func runStartup(ctx context.Context, e *env, res *results) error {
	const sec = "6 start-up"
	specs := []upstreamSpec{
		{"a", e.replay, []string{"-data", e.data}, "emit"},
		{"b", e.replay, []string{"-data", e.data}, "emit"},
	}
	which := "replay x2 + server-filesystem (node)"
	if e.node != "" && e.fsScript != "" {
		root, err := os.MkdirTemp(e.tmp, "fsroot-")
		if err != nil {
			return err
		}
		specs = append(specs, upstreamSpec{"fs", e.node, []string{e.fsScript, root}, "read_text_file"})
	} else {
		which = "replay x3 (e2e/node_modules not installed)"
		specs = append(specs, upstreamSpec{"c", e.replay, []string{"-data", e.data}, "emit"})
	}
	servers := map[string]any{}
	var want []string
	for _, s := range specs {
		servers[s.name] = map[string]any{"command": s.command, "args": s.args}
		want = append(want, s.name+"__"+s.tool)
	}
	cfg, err := e.writeConfig("startup.json", servers, benchSettings())
	if err != nil {
		return err
	}

	var inits []time.Duration // exec to initialize answered, proxy rounds
	proxyOnceOf := func(bin string) func() (time.Duration, error) {
		return func() (time.Duration, error) {
			return startupOnce(ctx, e, bin, cfg, want, &inits)
		}
	}
	proxyOnce := proxyOnceOf(e.proxy)
	directOnce := func() (time.Duration, error) {
		t0 := time.Now()
		var wg sync.WaitGroup
		peers := make([]*mcpPeer, len(specs))
		errs := make([]error, len(specs))
		ends := make([]time.Duration, len(specs))
		for i, s := range specs {
			wg.Go(func() {
				p, err := startStdio("direct "+s.name, s.command, s.args...)
				if err != nil {
					errs[i] = err
					return
				}
				peers[i] = p
				if err := p.initialize(ctx); err != nil {
					errs[i] = err
					return
				}
				if err := waitTools(ctx, p, s.tool); err != nil {
					errs[i] = err
					return
				}
				ends[i] = time.Since(t0)
			})
		}
		wg.Wait()
		var end time.Duration
		for _, d := range ends {
			end = max(end, d)
		}
		for _, p := range peers {
			if p != nil {
				p.close()
			}
		}
		return end, errors.Join(errs...)
	}
	// One untimed round of each warms the page cache (binaries, Node's
	// modules).
	if _, err := proxyOnce(); err != nil {
		return err
	}
	inits = inits[:0]
	if _, err := directOnce(); err != nil {
		return err
	}
	// The sides of a round, in an order that rotates: foldproxy, the
	// servers directly, and with -base the base binary.
	sides := []func() (time.Duration, error){proxyOnce, directOnce}
	if e.base != "" {
		baseOnce := proxyOnceOf(e.base)
		if _, err := baseOnce(); err != nil {
			return err
		}
		sides = append(sides, baseOnce)
	}
	times := make([][]time.Duration, len(sides))
	e.log.Info("start-up", "rounds", e.rounds, "upstreams", which)
	for r := range e.rounds {
		for k := range sides {
			i := (k + r) % len(sides)
			d, err := sides[i]()
			if err != nil {
				return err
			}
			times[i] = append(times[i], d)
		}
	}
	p50, d50 := median(times[0]), median(times[1])
	res.add(row{Section: sec, Metric: "exec to tools/list with 3 upstreams, median", Value: ms(p50), Baseline: ms(d50) + " direct",
		Ratio: ratio(float64(p50), float64(d50)), Num: msf(p50), Base: msf(d50), Unit: "ms",
		Target: "<= 1.50x direct", Met: met(float64(p50) <= 1.5*float64(d50)),
		Note: fmt.Sprintf("%s; %d rounds; tools: %s", which, e.rounds, strings.Join(want, ", "))})
	if len(sides) > 2 {
		b50 := median(times[2])
		res.add(row{Section: sec, Metric: "exec to tools/list with 3 upstreams, median, base", Value: ms(b50), Baseline: ms(d50) + " direct",
			Ratio: ratio(float64(b50), float64(d50)), Num: msf(b50), Base: msf(d50), Unit: "ms",
			Note: "the base binary (-base), rounds interleaved"})
	}
	i50 := median(inits)
	res.add(row{Section: sec, Metric: "exec to initialize answered, median", Value: ms(i50), Num: msf(i50), Unit: "ms",
		Note: "foldproxy's own start (state store, scrubber rules, tokenizer) before the upstreams matter"})
	return runStartupSlow(ctx, e, res, cfg, want)
}

// startupOnce is one start of foldproxy (bin) over stdio on cfg: the time
// from exec to a tools/list that names every tool of want. The time to the
// initialize answer is added to inits.
func startupOnce(ctx context.Context, e *env, bin, cfg string, want []string, inits *[]time.Duration) (time.Duration, error) {
	state, err := e.stateDir("startup")
	if err != nil {
		return 0, err
	}
	t0 := time.Now()
	p, err := startStdio("foldproxy startup", bin, "serve", "--config", cfg, "--state", state, "--log-level", "warn")
	if err != nil {
		return 0, err
	}
	defer p.close()
	if err := p.initialize(ctx); err != nil {
		return 0, err
	}
	tInit := time.Since(t0)
	if err := waitTools(ctx, p, want...); err != nil {
		return 0, err
	}
	if bin != e.base {
		*inits = append(*inits, tInit)
	}
	return time.Since(t0), nil
}
