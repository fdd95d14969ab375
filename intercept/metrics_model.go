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
	reg.MustRegister(m.requests, m.tokens, m.folds, m.guidance, m.latency)
	return m
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
