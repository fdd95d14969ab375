package intercept

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/foldproxy/foldproxy/fold"
)

// ownUpstream is the upstream label of foldproxy's own tools (the fold
// tools), whose exchanges carry no upstream name.
const ownUpstream = "foldproxy"

// otherLabel replaces a label value that is not one of a known, bounded set.
const otherLabel = "other"

// maxToolLabels bounds the distinct tool label values. Tool names come from
// the catalogue, but an agent can call a name that is not in it; past this
// many, further names are counted as "other".
const maxToolLabels = 1000

// Metrics holds foldproxy's Prometheus metrics in a registry of its own,
// with the Go runtime and process collectors. Every metric is prefixed
// foldproxy_. Labels have bounded values: upstream names (from the
// configuration), methods, outcomes, event kinds, forced-return reasons,
// scrub rule ids (from the rule set) and tool names (from the catalogue,
// capped); never a session or branch id, and never content.
//
// All methods are safe for concurrent use; a nil *Metrics records nothing.
type Metrics struct {
	reg *prometheus.Registry

	calls            *prometheus.CounterVec   // upstream, method, outcome
	toolCalls        *prometheus.CounterVec   // upstream, tool, outcome
	tokens           *prometheus.CounterVec   // upstream, kind
	callTokens       *prometheus.HistogramVec // upstream, kind
	latency          *prometheus.HistogramVec // upstream, method
	upstreamLatency  *prometheus.HistogramVec // upstream, method
	scrubTime        prometheus.Histogram
	redactions       *prometheus.CounterVec // rule
	cuts             *prometheus.CounterVec // upstream
	branchEvents     *prometheus.CounterVec // event
	branchesActive   prometheus.Gauge
	forced           *prometheus.CounterVec // reason
	upstreamUp       *prometheus.GaugeVec   // upstream
	upstreamRestarts *prometheus.CounterVec // upstream
	sessionsActive   prometheus.Gauge
	sessionsOpened   prometheus.Counter
	model            *modelMetrics

	mu     sync.Mutex
	active int                    // active branches, never below zero
	tools  map[[2]string]struct{} // tool label values in use: upstream, tool
	// events holds the branch event counters by label once used, which
	// WithLabelValues would otherwise hash and look up at every event.
	events map[string]prometheus.Counter
	// series holds the series of the exchanges by label set (observe).
	series map[seriesKey]*callSeries
}

var _ fold.EventSink = (*Metrics)(nil)

// Token kinds, the values of the kind label of the token metrics.
const (
	TokensArgument  = "argument"
	TokensResult    = "result"
	TokensDelivered = "delivered"
)

// NewMetrics builds the metrics and registers them, with the Go and
// process collectors, in a new registry.
func NewMetrics() *Metrics {
	latencyBuckets := prometheus.ExponentialBuckets(0.005, 2, 14) // 5ms … 41s
	tokenBuckets := prometheus.ExponentialBuckets(16, 4, 9)       // 16 … 1M tokens
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "foldproxy_calls_total",
			Help: "Requests forwarded through foldproxy, by upstream, method and outcome.",
		}, []string{"upstream", "method", "outcome"}),
		toolCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "foldproxy_tool_calls_total",
			Help: "Tool calls and prompt gets, by upstream, tool or prompt name and outcome.",
		}, []string{"upstream", "tool", "outcome"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "foldproxy_tokens_total",
			Help: "Tokens of forwarded requests: arguments, results as the upstream sent them, and what the agent received.",
		}, []string{"upstream", "kind"}),
		callTokens: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "foldproxy_call_tokens",
			Help:    "Tokens per forwarded request, by upstream and kind (argument, result, delivered).",
			Buckets: tokenBuckets,
		}, []string{"upstream", "kind"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "foldproxy_call_duration_seconds",
			Help:    "Total time of a forwarded request, from its arrival to its release.",
			Buckets: latencyBuckets,
		}, []string{"upstream", "method"}),
		upstreamLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "foldproxy_upstream_duration_seconds",
			Help:    "Time the upstream took to answer a forwarded request.",
			Buckets: latencyBuckets,
		}, []string{"upstream", "method"}),
		scrubTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "foldproxy_scrub_duration_seconds",
			Help:    "Time spent scrubbing secrets from one result.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16), // 0.5ms … 16s
		}),
		redactions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "foldproxy_redactions_total",
			Help: "Secrets removed from results, by scrub rule id.",
		}, []string{"rule"}),
		cuts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "foldproxy_cuts_total",
			Help: "Results cut to fit their branch's budget, by upstream.",
		}, []string{"upstream"}),
		branchEvents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "foldproxy_branch_events_total",
			Help: "Branch events by kind: created, returned, forced, failed, warning, cut, refused.",
		}, []string{"event"}),
		branchesActive: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "foldproxy_branches_active",
			Help: "Branches currently active.",
		}),
		forced: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "foldproxy_branch_forced_returns_total",
			Help: "Branches force-returned, by reason (budget, deadline, parent returning, session end).",
		}, []string{"reason"}),
		upstreamUp: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "foldproxy_upstream_up",
			Help: "1 when the upstream is connected, 0 when it is down.",
		}, []string{"upstream"}),
		upstreamRestarts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "foldproxy_upstream_restarts_total",
			Help: "Restarts of an upstream by its supervisor.",
		}, []string{"upstream"}),
		sessionsActive: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "foldproxy_sessions_active",
			Help: "Downstream sessions currently open.",
		}),
		sessionsOpened: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "foldproxy_sessions_opened_total",
			Help: "Downstream sessions opened.",
		}),
		tools:  make(map[[2]string]struct{}),
		events: make(map[string]prometheus.Counter),
		series: make(map[seriesKey]*callSeries),
	}
	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.calls, m.toolCalls, m.tokens, m.callTokens, m.latency, m.upstreamLatency,
		m.scrubTime, m.redactions, m.cuts, m.branchEvents, m.branchesActive,
		m.forced, m.upstreamUp, m.upstreamRestarts, m.sessionsActive, m.sessionsOpened,
	)
	m.model = newModelMetrics(m.reg)
	return m
}

// Registry returns the registry that holds the metrics, for tests and for
// callers that add collectors of their own.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the metrics in the Prometheus exposition format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.InstrumentMetricHandler(m.reg,
		promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
}

// Observe returns the interceptor that records every exchange: the call,
// its tokens, latencies, scrub time, redactions and cuts. It is the
// outermost interceptor, so the total latency runs from ex.Start to the
// release of the response.
func Observe(m *Metrics) Interceptor {
	return func(next Handler) Handler {
		return func(ctx context.Context, ex *Exchange) error {
			err := next(ctx, ex)
			if m != nil {
				m.observe(ex, err)
			}
			return err
		}
	}
}

func (m *Metrics) observe(ex *Exchange, herr error) {
	upstream := ex.Upstream
	if upstream == "" {
		upstream = ownUpstream
	}
	method := methodLabel(ex.Method)
	outcome := ex.Outcome
	if outcome == "" {
		outcome = OutcomeOK
		if herr != nil || ex.Err != nil || ex.RPCError != nil {
			outcome = OutcomeError
		}
	}
	outcome = outcomeLabel(outcome)

	tool := ex.Method == "tools/call" || ex.Method == "prompts/get"
	counts := [3]int{ex.ArgTokens, ex.ResultTokens, ex.DeliveredTokens}
	var d time.Duration
	latency := false
	if !ex.Start.IsZero() {
		d = time.Since(ex.Start)
		latency = d >= 0
	}

	s := m.seriesOf(upstream, method, outcome, tool, ex.Name, counts, latency, ex.UpstreamLatency > 0)

	s.calls.Inc()
	if tool {
		s.toolCalls.Inc()
	}
	for i, n := range counts {
		if n <= 0 {
			continue
		}
		s.tokens[i].Add(float64(n))
		s.callTokens[i].Observe(float64(n))
	}
	if latency {
		s.latency.Observe(d.Seconds())
	}
	if ex.UpstreamLatency > 0 {
		s.upstreamLatency.Observe(ex.UpstreamLatency.Seconds())
	}
	if ex.ScrubTime > 0 {
		m.scrubTime.Observe(ex.ScrubTime.Seconds())
	}
	for rule, n := range ex.Redactions {
		if n > 0 {
			m.redactions.WithLabelValues(rule).Add(float64(n))
		}
	}
	if ex.Outcome == OutcomeCut {
		m.cuts.WithLabelValues(upstream).Inc()
	}
}

// seriesKey is the label values of the series of one kind of exchange:
// its upstream, method and outcome labels, and for a tool call or prompt
// get its tool label.
type seriesKey struct{ upstream, method, outcome, tool string }

// callSeries holds the series an exchange of one seriesKey is recorded in,
// each set once first used. tokens and callTokens are by tokenKinds.
type callSeries struct {
	calls, toolCalls         prometheus.Counter
	tokens                   [3]prometheus.Counter
	callTokens               [3]prometheus.Observer
	latency, upstreamLatency prometheus.Observer
}

// tokenKinds are the token kinds of an exchange, in the order observe
// counts them.
var tokenKinds = [3]string{TokensArgument, TokensResult, TokensDelivered}

// maxSeries bounds the label sets whose series observe keeps (their labels
// are bounded already: this is a backstop). Past it, an exchange's series
// are looked up each time.
const maxSeries = 4096

// seriesOf returns the series an exchange with these labels is recorded
// in, looked up once per label set rather than hashed by WithLabelValues
// for each metric at every call. A series is still made only once it is
// used (a token kind with counts above zero, the latencies when measured),
// as WithLabelValues would make it.
func (m *Metrics) seriesOf(upstream, method, outcome string, tool bool, name string, counts [3]int, latency, upLatency bool) callSeries {
	m.mu.Lock()
	defer m.mu.Unlock()
	key := seriesKey{upstream: upstream, method: method, outcome: outcome}
	if tool {
		key.tool = m.toolLabelLocked(upstream, name)
	}
	se := m.series[key]
	if se == nil {
		se = &callSeries{}
		if len(m.series) < maxSeries {
			m.series[key] = se
		}
	}
	if se.calls == nil {
		se.calls = m.calls.WithLabelValues(upstream, method, outcome)
	}
	if tool && se.toolCalls == nil {
		se.toolCalls = m.toolCalls.WithLabelValues(upstream, key.tool, outcome)
	}
	for i, n := range counts {
		if n > 0 && se.tokens[i] == nil {
			se.tokens[i] = m.tokens.WithLabelValues(upstream, tokenKinds[i])
			se.callTokens[i] = m.callTokens.WithLabelValues(upstream, tokenKinds[i])
		}
	}
	if latency && se.latency == nil {
		se.latency = m.latency.WithLabelValues(upstream, method)
	}
	if upLatency && se.upstreamLatency == nil {
		se.upstreamLatency = m.upstreamLatency.WithLabelValues(upstream, method)
	}
	return *se
}

// toolLabelLocked returns name as a label value while fewer than
// maxToolLabels distinct names are in use, "other" past that. m.mu is
// held.
func (m *Metrics) toolLabelLocked(upstream, name string) string {
	key := [2]string{upstream, name} // no string built per call
	if _, ok := m.tools[key]; ok {
		return name
	}
	if len(m.tools) >= maxToolLabels {
		return otherLabel
	}
	m.tools[key] = struct{}{}
	return name
}

// BranchEvent counts a branch event and keeps the active-branch gauge. It
// implements fold.EventSink.
func (m *Metrics) BranchEvent(_ context.Context, ev fold.Event) {
	if m == nil {
		return
	}
	d := 0
	switch ev.Kind {
	case "created":
		d = 1
	case "returned", "forced", "failed":
		d = -1
	}
	m.branchEvent(eventLabel(ev.Kind), d)
	if ev.Kind == "forced" {
		m.forced.WithLabelValues(reasonLabel(ev.Reason)).Inc()
	}
}

// branchEvent counts an event of the given label and adds d to the
// active branches, under one lock.
func (m *Metrics) branchEvent(label string, d int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, ok := m.events[label]
	if !ok {
		c = m.branchEvents.WithLabelValues(label)
		m.events[label] = c
	}
	c.Inc()
	if d != 0 {
		m.addActiveLocked(d)
	}
}

func (m *Metrics) addActiveLocked(d int) {
	m.active += d
	if m.active < 0 {
		// A branch recovered from the store and closed after a restart
		// was never counted as created by this process.
		m.active = 0
	}
	m.branchesActive.Set(float64(m.active))
}

// SetActiveBranches sets the number of active branches, for instance after
// recovering them from the store at start-up.
func (m *Metrics) SetActiveBranches(n int) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.active = max(n, 0)
	m.branchesActive.Set(float64(m.active))
}

// UpstreamState records whether the named upstream is up.
func (m *Metrics) UpstreamState(name string, up bool) {
	if m == nil {
		return
	}
	v := 0.0
	if up {
		v = 1
	}
	m.upstreamUp.WithLabelValues(name).Set(v)
}

// UpstreamRestart counts a restart of the named upstream.
func (m *Metrics) UpstreamRestart(name string) {
	if m == nil {
		return
	}
	m.upstreamRestarts.WithLabelValues(name).Inc()
}

// SessionOpened counts a downstream session that opened.
func (m *Metrics) SessionOpened() {
	if m == nil {
		return
	}
	m.sessionsOpened.Inc()
	m.sessionsActive.Inc()
}

// SessionClosed counts a downstream session that ended.
func (m *Metrics) SessionClosed() {
	if m == nil {
		return
	}
	m.sessionsActive.Dec()
}

// methodLabel bounds the method label to the forwarded methods.
func methodLabel(m string) string {
	switch m {
	case "tools/call", "resources/read", "prompts/get", "completion/complete":
		return m
	}
	return otherLabel
}

func outcomeLabel(o string) string {
	switch o {
	case OutcomeOK, OutcomeError, OutcomeRefused, OutcomeCut, OutcomeWithheld, OutcomeCanceled:
		return o
	}
	return otherLabel
}

func eventLabel(k string) string {
	switch k {
	case "created", "returned", "forced", "failed", "warning", "cut", "refused":
		return k
	}
	return otherLabel
}

func reasonLabel(r string) string {
	switch r {
	case fold.ReasonBudget, fold.ReasonDeadline, fold.ReasonParent, fold.ReasonSessionEnd, fold.ReasonProxyRestarted:
		return r
	}
	return otherLabel
}

// Redacted counts secrets removed outside a call's result (relayed
// notifications and requests, catalogue text), by rule.
func (m *Metrics) Redacted(counts map[string]int) {
	if m == nil {
		return
	}
	for rule, n := range counts {
		m.redactions.WithLabelValues(rule).Add(float64(n))
	}
}
