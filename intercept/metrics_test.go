package intercept

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/foldproxy/foldproxy/fold"
)

func TestObserve(t *testing.T) {
	m := NewMetrics()
	exchanges := []struct {
		ex   Exchange
		herr error
	}{
		{ex: Exchange{Session: "s1", Branch: "b1", Upstream: "gh", Method: "tools/call", Name: "search", Outcome: OutcomeOK,
			ArgTokens: 10, ResultTokens: 100, DeliveredTokens: 100, Start: time.Now(),
			UpstreamLatency: 20 * time.Millisecond, ScrubTime: time.Millisecond, Redactions: map[string]int{"aws-access-token": 2}}},
		{ex: Exchange{Session: "s2", Branch: "b2", Upstream: "gh", Method: "tools/call", Name: "search", Outcome: OutcomeCut,
			ArgTokens: 5, ResultTokens: 900, DeliveredTokens: 200, Redactions: map[string]int{"aws-access-token": 1, "github-pat": 1}}},
		{ex: Exchange{Upstream: "fs", Method: "resources/read", Name: "file:///etc/hosts"}, herr: errors.New("gone")},
		{ex: Exchange{Method: "tools/call", Name: "branch_create", Outcome: OutcomeOK, DeliveredTokens: 30}},
		{ex: Exchange{Upstream: "fs", Method: "weird/method", Outcome: "strange"}},
	}
	for _, e := range exchanges {
		h := Chain(func(context.Context, *Exchange) error { return e.herr }, Observe(m))
		ex := e.ex
		if err := h(context.Background(), &ex); !errors.Is(err, e.herr) {
			t.Fatalf("chain returned %v, want %v", err, e.herr)
		}
	}
	tests := []struct {
		name string
		got  float64
		want float64
	}{
		{"calls gh ok", testutil.ToFloat64(m.calls.WithLabelValues("gh", "tools/call", "ok")), 1},
		{"calls gh cut", testutil.ToFloat64(m.calls.WithLabelValues("gh", "tools/call", "cut")), 1},
		{"calls fs error", testutil.ToFloat64(m.calls.WithLabelValues("fs", "resources/read", "error")), 1},
		{"calls own tools", testutil.ToFloat64(m.calls.WithLabelValues("foldproxy", "tools/call", "ok")), 1},
		{"calls bounded labels", testutil.ToFloat64(m.calls.WithLabelValues("fs", "other", "other")), 1},
		{"tool calls", testutil.ToFloat64(m.toolCalls.WithLabelValues("gh", "search", "ok")), 1},
		{"argument tokens", testutil.ToFloat64(m.tokens.WithLabelValues("gh", TokensArgument)), 15},
		{"result tokens", testutil.ToFloat64(m.tokens.WithLabelValues("gh", TokensResult)), 1000},
		{"delivered tokens", testutil.ToFloat64(m.tokens.WithLabelValues("gh", TokensDelivered)), 300},
		{"redactions aws", testutil.ToFloat64(m.redactions.WithLabelValues("aws-access-token")), 3},
		{"redactions pat", testutil.ToFloat64(m.redactions.WithLabelValues("github-pat")), 1},
		{"cuts", testutil.ToFloat64(m.cuts.WithLabelValues("gh")), 1},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s = %v, want %v", tt.name, tt.got, tt.want)
		}
	}
	histograms := []struct {
		name, metric string
		want         int
	}{
		{"total latency (only calls with a start)", "foldproxy_call_duration_seconds", 1},
		{"upstream latency", "foldproxy_upstream_duration_seconds", 1},
		{"scrub time", "foldproxy_scrub_duration_seconds", 1},
	}
	for _, h := range histograms {
		if got := histogramCount(t, m, h.metric); got != h.want {
			t.Errorf("%s: %s count = %d, want %d", h.name, h.metric, got, h.want)
		}
	}
	// Resource URIs are never a label value, and neither are sessions or branches.
	assertNoLabelValue(t, m, "file:///etc/hosts", "s1", "s2", "b1", "b2")
}

// histogramCount sums the sample counts of every series of a histogram.
func histogramCount(t *testing.T, m *Metrics, name string) int {
	t.Helper()
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, s := range mf.GetMetric() {
			n += int(s.GetHistogram().GetSampleCount())
		}
	}
	return n
}

func assertNoLabelValue(t *testing.T, m *Metrics, values ...string) {
	t.Helper()
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, s := range mf.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "session" || l.GetName() == "branch" {
					t.Errorf("%s has a %s label", mf.GetName(), l.GetName())
				}
				for _, v := range values {
					if l.GetValue() == v {
						t.Errorf("%s{%s=%q}: forbidden label value", mf.GetName(), l.GetName(), v)
					}
				}
			}
		}
	}
}

func TestMetricsBranchEvents(t *testing.T) {
	m := NewMetrics()
	ctx := context.Background()
	events := []fold.Event{
		{Kind: "created", Branch: "b1"},
		{Kind: "created", Branch: "b2"},
		{Kind: "created", Branch: "b3"},
		{Kind: "warning", Branch: "b1", Level: "caution"},
		{Kind: "cut", Branch: "b1", Tokens: 500},
		{Kind: "forced", Branch: "b1", Reason: fold.ReasonBudget},
		{Kind: "returned", Branch: "b2"},
		{Kind: "forced", Branch: "b3", Reason: "something the fold package made up"},
		{Kind: "failed", Branch: "old", Reason: fold.ReasonProxyRestarted}, // recovered, never created here
		{Kind: "refused", Session: "s9"},
		{Kind: "invented"},
	}
	for _, ev := range events {
		m.BranchEvent(ctx, ev)
	}
	tests := []struct {
		name string
		got  float64
		want float64
	}{
		{"created", testutil.ToFloat64(m.branchEvents.WithLabelValues("created")), 3},
		{"forced", testutil.ToFloat64(m.branchEvents.WithLabelValues("forced")), 2},
		{"failed", testutil.ToFloat64(m.branchEvents.WithLabelValues("failed")), 1},
		{"other event", testutil.ToFloat64(m.branchEvents.WithLabelValues("other")), 1},
		{"active never below zero", testutil.ToFloat64(m.branchesActive), 0},
		{"forced budget", testutil.ToFloat64(m.forced.WithLabelValues(fold.ReasonBudget)), 1},
		{"failure is not a forced return", testutil.ToFloat64(m.forced.WithLabelValues(fold.ReasonProxyRestarted)), 0},
		{"forced other", testutil.ToFloat64(m.forced.WithLabelValues("other")), 1},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s = %v, want %v", tt.name, tt.got, tt.want)
		}
	}
	m.BranchEvent(ctx, fold.Event{Kind: "created"})
	if got := testutil.ToFloat64(m.branchesActive); got != 1 {
		t.Errorf("active after one more creation = %v, want 1", got)
	}
	m.SetActiveBranches(7)
	if got := testutil.ToFloat64(m.branchesActive); got != 7 {
		t.Errorf("active after SetActiveBranches(7) = %v, want 7", got)
	}
	assertNoLabelValue(t, m, "b1", "b2", "b3", "s9")
}

func TestMetricsUpstreamsAndSessions(t *testing.T) {
	m := NewMetrics()
	m.UpstreamState("gh", true)
	m.UpstreamState("fs", true)
	m.UpstreamState("fs", false)
	m.UpstreamRestart("fs")
	m.UpstreamRestart("fs")
	m.SessionOpened()
	m.SessionOpened()
	m.SessionClosed()
	tests := []struct {
		name string
		got  float64
		want float64
	}{
		{"gh up", testutil.ToFloat64(m.upstreamUp.WithLabelValues("gh")), 1},
		{"fs down", testutil.ToFloat64(m.upstreamUp.WithLabelValues("fs")), 0},
		{"fs restarts", testutil.ToFloat64(m.upstreamRestarts.WithLabelValues("fs")), 2},
		{"sessions active", testutil.ToFloat64(m.sessionsActive), 1},
		{"sessions opened", testutil.ToFloat64(m.sessionsOpened), 2},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s = %v, want %v", tt.name, tt.got, tt.want)
		}
	}
	var nilMetrics *Metrics // records nothing, never panics
	nilMetrics.UpstreamState("x", true)
	nilMetrics.UpstreamRestart("x")
	nilMetrics.SessionOpened()
	nilMetrics.SessionClosed()
	nilMetrics.SetActiveBranches(1)
	nilMetrics.BranchEvent(context.Background(), fold.Event{Kind: "created"})
	if err := Chain(func(context.Context, *Exchange) error { return nil }, Observe(nil))(context.Background(), &Exchange{}); err != nil {
		t.Error(err)
	}
}

func TestMetricsToolLabelBounded(t *testing.T) {
	m := NewMetrics()
	for i := range maxToolLabels + 50 {
		ex := &Exchange{Upstream: "u", Method: "tools/call", Name: fmt.Sprintf("tool%d", i), Outcome: OutcomeError}
		if err := Chain(func(context.Context, *Exchange) error { return nil }, Observe(m))(context.Background(), ex); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := testutil.CollectAndCount(m.toolCalls), maxToolLabels+1; got != want {
		t.Errorf("tool call series = %d, want %d (cap plus other)", got, want)
	}
	if got := testutil.ToFloat64(m.toolCalls.WithLabelValues("u", "other", "error")); got != 50 {
		t.Errorf("other = %v, want 50", got)
	}
}

func TestMetricsHandler(t *testing.T) {
	m := NewMetrics()
	m.UpstreamState("gh", true)
	m.SessionOpened()
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`foldproxy_upstream_up{upstream="gh"} 1`,
		"foldproxy_sessions_active 1",
		"go_goroutines",
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics page lacks %q", want)
		}
	}
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, "# HELP ") {
			name := strings.Fields(line)[2]
			if !strings.HasPrefix(name, "foldproxy_") && !strings.HasPrefix(name, "go_") &&
				!strings.HasPrefix(name, "process_") && !strings.HasPrefix(name, "promhttp_") {
				t.Errorf("metric %s is not prefixed foldproxy_", name)
			}
		}
	}
}

// TestObserveSeriesOnceUsed: observe keeps each label set's series once
// looked up, and still makes a series only when an exchange uses it, as
// WithLabelValues at every call did: a token kind that was zero, or a
// latency not measured, shows no series until one is recorded; counts
// add up across exchanges of one label set.
func TestObserveSeriesOnceUsed(t *testing.T) {
	m := NewMetrics()
	h := Observe(m)(func(_ context.Context, ex *Exchange) error { return nil })
	ex := func(args int) *Exchange {
		return &Exchange{Upstream: "gh", Method: "tools/call", Name: "search", ArgTokens: args, ResultTokens: 7, Outcome: OutcomeOK}
	}
	if err := h(context.Background(), ex(0)); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"foldproxy_call_duration_seconds", "foldproxy_upstream_duration_seconds"} {
		if n := testutil.CollectAndCount(m.reg, name); n != 0 {
			t.Errorf("%s has %d series after an exchange that measured none", name, n)
		}
	}
	if n := testutil.CollectAndCount(m.tokens); n != 1 {
		t.Errorf("foldproxy_tokens_total has %d series after result tokens only, want 1", n)
	}
	for range 2 {
		if err := h(context.Background(), ex(5)); err != nil {
			t.Fatal(err)
		}
	}
	if n := testutil.CollectAndCount(m.tokens); n != 2 {
		t.Errorf("foldproxy_tokens_total has %d series, want 2", n)
	}
	for _, tt := range []struct {
		name      string
		got, want float64
	}{
		{"calls", testutil.ToFloat64(m.calls.WithLabelValues("gh", "tools/call", "ok")), 3},
		{"tool calls", testutil.ToFloat64(m.toolCalls.WithLabelValues("gh", "search", "ok")), 3},
		{"argument tokens", testutil.ToFloat64(m.tokens.WithLabelValues("gh", TokensArgument)), 10},
		{"result tokens", testutil.ToFloat64(m.tokens.WithLabelValues("gh", TokensResult)), 21},
	} {
		if tt.got != tt.want {
			t.Errorf("%s = %v, want %v", tt.name, tt.got, tt.want)
		}
	}
}
