package intercept

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// modelMetrics are the metrics of the model front: requests to the model
// APIs and the tokens the context manager took out of them.
type modelMetrics struct {
	requests *prometheus.CounterVec   // dialect, outcome
	tokens   *prometheus.CounterVec   // dialect, kind
	folds    *prometheus.CounterVec   // dialect
	guidance *prometheus.CounterVec   // dialect
	latency  *prometheus.HistogramVec // dialect

	autofolds *prometheus.CounterVec // dialect, kind
	saved     *prometheus.CounterVec // dialect
	would     *prometheus.CounterVec // dialect, what
	recalls   *prometheus.CounterVec // dialect
	usage     *prometheus.CounterVec // dialect, kind
	billed    *prometheus.CounterVec // dialect, source
}

// Kinds of the model token counter: the conversation as the agent sent it
// and as it was forwarded to the model.
const (
	ModelTokensReceived  = "received"
	ModelTokensForwarded = "forwarded"
)

func newModelMetrics(reg *prometheus.Registry) *modelMetrics {
	m := &modelMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "foldproxy_model_requests_total",
			Help: "Requests on the model front (Anthropic Messages, OpenAI Chat Completions and Responses), by dialect and outcome.",
		}, []string{"dialect", "outcome"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "foldproxy_model_tokens_total",
			Help: "Tokens of the conversations on the model front: as the agent sent them (received) and as forwarded to the model after folding (forwarded).",
		}, []string{"dialect", "kind"}),
		folds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "foldproxy_model_folded_branches_total",
			Help: "Closed branch spans folded to their summary in forwarded model requests (a branch counts once per request it is folded in).",
		}, []string{"dialect"}),
		guidance: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "foldproxy_model_guidance_total",
			Help: "Forwarded model requests that carried a reminder suggesting a branch.",
		}, []string{"dialect"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "foldproxy_model_request_duration_seconds",
			Help:    "Total time of a model request through foldproxy, to the end of the (streamed) answer.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 16), // 10ms … 5.5min
		}, []string{"dialect"}),
	}
	m.autofolds = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "foldproxy_model_autofolds_total",
		Help: "Automatic folds decided on the model wire, by kind (stale, superseded, repeat, oversized); each is repeated on every later request.",
	}, []string{"dialect", "kind"})
	m.saved = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "foldproxy_model_autofold_saved_tokens_total",
		Help: "Tokens automatic folds kept out of forwarded model requests (what the folded results hold, less their stubs), summed over requests.",
	}, []string{"dialect"})
	m.would = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "foldproxy_model_autofold_observe_would_total",
		Help: "Observe mode only, nothing was folded: the automatic folds it would have decided (what=\"folds\") and the tokens they would have kept out of the requests (what=\"tokens\").",
	}, []string{"dialect", "what"})
	m.recalls = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "foldproxy_model_recalls_answered_total",
		Help: "Calls of the recall tool the model front adds to agents without foldproxy's own, answered in the forwarded request.",
	}, []string{"dialect"})
	m.usage = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "foldproxy_model_usage_tokens_total",
		Help: "Tokens the model APIs reported in their answers: uncached input, cache reads, cache writes, output.",
	}, []string{"dialect", "kind"})
	m.billed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "foldproxy_model_billed_input_tokens_total",
		Help: "Billed input at the configured cache prices: as the model APIs reported it (source=\"reported\"), and the prompt-cache model of the forwarded requests (\"modelled\") and of the same requests without foldproxy (\"modelled_without\"), in o200k tokens.",
	}, []string{"dialect", "source"})
	reg.MustRegister(m.requests, m.tokens, m.folds, m.guidance, m.latency, m.autofolds, m.saved, m.would, m.recalls, m.usage, m.billed)
	return m
}

// ModelFigures records what automatic folding did to a model request, the
// usage its answer reported and the modelled bill of its input.
func (m *Metrics) ModelFigures(dialect string, f *ModelFigures) {
	if m == nil || f == nil {
		return
	}
	dialect = modelDialectLabel(dialect)
	mm := m.model
	for _, n := range f.Folds {
		mm.autofolds.WithLabelValues(dialect, foldKindLabel(n.Kind)).Inc()
	}
	if f.FoldSaved > 0 {
		mm.saved.WithLabelValues(dialect).Add(float64(f.FoldSaved))
	}
	if len(f.WouldFolds) > 0 {
		mm.would.WithLabelValues(dialect, "folds").Add(float64(len(f.WouldFolds)))
	}
	if f.WouldSave > 0 {
		mm.would.WithLabelValues(dialect, "tokens").Add(float64(f.WouldSave))
	}
	if f.Recalls > 0 {
		mm.recalls.WithLabelValues(dialect).Add(float64(f.Recalls))
	}
	if u := f.Usage; u != nil {
		mm.usage.WithLabelValues(dialect, "input").Add(float64(u.Input))
		mm.usage.WithLabelValues(dialect, "cache_read").Add(float64(u.CacheRead))
		mm.usage.WithLabelValues(dialect, "cache_write").Add(float64(u.CacheWrite))
		mm.usage.WithLabelValues(dialect, "output").Add(float64(u.Output))
		mm.billed.WithLabelValues(dialect, "reported").Add(u.Billed)
	}
	mm.billed.WithLabelValues(dialect, "modelled").Add(f.ModelledBilled)
	mm.billed.WithLabelValues(dialect, "modelled_without").Add(f.ModelledWithout)
}

func foldKindLabel(k string) string {
	switch k {
	case "stale", "superseded", "repeat", "oversized":
		return k
	}
	return otherLabel
}

// ModelRequest records one request of the model front: its dialect
// (anthropic, openai-chat, openai-responses, passthrough), outcome (ok,
// upstream_error, unreachable, refused, error), the conversation's tokens
// before and after the context manager, the branches it folded, whether it
// added guidance, and how long the whole answer took.
func (m *Metrics) ModelRequest(dialect, outcome string, before, after, folded int, guidance bool, d time.Duration) {
	if m == nil {
		return
	}
	dialect = modelDialectLabel(dialect)
	mm := m.model
	mm.requests.WithLabelValues(dialect, modelOutcomeLabel(outcome)).Inc()
	if before > 0 {
		mm.tokens.WithLabelValues(dialect, ModelTokensReceived).Add(float64(before))
	}
	if after > 0 {
		mm.tokens.WithLabelValues(dialect, ModelTokensForwarded).Add(float64(after))
	}
	if folded > 0 {
		mm.folds.WithLabelValues(dialect).Add(float64(folded))
	}
	if guidance {
		mm.guidance.WithLabelValues(dialect).Inc()
	}
	if d > 0 {
		mm.latency.WithLabelValues(dialect).Observe(d.Seconds())
	}
}

func modelDialectLabel(d string) string {
	switch d {
	case "anthropic", "openai-chat", "openai-responses", "passthrough":
		return d
	}
	return otherLabel
}

func modelOutcomeLabel(o string) string {
	switch o {
	case "ok", "upstream_error", "unreachable", "refused", "error":
		return o
	}
	return otherLabel
}
