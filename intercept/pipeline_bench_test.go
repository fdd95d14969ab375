package intercept

import (
	"bufio"
	"compress/gzip"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/foldproxy/foldproxy/e2e/trajectory"
	"github.com/foldproxy/foldproxy/fold"
	"github.com/foldproxy/foldproxy/fold/store"
	"github.com/foldproxy/foldproxy/intercept/secrets"
	"github.com/foldproxy/foldproxy/intercept/tokens"
	"github.com/foldproxy/foldproxy/policy"
)

// Benchmarks of the result path, for profiling (go test -bench -cpuprofile).
// The table with baselines is e2e/cmd/bench; these use the same data, the
// trajectory outputs. Helpers are prefixed "pipe"; the CPU time per call
// (cpu-ns/op, cpuMB/s: what to compare on a loaded machine) is reported
// with reportCPU of scrub_bench_test.go.

// pipeTrajectories is the trajectory file, relative to this package's
// folder; the repository holds it under e2e/testdata.
const pipeTrajectories = "../e2e/testdata/trajectories/swe-dev.jsonl.gz"

// pipeResults returns every step output of the trajectories as a tools/call
// result, skipping the benchmark when the file is absent.
func pipeResults(tb testing.TB) []json.RawMessage {
	tb.Helper()
	f, err := os.Open(pipeTrajectories)
	if err != nil {
		tb.Fatalf("trajectory data (held under e2e/testdata): %v", err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		tb.Fatal(err)
	}
	sc := bufio.NewScanner(zr)
	sc.Buffer(nil, 64<<20)
	var res []json.RawMessage
	for sc.Scan() {
		var rec struct {
			Steps []struct {
				Output string `json:"output"`
			} `json:"steps"`
		}
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			tb.Fatal(err)
		}
		for _, s := range rec.Steps {
			res = append(res, pipeToolResult(s.Output))
		}
	}
	if err := sc.Err(); err != nil {
		tb.Fatal(err)
	}
	return res
}

// pipeToolResult wraps text as a tools/call result.
func pipeToolResult(text string) json.RawMessage {
	b, _ := json.Marshal(map[string]any{"content": []map[string]string{{"type": "text", "text": text}}})
	return b
}

// pipeStack is the pipeline as serve.go wires it, on a Badger store and an
// audit log in a temporary folder.
type pipeStack struct {
	set     policy.Settings
	counter *tokens.Counter
	scrub   *secrets.Scrubber
	mgr     *fold.Manager
	audit   *Auditor
	metrics *Metrics
}

func newPipeStack(tb testing.TB) *pipeStack {
	tb.Helper()
	set, err := policy.Parse([]byte(`{"fold":{"createsPerMinute":100000,"maxActivePerSession":1000,"maxActivePerInstance":100000}}`))
	if err != nil {
		tb.Fatal(err)
	}
	dir := tb.TempDir()
	store, err := store.OpenBadgerFsync(filepath.Join(dir, "badger"), nil, false) // as serve does by default
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { store.Close() })
	s := &pipeStack{set: set, metrics: NewMetrics()}
	if s.counter, err = tokens.NewCounter(set.Tokens); err != nil {
		tb.Fatal(err)
	}
	if s.scrub, err = secrets.NewScrubber(set.Scrub, nil); err != nil {
		tb.Fatal(err)
	}
	if s.audit, err = NewAuditor(set.Audit, filepath.Join(dir, "audit.jsonl"), nil); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.audit.Close() })
	s.mgr, err = fold.NewManager(context.Background(), fold.Options{
		Settings: set.Fold, Store: store, Scanner: s.scrub, Counter: s.counter, PruneInterval: -1,
	})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.mgr.Close() })
	return s
}

// memStore replaces the stack's manager by one on the in-memory store.
func (s *pipeStack) memStore(tb testing.TB) {
	tb.Helper()
	mgr, err := fold.NewManager(context.Background(), fold.Options{
		Settings: s.set.Fold, Store: store.NewMemStore(), Scanner: s.scrub, Counter: s.counter, PruneInterval: -1,
	})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { mgr.Close() })
	s.mgr = mgr
}

func (s *pipeStack) session(tb testing.TB, id string) {
	tb.Helper()
	if err := s.mgr.OpenSession(context.Background(), fold.SessionRecord{ID: id, Transport: "stdio"}); err != nil {
		tb.Fatal(err)
	}
}

func (s *pipeStack) branch(tb testing.TB, session string, budget int) string {
	tb.Helper()
	raw, _ := json.Marshal(map[string]any{"description": "bench", "budget": budget, "timeout_seconds": 600})
	out, err := s.mgr.CallTool(context.Background(), session, fold.ToolCreate, raw)
	if err != nil {
		tb.Fatal(err)
	}
	var res struct {
		BranchID string `json:"branch_id"`
	}
	if err := json.Unmarshal(answerJSON(tb, out), &res); err != nil || res.BranchID == "" {
		tb.Fatalf("branch_create: %s", out)
	}
	return res.BranchID
}

// answerJSON returns the JSON a fold tool answers with, carried as the
// text of its result's one content block.
func answerJSON(tb testing.TB, out json.RawMessage) json.RawMessage {
	tb.Helper()
	var r struct {
		StructuredContent json.RawMessage `json:"structuredContent"`
		Content           []struct {
			Text string `json:"text"`
		} `json:"content"`
	}
	if err := json.Unmarshal(out, &r); err != nil {
		tb.Fatalf("fold answer %s: %v", out, err)
	}
	if len(r.StructuredContent) > 0 {
		return r.StructuredContent
	}
	if len(r.Content) == 0 {
		tb.Fatalf("fold answer %s has no content", out)
	}
	return json.RawMessage(r.Content[0].Text)
}

func pipeBytes(rs []json.RawMessage) int64 {
	var n int64
	for _, r := range rs {
		n += int64(len(r))
	}
	return n
}

func BenchmarkPipelineCount(b *testing.B) {
	res := pipeResults(b)
	c, err := tokens.NewCounter(policy.Tokens{})
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(pipeBytes(res))
	cpu0 := cpuTime(b)
	for b.Loop() {
		for _, r := range res {
			if _, _, err := c.CountResult("tools/call", r, -1); err != nil {
				b.Fatal(err)
			}
		}
	}
	reportCPU(b, cpu0, int(pipeBytes(res)))
}

// BenchmarkPipelineCountParallel runs the count on every P with RunParallel:
// with -cpu 1,2 it shows whether counting scales.
func BenchmarkPipelineCountParallel(b *testing.B) {
	res := pipeResults(b)
	c, err := tokens.NewCounter(policy.Tokens{})
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(pipeBytes(res) / int64(len(res)))
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			if _, _, err := c.CountResult("tools/call", res[i%len(res)], -1); err != nil {
				b.Error(err)
				return
			}
			i++
		}
	})
}

// BenchmarkPipelineChainFull is the whole chain (scrub, tokens, budget, audit,
// metrics) around an in-memory upstream, at the root of one session, with
// the fold manager on Badger (durable, as served) and on the in-memory
// store: the difference is what archiving every result in Badger costs.
func BenchmarkPipelineChainFull(b *testing.B) {
	res := pipeResults(b)
	for _, store := range []string{"badger", "mem"} {
		b.Run(store, func(b *testing.B) {
			s := newPipeStack(b)
			if store == "mem" {
				s.memStore(b)
			}
			s.session(b, "s")
			var cur json.RawMessage
			h := Chain(func(_ context.Context, ex *Exchange) error { ex.Result = cur; return nil },
				Observe(s.metrics), Audit(s.audit), Budget(s.mgr, s.counter, nil), Tokens(s.counter), Scrub(s.scrub))
			ctx := context.Background()
			b.SetBytes(pipeBytes(res))
			cpu0 := cpuTime(b)
			for b.Loop() {
				for _, r := range res {
					cur = r
					ex := &Exchange{Session: "s", Upstream: "replay", Method: "tools/call", Name: "run", Args: json.RawMessage(`{}`)}
					if err := h(ctx, ex); err != nil {
						b.Fatal(err)
					}
				}
			}
			reportCPU(b, cpu0, int(pipeBytes(res)))
		})
	}
}

// pipeProse is n bytes of prose-like lines, as replay's emit "text" kind.
func pipeProse(n int) string {
	words := strings.Fields("the agent reads a file then runs the tests and folds the branch back into a short summary of what it found")
	var sb strings.Builder
	for i := 0; sb.Len() < n; i++ {
		for j := range 12 {
			if j > 0 {
				sb.WriteByte(' ')
			}
			sb.WriteString(words[(i*7+j*3)%len(words)])
		}
		sb.WriteString(".\n")
	}
	return sb.String()[:n]
}

// BenchmarkPipelineCutBadger10MB is a 10 MB result arriving in a fresh
// branch with 8,192 tokens: tokens and budget interceptors with a real
// Manager on Badger (BenchmarkCut10MB uses a fake Brancher). Each iteration
// creates its branch outside the timer.
func BenchmarkPipelineCutBadger10MB(b *testing.B) {
	res := pipeToolResult(pipeProse(10_000_000))
	s := newPipeStack(b)
	s.session(b, "s")
	h := Chain(func(_ context.Context, ex *Exchange) error { ex.Result = res; return nil },
		Budget(s.mgr, s.counter, nil), Tokens(s.counter))
	ctx := context.Background()
	for b.Loop() {
		b.StopTimer()
		id := s.branch(b, "s", 8192)
		b.StartTimer()
		ex := &Exchange{Session: "s", Upstream: "replay", Method: "tools/call", Name: "emit", ExplicitBranch: id, Args: json.RawMessage(`{}`)}
		if err := h(ctx, ex); err != nil {
			b.Fatal(err)
		}
		if ex.Outcome != OutcomeCut {
			b.Fatalf("outcome %q", ex.Outcome)
		}
	}
}

// BenchmarkPipelineChainTiny is one 10-byte tools/call result through the
// whole chain at the root, on Badger (durable, as served) and on the
// in-memory store: the difference is what durability costs a tiny call.
func BenchmarkPipelineChainTiny(b *testing.B) {
	res := pipeToolResult("0123456789")
	for _, store := range []string{"badger", "mem"} {
		b.Run(store, func(b *testing.B) {
			s := newPipeStack(b)
			if store == "mem" {
				s.memStore(b)
			}
			s.session(b, "s")
			h := Chain(func(_ context.Context, ex *Exchange) error { ex.Result = res; return nil },
				Observe(s.metrics), Audit(s.audit), Budget(s.mgr, s.counter, nil), Tokens(s.counter), Scrub(s.scrub))
			ctx := context.Background()
			cpu0 := cpuTime(b)
			for b.Loop() {
				ex := &Exchange{Session: "s", Upstream: "replay", Method: "tools/call", Name: "emit", Args: json.RawMessage(`{"bytes":10}`)}
				if err := h(ctx, ex); err != nil {
					b.Fatal(err)
				}
			}
			reportCPU(b, cpu0, len(res))
		})
	}
}

// BenchmarkPipelineScrubOnOff is the per-call cost of scrubbing: the full
// chain on 1 KB of real tool output, with the scrubber on and with it
// disabled (scrub.disabled), in the same run.
func BenchmarkPipelineScrubOnOff(b *testing.B) {
	all := pipeResults(b)
	var res json.RawMessage
	for _, r := range all {
		if len(r) >= 1024 && len(r) < 2048 {
			res = r
			break
		}
	}
	if res == nil {
		b.Skip("no 1-2 KB result in the trajectory file")
	}
	for _, mode := range []string{"on", "off"} {
		b.Run(mode, func(b *testing.B) {
			s := newPipeStack(b)
			sc := s.scrub
			if mode == "off" {
				var err error
				if sc, err = secrets.NewScrubber(policy.Scrub{Disabled: true}, nil); err != nil {
					b.Fatal(err)
				}
			}
			s.session(b, "s")
			h := Chain(func(_ context.Context, ex *Exchange) error { ex.Result = res; return nil },
				Observe(s.metrics), Audit(s.audit), Budget(s.mgr, s.counter, nil), Tokens(s.counter), Scrub(sc))
			ctx := context.Background()
			b.SetBytes(int64(len(res)))
			for b.Loop() {
				ex := &Exchange{Session: "s", Upstream: "replay", Method: "tools/call", Name: "run", Args: json.RawMessage(`{}`)}
				if err := h(ctx, ex); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkPipelineNewScrubber is building the scrubber (gitleaks' default
// rules compiled), which every start of the proxy pays before serving.
func BenchmarkPipelineNewScrubber(b *testing.B) {
	for b.Loop() {
		if _, err := secrets.NewScrubber(policy.Scrub{}, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// pipeMB returns n results of about 1 MB each of the bench's realistic
// tool output (trajectory.Mixed: the trajectory outputs, Go code, JSON
// records and log lines), each starting at another place, encoded as a Go
// MCP server encodes a result (encoding/json, HTML characters escaped).
func pipeMB(tb testing.TB, n int) []json.RawMessage {
	tb.Helper()
	var outs []string
	for _, r := range pipeResults(tb) {
		var v struct {
			Content []struct {
				Text string `json:"text"`
			} `json:"content"`
		}
		if err := json.Unmarshal(r, &v); err != nil {
			tb.Fatal(err)
		}
		outs = append(outs, v.Content[0].Text)
	}
	all := trajectory.Mixed(outs, 4<<20)
	out := make([]json.RawMessage, n)
	for i := range out {
		start := (i * 104_729) % (len(all) - 1_000_000)
		for start > 0 && !utf8.RuneStart(all[start]) {
			start--
		}
		end := start + 1_000_000
		for end > start && !utf8.RuneStart(all[end]) {
			end--
		}
		out[i] = pipeToolResult(all[start:end])
	}
	return out
}

// BenchmarkPipelineChain1MB is the whole chain on results of about 1 MB
// of realistic tool output (pipeMB), at the root of one session on
// Badger: the path of a large result, for profiling.
func BenchmarkPipelineChain1MB(b *testing.B) {
	res := pipeMB(b, 8)
	s := newPipeStack(b)
	s.session(b, "s")
	var cur json.RawMessage
	h := Chain(func(_ context.Context, ex *Exchange) error { ex.Result = cur; return nil },
		Observe(s.metrics), Audit(s.audit), Budget(s.mgr, s.counter, nil), Tokens(s.counter), Scrub(s.scrub))
	ctx := context.Background()
	b.SetBytes(int64(len(res[0])))
	cpu0 := cpuTime(b)
	i := 0
	for b.Loop() {
		cur = res[i%len(res)]
		i++
		ex := &Exchange{Session: "s", Upstream: "replay", Method: "tools/call", Name: "run", Args: json.RawMessage(`{}`)}
		if err := h(ctx, ex); err != nil {
			b.Fatal(err)
		}
		if ex.Outcome != OutcomeOK {
			b.Fatalf("outcome %q: %v", ex.Outcome, ex.Err)
		}
	}
	reportCPU(b, cpu0, len(res[0]))
}

// BenchmarkPipelineScrub1MB and BenchmarkPipelineCount1MB are the chain's
// two passes over the text of BenchmarkPipelineChain1MB's results, alone.
func BenchmarkPipelineScrub1MB(b *testing.B) {
	res := pipeMB(b, 8)
	s := testScrubber(b, policy.Scrub{})
	ctx := context.Background()
	b.SetBytes(int64(len(res[0])))
	cpu0 := cpuTime(b)
	i := 0
	for b.Loop() {
		if _, _, err := s.ScrubJSON(ctx, res[i%len(res)]); err != nil {
			b.Fatal(err)
		}
		i++
	}
	reportCPU(b, cpu0, len(res[0]))
}

func BenchmarkPipelineCount1MB(b *testing.B) {
	res := pipeMB(b, 8)
	c, err := tokens.NewCounter(policy.Tokens{})
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(res[0])))
	cpu0 := cpuTime(b)
	i := 0
	for b.Loop() {
		if _, _, err := c.CountResult("tools/call", res[i%len(res)], -1); err != nil {
			b.Fatal(err)
		}
		i++
	}
	reportCPU(b, cpu0, len(res[0]))
}
