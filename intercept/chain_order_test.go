package intercept

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/foldproxy/foldproxy/fold"
	"github.com/foldproxy/foldproxy/fold/store"
	"github.com/foldproxy/foldproxy/policy"
)

// realParts builds the parts of the chain as serve builds them: the real
// scrubber, counter, branch manager (on a memory store), audit log and
// metrics. It returns them with the audit log's path.
func realParts(t *testing.T) (Parts, *fold.Manager, string) {
	t.Helper()
	set := policy.Default()
	counter := newCounter(t, "")
	scrubber := testScrubber(t, set.Scrub)
	auditPath := filepath.Join(t.TempDir(), "audit.jsonl")
	auditor, err := NewAuditor(set.Audit, auditPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { auditor.Close() })
	mgr, err := fold.NewManager(context.Background(), fold.Options{
		Settings: set.Fold, Store: store.NewMemStore(), Scanner: scrubber, Counter: counter, PruneInterval: -1,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mgr.Close() })
	return Parts{Scrubber: scrubber, Counter: counter, Brancher: mgr, Thresholds: set.Fold.Thresholds, Auditor: auditor, Metrics: NewMetrics()}, mgr, auditPath
}

// snapshot is what a probe sees of an exchange as it passes.
type snapshot struct {
	branch     string // set by budget on the way in
	secret     bool   // the result still holds the raw secret
	redactions int    // set by scrub
	tokens     int    // ResultTokens, set by tokens
	outcome    string // set by budget
	audited    int    // records in the audit log
	metered    float64
	remaining  int // the limit tokens counted against
}

// TestStandardChainOrder pins the order of the chain NewChain builds, with
// the real interceptors serve uses, by what each one leaves on the exchange:
// probes are put between them, and each probe notes what it sees on the way
// in and on the way out. First listed runs outermost: metrics, audit,
// budget, tokens, scrub; so a result is scrubbed before it is counted,
// counted before it is charged (and cut), charged before it is audited,
// and audited before the metrics see it.
func TestStandardChainOrder(t *testing.T) {
	p, mgr, auditPath := realParts(t)
	ctx := context.Background()
	if err := mgr.OpenSession(ctx, fold.SessionRecord{ID: "s1", Transport: "stdio"}); err != nil {
		t.Fatal(err)
	}
	out, err := mgr.CallTool(ctx, "s1", fold.ToolCreate, json.RawMessage(`{"description":"order","budget":300}`))
	if err != nil {
		t.Fatal(err)
	}
	branch := answerField(t, out, "branch_id")

	ics, err := NewChain(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(ics) != 5 {
		t.Fatalf("NewChain returned %d interceptors, want 5", len(ics))
	}
	secret := "ghp_" + hiEntropy36
	auditLines := func() int {
		b, _ := os.ReadFile(auditPath)
		return bytes.Count(b, []byte("\n"))
	}
	in := make([]snapshot, 6)
	outs := make([]snapshot, 6)
	look := func(ex *Exchange) snapshot {
		n := 0
		for _, c := range ex.Redactions {
			n += c
		}
		return snapshot{
			branch: ex.Branch, secret: strings.Contains(string(ex.Result), secret), redactions: n,
			tokens: ex.ResultTokens, outcome: ex.Outcome, audited: auditLines(),
			metered:   testutil.ToFloat64(p.Metrics.calls.WithLabelValues("gh", "tools/call", OutcomeCut)),
			remaining: ex.Remaining,
		}
	}
	probe := func(i int) Interceptor {
		return func(next Handler) Handler {
			return func(ctx context.Context, ex *Exchange) error {
				in[i] = look(ex)
				err := next(ctx, ex)
				outs[i] = look(ex)
				return err
			}
		}
	}
	// probe 0, metrics, probe 1, audit, probe 2, budget, probe 3, tokens,
	// probe 4, scrub, probe 5, upstream.
	var list []Interceptor
	for i, ic := range ics {
		list = append(list, probe(i), ic)
	}
	list = append(list, probe(5))
	text := "token " + secret + "\n" + strings.Repeat("a line of tool output that goes on and on\n", 200)
	h := Chain(func(ctx context.Context, ex *Exchange) error {
		ex.Result = textResult(t, text)
		return nil
	}, list...)
	ex := &Exchange{Session: "s1", Upstream: "gh", Method: "tools/call", Name: "search", Args: json.RawMessage(`{}`)}
	if err := h(ctx, ex); err != nil {
		t.Fatal(err)
	}

	// On the way in, budget attributes the call: only probes inside it see
	// the branch.
	for i, s := range in {
		if want := i >= 3; (s.branch == branch) != want {
			t.Errorf("probe %d saw branch %q on the way in; inside budget: %v", i, s.branch, want)
		}
	}
	// On the way out, from the upstream outwards.
	scrubbed := outs[4]
	switch {
	case !outs[5].secret || outs[5].redactions != 0:
		t.Errorf("probe 5 (upstream side) saw secret %v, redactions %d: want the raw result", outs[5].secret, outs[5].redactions)
	case scrubbed.secret || scrubbed.redactions == 0 || scrubbed.tokens != 0:
		t.Errorf("probe 4 (outside scrub) saw secret %v, redactions %d, tokens %d: want scrubbed, not yet counted", scrubbed.secret, scrubbed.redactions, scrubbed.tokens)
	case outs[3].tokens <= 300 || outs[3].outcome != "":
		t.Errorf("probe 3 (outside tokens) saw tokens %d, outcome %q: want over the budget counted, not yet charged", outs[3].tokens, outs[3].outcome)
	case outs[2].outcome != OutcomeCut || outs[2].audited != 0:
		t.Errorf("probe 2 (outside budget) saw outcome %q, %d audit records: want cut, not yet audited", outs[2].outcome, outs[2].audited)
	case outs[1].audited != 1 || outs[1].metered != 0:
		t.Errorf("probe 1 (outside audit) saw %d audit records, metered %v: want audited, not yet metered", outs[1].audited, outs[1].metered)
	case outs[0].metered != 1:
		t.Errorf("probe 0 (outside metrics) saw metered %v, want 1", outs[0].metered)
	}
	// Tokens counted the scrubbed text, not the raw one (both counted up
	// to the limit, as Tokens counts).
	limit := outs[3].remaining
	raw, _, err := p.Counter.CountResult("tools/call", textResult(t, text), limit)
	if err != nil {
		t.Fatal(err)
	}
	clean, _, err := p.Counter.CountResult("tools/call", textResult(t, strings.Replace(text, secret, "[REDACTED:github-pat]", 1)), limit)
	if err != nil {
		t.Fatal(err)
	}
	if raw == clean {
		t.Fatal("the redaction does not change the count: the test cannot tell the order")
	}
	if outs[3].tokens != clean {
		t.Errorf("tokens counted %d, want %d (the scrubbed result; the raw one is %d)", outs[3].tokens, clean, raw)
	}
}

// answerField reads a string field of a fold tool's JSON answer.
func answerField(t *testing.T, out json.RawMessage, key string) string {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(answerJSON(t, out), &m); err != nil {
		t.Fatal(err)
	}
	s, _ := m[key].(string)
	if s == "" {
		t.Fatalf("answer %s has no %s", out, key)
	}
	return s
}

// TestNewChainRefusesMisconfiguration: a chain that would fail or skip its
// work on every call is refused when it is built, naming what is missing.
func TestNewChainRefusesMisconfiguration(t *testing.T) {
	p, _, _ := realParts(t)
	tests := []struct {
		name string
		edit func(*Parts)
		want string
	}{
		{"no scrubber", func(p *Parts) { p.Scrubber = nil }, "no Scrubber"},
		{"no counter", func(p *Parts) { p.Counter = nil }, "no token Counter"},
		{"no brancher", func(p *Parts) { p.Brancher = nil }, "no Brancher"},
		{"no auditor", func(p *Parts) { p.Auditor = nil }, "no Auditor"},
		{"no metrics", func(p *Parts) { p.Metrics = nil }, "no Metrics"},
		{"two thresholds", func(p *Parts) { p.Thresholds = []float64{0.5, 0.9} }, "Thresholds has 2 values, want 3"},
		{"thresholds out of order", func(p *Parts) { p.Thresholds = []float64{0.9, 0.7, 0.95} }, "want three ascending fractions"},
		{"threshold of 1", func(p *Parts) { p.Thresholds = []float64{0.7, 0.85, 1} }, "want three ascending fractions"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := p
			tt.edit(&q)
			ics, err := NewChain(q)
			if !errors.Is(err, ErrChain) || !strings.Contains(err.Error(), tt.want) || ics != nil {
				t.Errorf("NewChain = %d interceptors, %v; want ErrChain naming %q", len(ics), err, tt.want)
			}
		})
	}
	q := p
	q.Scrubber, q.Counter, q.Brancher = nil, nil, nil
	if ics, err := NewControlChain(q); err != nil || len(ics) != 2 {
		t.Errorf("NewControlChain without scrubber, counter and brancher = %d, %v; want the 2 interceptors", len(ics), err)
	}
	q.Metrics = nil
	if _, err := NewControlChain(q); !errors.Is(err, ErrChain) || !strings.Contains(err.Error(), "no Metrics") {
		t.Errorf("NewControlChain without metrics = %v", err)
	}
	q = p
	q.Thresholds = nil
	if _, err := NewChain(q); err != nil {
		t.Errorf("NewChain with nil Thresholds (the default): %v", err)
	}
}
