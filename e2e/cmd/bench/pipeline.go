package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"github.com/foldproxy/foldproxy/intercept"
	"github.com/foldproxy/foldproxy/intercept/secrets"
)

// corpus is the tools/call result JSON of every step of the trajectories.
type corpus struct {
	results []json.RawMessage
	bytes   int64
}

func loadCorpus(path string) (*corpus, error) {
	outs, err := loadOutputs(path)
	if err != nil {
		return nil, err
	}
	c := &corpus{results: make([]json.RawMessage, len(outs))}
	for i, o := range outs {
		c.results[i] = toolResult(o)
		c.bytes += int64(len(c.results[i]))
	}
	return c, nil
}

// pass runs work over every result of the corpus with p workers, worker w
// taking the results w, w+p, w+2p..., and returns the wall time.
func (c *corpus) pass(p int, work func(w int, r json.RawMessage) error) (time.Duration, error) {
	var wg sync.WaitGroup
	errs := make([]error, p)
	t0 := time.Now()
	for w := range p {
		wg.Go(func() {
			for i := w; i < len(c.results); i += p {
				if err := work(w, c.results[i]); err != nil {
					errs[w] = err
					return
				}
			}
		})
	}
	wg.Wait()
	return time.Since(t0), errors.Join(errs...)
}

// scrubPass is one scrub-only pass, as both the harness and its stdlib
// child run it.
func scrubPass(ctx context.Context, c *corpus, s *secrets.Scrubber, p int) (time.Duration, error) {
	return c.pass(p, func(_ int, r json.RawMessage) error {
		_, _, err := s.ScrubJSON(ctx, r)
		return err
	})
}

// runPipeline measures section 2: throughput over the real tool output of
// the trajectory file, for scrub only, count only, both, and the full
// chain around an in-memory upstream, at GOMAXPROCS 1 and 2 (with as many
// workers). The scrub is also measured with gitleaks built on the standard
// library's regexp, by a child process: this harness built without the
// gore2regex tag, driven round by round over a pipe so that both engines
// are measured in alternation in the same run.
func runPipeline(ctx context.Context, e *env, res *results) error {
	const sec = "2 pipeline MB/s"
	c, err := loadCorpus(e.data)
	if err != nil {
		return err
	}
	e.log.Info("pipeline corpus", "results", len(c.results), "MB", float64(c.bytes)/1e6)
	prev := runtime.GOMAXPROCS(0)
	defer runtime.GOMAXPROCS(prev)

	dir, err := os.MkdirTemp(e.tmp, "pipeline-")
	if err != nil {
		return err
	}
	st, err := newStack(ctx, dir, nil)
	if err != nil {
		return err
	}
	defer st.close()
	// The same chain with the fold manager on the in-memory store: the
	// difference is what archiving every result in Badger costs.
	dirm, err := os.MkdirTemp(e.tmp, "pipeline-mem-")
	if err != nil {
		return err
	}
	stm, err := newStackOn(ctx, dirm, st.scrub, true)
	if err != nil {
		return err
	}
	defer stm.close()

	child, err := startScrubChild(ctx, e)
	if err != nil {
		e.log.Warn("pipeline: the stdlib-regexp scrub child did not start; its row is skipped", "err", err)
	}
	if child != nil {
		defer child.close()
	}

	// One session per worker, so that parallel workers charge different
	// root branches, as parallel agents do.
	procs := []int{1, 2}
	if runtime.NumCPU() < 2 {
		e.log.Warn("pipeline: one CPU only; GOMAXPROCS 2 still runs two workers")
	}
	for _, p := range procs {
		for w := range p {
			for _, x := range []*stack{st, stm} {
				if err := x.openSession(ctx, fmt.Sprintf("pipe-%d-%d", p, w)); err != nil {
					return err
				}
			}
		}
	}
	const memChain = "full chain, in-memory store"
	modes := []string{"scrub", "count", "scrub+count", "full chain", memChain}
	work := pipelineWork(ctx, st, stm, memChain)

	// Warm up every path once (tokenizer tables, regexp compilation,
	// Badger's first writes).
	runtime.GOMAXPROCS(2)
	for _, m := range modes {
		if _, err := c.pass(2, work[m](2)); err != nil {
			return fmt.Errorf("warm-up %s: %w", m, err)
		}
	}

	rounds := e.rounds
	times := map[string][]float64{} // mode@p -> MB/s per round
	// The full chain at GOMAXPROCS 1 by the CPU time the process used
	// (every thread: the store's background work included), besides
	// the wall clock: what a core does, whatever the machine's
	// neighbours take of it meanwhile.
	var cpuRates []float64
	for r := range rounds {
		for _, p := range procs {
			runtime.GOMAXPROCS(p)
			for _, m := range modes {
				timed := m == "full chain" && p == 1
				var c0 time.Duration
				if timed {
					c0, timed = selfCPU()
				}
				d, err := c.pass(p, work[m](p))
				if err != nil {
					return fmt.Errorf("%s at GOMAXPROCS %d: %w", m, p, err)
				}
				if timed {
					if c1, ok := selfCPU(); ok {
						cpuRates = append(cpuRates, mbps(c.bytes, c1-c0))
					}
				}
				times[pipeKey(m, p)] = append(times[pipeKey(m, p)], mbps(c.bytes, d))
			}
			if child != nil {
				d, err := child.round(p)
				if err != nil {
					e.log.Warn("pipeline: the stdlib-regexp scrub child failed; its row is skipped", "err", err)
					child.close()
					child = nil
				} else {
					times[pipeKey("scrub stdlib", p)] = append(times[pipeKey("scrub stdlib", p)], mbps(c.bytes, d))
				}
			}
		}
		e.log.Info("pipeline round", "round", r+1, "of", rounds)
	}
	runtime.GOMAXPROCS(prev)

	pipelineRows(res, sec, memChain, c, rounds, modes, procs, times, cpuRates)
	return nil
}

// pipeKey names the figures of mode m at GOMAXPROCS p.
func pipeKey(m string, p int) string { return fmt.Sprintf("%s@%d", m, p) }

// pipelineWork is the work of each mode of section 2, by mode: given p
// workers, a function that runs worker w on one result. st is the stack on
// Badger, stm the one on the in-memory store (mode memChain).
func pipelineWork(ctx context.Context, st, stm *stack, memChain string) map[string]func(p int) func(w int, r json.RawMessage) error {
	fullChain := func(x *stack) func(p int) func(int, json.RawMessage) error {
		return func(p int) func(int, json.RawMessage) error {
			// One chain per worker around an in-memory upstream that hands
			// back the worker's current result.
			cur := make([]json.RawMessage, p)
			chains := make([]intercept.Handler, p)
			for w := range p {
				chains[w] = x.full(func(_ context.Context, ex *intercept.Exchange) error {
					ex.Result = cur[w]
					return nil
				})
			}
			return func(w int, r json.RawMessage) error {
				cur[w] = r
				ex := &intercept.Exchange{
					Session: fmt.Sprintf("pipe-%d-%d", p, w), Upstream: "replay", Method: "tools/call", Name: "run",
					Params: json.RawMessage(`{"name":"run","arguments":{"trajectory":"t","step":1}}`),
					Args:   json.RawMessage(`{"trajectory":"t","step":1}`), Start: time.Now(),
				}
				if err := chains[w](ctx, ex); err != nil {
					return err
				}
				if ex.Outcome != intercept.OutcomeOK || ex.Result == nil {
					return fmt.Errorf("full chain: outcome %q, err %v", ex.Outcome, ex.Err)
				}
				return nil
			}
		}
	}
	return map[string]func(p int) func(w int, r json.RawMessage) error{
		"scrub": func(int) func(int, json.RawMessage) error {
			return func(_ int, r json.RawMessage) error { _, _, err := st.scrub.ScrubJSON(ctx, r); return err }
		},
		"count": func(int) func(int, json.RawMessage) error {
			return func(_ int, r json.RawMessage) error {
				_, _, err := st.counter.CountResult("tools/call", r, -1)
				return err
			}
		},
		"scrub+count": func(int) func(int, json.RawMessage) error {
			return func(_ int, r json.RawMessage) error {
				out, _, err := st.scrub.ScrubJSON(ctx, r)
				if err != nil {
					return err
				}
				_, _, err = st.counter.CountResult("tools/call", out, -1)
				return err
			}
		},
		"full chain": fullChain(st),
		memChain:     fullChain(stm),
	}
}

// pipelineRows adds the rows of section sec: the median MB/s of each mode
// at each GOMAXPROCS in procs over the rounds (times), the full chain's
// per CPU second (cpuRates), and the stdlib-regexp scrub child's.
func pipelineRows(res *results, sec, memChain string, c *corpus, rounds int, modes []string, procs []int, times map[string][]float64, cpuRates []float64) {
	note := fmt.Sprintf("%.1f MB, %d results x %d rounds", float64(c.bytes)/1e6, len(c.results), rounds)
	for _, m := range modes {
		for _, p := range procs {
			v := median(times[pipeKey(m, p)])
			x := row{Section: sec, Metric: fmt.Sprintf("%s, GOMAXPROCS %d", m, p), Value: fmt.Sprintf("%.1f MB/s", v),
				Num: v, Unit: "MB/s", Note: fmt.Sprintf("%.1f MB/s per core", v/float64(p))}
			if p == 1 {
				x.Note = note
			}
			if m == "scrub" {
				x.Metric = fmt.Sprintf("scrub (%s), GOMAXPROCS %d", regexEngine, p)
				if s := times[pipeKey("scrub stdlib", p)]; len(s) > 0 {
					b := median(s)
					x.Baseline, x.Base, x.Ratio = fmt.Sprintf("%.1f MB/s stdlib", b), b, ratio(v, b)
				}
			}
			if m == memChain && p == 1 {
				if b := median(times[pipeKey("full chain", p)]); b > 0 {
					x.Baseline, x.Base, x.Ratio = fmt.Sprintf("%.1f MB/s on Badger", b), b, ratio(v, b)
				}
			}
			if m == "full chain" && (p > 1 || len(cpuRates) == 0) {
				x.Target, x.Met = ">= 60 MB/s per core", met(v/float64(p) >= 60)
			}
			if p > 1 && m != "full chain" {
				x.Note = fmt.Sprintf("%.1f MB/s per core", v/float64(p))
			}
			res.add(x)
			if m == "full chain" && p == 1 && len(cpuRates) > 0 {
				// The target's row: MB per second of a core's time.
				c := median(cpuRates)
				res.add(row{Section: sec, Metric: "full chain, GOMAXPROCS 1, per CPU second", Value: fmt.Sprintf("%.1f MB/s", c),
					Num: c, Unit: "MB/s", Target: ">= 60 MB/s per core", Met: met(c >= 60),
					Note: fmt.Sprintf("bytes over the process's CPU time (getrusage) in the passes above, %.1f MB/s by the wall clock", v)})
			}
		}
	}
	for _, p := range procs {
		if s := times[pipeKey("scrub stdlib", p)]; len(s) > 0 {
			v := median(s)
			res.add(row{Section: sec, Metric: fmt.Sprintf("scrub (stdlib regexp), GOMAXPROCS %d", p), Value: fmt.Sprintf("%.1f MB/s", v),
				Num: v, Unit: "MB/s", Note: "child process built without -tags gore2regex, rounds interleaved"})
		}
	}
}

// scrubChild is this harness built without the gore2regex tag, running in
// -scrub-worker mode: it loads the corpus and a scrubber, then runs one
// scrub pass for each line "P" it reads and answers with the pass's
// nanoseconds.
type scrubChild struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
	err *tailBuffer
}

func startScrubChild(ctx context.Context, e *env) (*scrubChild, error) {
	bin := filepath.Join(e.tmp, "bench-stdregexp")
	if err := goBuild(ctx, e.repo, bin, "./e2e/cmd/bench"); err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, bin, "-scrub-worker", "-data", e.data)
	ownGroup(cmd)
	ch := &scrubChild{cmd: cmd, err: &tailBuffer{max: 8 << 10}}
	cmd.Stderr = ch.err
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	ch.in, ch.out = in, bufio.NewReader(out)
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	line, err := ch.out.ReadString('\n')
	if err != nil || line != "ready\n" {
		ch.close()
		return nil, fmt.Errorf("scrub child: %q %v%s", line, err, ch.err.tail())
	}
	return ch, nil
}

// round asks the child for one pass at GOMAXPROCS p.
func (c *scrubChild) round(p int) (time.Duration, error) {
	if _, err := fmt.Fprintf(c.in, "%d\n", p); err != nil {
		return 0, err
	}
	line, err := c.out.ReadString('\n')
	if err != nil {
		return 0, fmt.Errorf("scrub child: %w%s", err, c.err.tail())
	}
	var ans struct {
		NS    int64  `json:"ns"`
		Error string `json:"error"`
	}
	if err := json.Unmarshal([]byte(line), &ans); err != nil {
		return 0, fmt.Errorf("scrub child: %q: %w", line, err)
	}
	if ans.Error != "" {
		return 0, errors.New(ans.Error)
	}
	return time.Duration(ans.NS), nil
}

func (c *scrubChild) close() {
	_ = c.in.Close()
	done := make(chan struct{})
	go func() { _ = c.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = killGroup(c.cmd)
		<-done
	}
}

// scrubWorker is the child's main loop (see scrubChild).
func scrubWorker(data string) error {
	ctx := context.Background()
	c, err := loadCorpus(data)
	if err != nil {
		return err
	}
	s, err := secrets.NewScrubber(defaultScrubPolicy(), nil)
	if err != nil {
		return err
	}
	runtime.GOMAXPROCS(2)
	if _, err := scrubPass(ctx, c, s, 2); err != nil { // warm-up
		return err
	}
	out := bufio.NewWriter(os.Stdout)
	fmt.Fprintln(out, "ready")
	out.Flush()
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		var p int
		if _, err := fmt.Sscanf(in.Text(), "%d", &p); err != nil || p < 1 {
			return fmt.Errorf("scrub worker: bad request %q", in.Text())
		}
		runtime.GOMAXPROCS(p)
		d, err := scrubPass(ctx, c, s, p)
		ans := map[string]any{"ns": d.Nanoseconds()}
		if err != nil {
			ans["error"] = err.Error()
		}
		b, _ := json.Marshal(ans)
		out.Write(append(b, '\n'))
		out.Flush()
	}
	return in.Err()
}
