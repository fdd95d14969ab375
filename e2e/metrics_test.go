package e2e

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/foldproxy/foldproxy/intercept"
)

// The metrics test (issue 4): /metrics of the real binary, scraped over
// HTTP and parsed with Prometheus' own parser, moves as the calls made
// through it say: calls by upstream and outcome, tokens, redactions by
// rule, branch events, and upstream_up.

// scrape is one parsed /metrics page.
type scrape map[string]*dto.MetricFamily

// scrapeMetrics GETs url and parses it in the text exposition format.
func scrapeMetrics(ctx context.Context, t testing.TB, url string) scrape {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing %s: %v", url, err)
	}
	return fams
}

// waitMetrics polls url until it answers 200, failing the test when ctx
// ends first.
func waitMetrics(ctx context.Context, t testing.TB, url string) {
	t.Helper()
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s never answered: %v (last: %v)", url, ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// value sums the samples of the counter, gauge or untyped family name
// whose labels include every label given as "name=value".
func (s scrape) value(name string, labels ...string) float64 {
	f, ok := s[name]
	if !ok {
		return 0
	}
	sum := 0.0
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, lp := range m.GetLabel() {
			have[lp.GetName()] = lp.GetValue()
		}
		match := true
		for _, l := range labels {
			k, v, _ := strings.Cut(l, "=")
			if have[k] != v {
				match = false
				break
			}
		}
		if !match {
			continue
		}
		switch {
		case m.Counter != nil:
			sum += m.GetCounter().GetValue()
		case m.Gauge != nil:
			sum += m.GetGauge().GetValue()
		case m.Untyped != nil:
			sum += m.GetUntyped().GetValue()
		}
	}
	return sum
}

// labelValues lists the values of label among the samples of name.
func (s scrape) labelValues(name, label string) []string {
	var out []string
	for _, m := range s[name].GetMetric() {
		for _, lp := range m.GetLabel() {
			if lp.GetName() == label {
				out = append(out, lp.GetValue())
			}
		}
	}
	sort.Strings(out)
	return out
}

// metricWant is one expected change between two scrapes.
type metricWant struct {
	name   string
	labels []string
	// delta is the exact change expected; with atLeast, the least.
	delta   float64
	atLeast bool
}

func checkDeltas(t *testing.T, before, after scrape, wants []metricWant) {
	t.Helper()
	for _, w := range wants {
		d := after.value(w.name, w.labels...) - before.value(w.name, w.labels...)
		ok := d == w.delta
		rel := "="
		if w.atLeast {
			ok, rel = d >= w.delta, ">="
		}
		if !ok {
			t.Errorf("%s{%s} moved by %v, want %s %v", w.name, strings.Join(w.labels, ","), d, rel, w.delta)
		}
	}
}

// auditSums adds up the delivered tokens by upstream and the redactions
// by rule of the call records of an audit log.
func auditSums(t testing.TB, path string) (delivered map[string]float64, redactions map[string]float64) {
	t.Helper()
	delivered, redactions = map[string]float64{}, map[string]float64{}
	err := intercept.ReadAudit([]string{path}, func(r intercept.Record) error {
		if r.Kind != intercept.KindCall {
			return nil
		}
		up := r.Upstream
		if up == "" {
			up = "foldproxy"
		}
		delivered[up] += float64(r.DeliveredTokens)
		for rule, n := range r.Redactions {
			redactions[rule] += float64(n)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("reading the audit log: %v", err)
	}
	return delivered, redactions
}

func TestMetricsHTTP(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	dir := t.TempDir()
	auditPath, manifest := filepath.Join(dir, "audit.jsonl"), filepath.Join(dir, "manifest.json")
	cfg := leakConfig(t, map[string]any{
		"replay": replayEntry(t),
		"leaky":  leakyEntry(t, leakSeed, manifest),
	}, auditPath, true)
	run := startTappedHTTP(t, cfg, nil)
	p := run.peer
	metricsURL := "http://" + run.addr + "/metrics"
	waitManifest(ctx, t, manifest)
	m := readPlanted(t, manifest, leakSeed)
	before := scrapeMetrics(ctx, t, metricsURL)

	call := func(name string, args map[string]any, wantError bool) {
		t.Helper()
		text, res := p.callText(ctx, t, name, args)
		if res.IsError != wantError {
			t.Fatalf("%s: isError %v, want %v: %s", name, res.IsError, wantError, truncate(text, 300))
		}
	}
	call("replay__emit", map[string]any{"bytes": 1000, "kind": "text"}, false)
	call("replay__emit", map[string]any{"bytes": 500, "kind": "log"}, false)
	call("replay__run", map[string]any{"trajectory": "no-such-trajectory", "step": 0}, true)
	call("leaky__leak_text", map[string]any{"encoding": "plain"}, false)
	small := createBranch(ctx, t, p, map[string]any{"description": "metrics: small budget", "budget": 300})
	call("replay__emit", map[string]any{"bytes": 40000, "kind": "text", "branch_id": small}, false) // cut, forced
	call("replay__emit", map[string]any{"bytes": 10, "kind": "text", "branch_id": small}, true)     // refused
	done := createBranch(ctx, t, p, map[string]any{"description": "metrics: returned"})
	call("branch_return", map[string]any{"branch_id": done, "message": "nothing to report"}, false)

	after := scrapeMetrics(ctx, t, metricsURL)
	checkDeltas(t, before, after, []metricWant{
		{name: "foldproxy_calls_total", labels: []string{"upstream=replay", "method=tools/call", "outcome=ok"}, delta: 2},
		{name: "foldproxy_calls_total", labels: []string{"upstream=replay", "method=tools/call", "outcome=error"}, delta: 1},
		{name: "foldproxy_calls_total", labels: []string{"upstream=replay", "method=tools/call", "outcome=cut"}, delta: 1},
		{name: "foldproxy_calls_total", labels: []string{"upstream=replay", "method=tools/call", "outcome=refused"}, delta: 1},
		{name: "foldproxy_calls_total", labels: []string{"upstream=leaky", "method=tools/call", "outcome=ok"}, delta: 1},
		{name: "foldproxy_calls_total", labels: []string{"upstream=foldproxy", "method=tools/call", "outcome=ok"}, delta: 3},
		{name: "foldproxy_calls_total", delta: 9},
		{name: "foldproxy_tool_calls_total", labels: []string{"upstream=replay", "tool=emit", "outcome=ok"}, delta: 2},
		{name: "foldproxy_tool_calls_total", labels: []string{"upstream=leaky", "tool=leak_text", "outcome=ok"}, delta: 1},
		{name: "foldproxy_tokens_total", labels: []string{"upstream=replay", "kind=argument"}, delta: 1, atLeast: true},
		{name: "foldproxy_tokens_total", labels: []string{"upstream=replay", "kind=result"}, delta: 1, atLeast: true},
		{name: "foldproxy_tokens_total", labels: []string{"upstream=replay", "kind=delivered"}, delta: 1, atLeast: true},
		{name: "foldproxy_tokens_total", labels: []string{"upstream=leaky", "kind=delivered"}, delta: 1, atLeast: true},
		{name: "foldproxy_cuts_total", labels: []string{"upstream=replay"}, delta: 1},
		{name: "foldproxy_branch_events_total", labels: []string{"event=created"}, delta: 2},
		{name: "foldproxy_branch_events_total", labels: []string{"event=returned"}, delta: 1},
		{name: "foldproxy_branch_events_total", labels: []string{"event=forced"}, delta: 1},
		{name: "foldproxy_branch_events_total", labels: []string{"event=cut"}, delta: 1},
		{name: "foldproxy_branch_forced_returns_total", labels: []string{"reason=budget exhausted"}, delta: 1},
		{name: "foldproxy_redactions_total", delta: float64(len(m.Secrets)), atLeast: true},
	})
	for _, rule := range []string{"aws-access-token", "github-pat", "stripe-access-token", "private-key", "jwt", "generic-api-key"} {
		if d := after.value("foldproxy_redactions_total", "rule="+rule) - before.value("foldproxy_redactions_total", "rule="+rule); d < 1 {
			t.Errorf("foldproxy_redactions_total{rule=%s} moved by %v after leak_text, want >= 1 (rules seen: %v)", rule, d, after.labelValues("foldproxy_redactions_total", "rule"))
		}
	}
	if got := after.value("foldproxy_branches_active"); got != 0 {
		t.Errorf("foldproxy_branches_active = %v after both branches closed, want 0", got)
	}
	for _, up := range []string{"replay", "leaky"} {
		if got := after.value("foldproxy_upstream_up", "upstream="+up); got != 1 {
			t.Errorf("foldproxy_upstream_up{upstream=%s} = %v, want 1", up, got)
		}
	}

	// The counters agree with the audit log, record by record.
	delivered, redactions := auditSums(t, auditPath)
	for _, up := range []string{"replay", "leaky"} {
		if got := after.value("foldproxy_tokens_total", "upstream="+up, "kind=delivered"); got != delivered[up] {
			t.Errorf("foldproxy_tokens_total{upstream=%s,kind=delivered} = %v, the audit log says %v", up, got, delivered[up])
		}
	}
	for rule, n := range redactions {
		if got := after.value("foldproxy_redactions_total", "rule="+rule); got != n {
			t.Errorf("foldproxy_redactions_total{rule=%s} = %v, the audit log says %v", rule, got, n)
		}
	}
	if len(redactions) == 0 {
		t.Error("the audit log records no redaction")
	}
}

func TestMetricsStdioFlag(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	dir := t.TempDir()
	cfg := leakConfig(t, map[string]any{"replay": replayEntry(t)}, filepath.Join(dir, "audit.jsonl"), true)
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	run := startTappedStdio(t, cfg, nil, "--metrics", addr)
	metricsURL := "http://" + addr + "/metrics"
	waitMetrics(ctx, t, metricsURL)
	before := scrapeMetrics(ctx, t, metricsURL)
	text, res := run.peer.callText(ctx, t, "replay__emit", map[string]any{"bytes": 300, "kind": "text"})
	if res.IsError {
		t.Fatalf("emit: %s", text)
	}
	after := scrapeMetrics(ctx, t, metricsURL)
	checkDeltas(t, before, after, []metricWant{
		{name: "foldproxy_calls_total", labels: []string{"upstream=replay", "method=tools/call", "outcome=ok"}, delta: 1},
		{name: "foldproxy_calls_total", delta: 1},
		{name: "foldproxy_tokens_total", labels: []string{"upstream=replay", "kind=delivered"}, delta: 1, atLeast: true},
	})
	if h := after["foldproxy_call_duration_seconds"]; h == nil || len(h.GetMetric()) == 0 || h.GetMetric()[0].GetHistogram().GetSampleCount() < 1 {
		t.Errorf("foldproxy_call_duration_seconds has no sample after a call")
	}
	if got := after.value("foldproxy_upstream_up", "upstream=replay"); got != 1 {
		t.Errorf("foldproxy_upstream_up{upstream=replay} = %v, want 1", got)
	}
	// stdout carried JSON-RPC only: the metrics address was logged on stderr.
	if !strings.Contains(run.proc.out.String(), addr) {
		t.Errorf("foldproxy's stderr does not name the metrics address %s", addr)
	}
}
