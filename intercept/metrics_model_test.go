package intercept

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestMetricsModelRequest(t *testing.T) {
	m := NewMetrics()
	m.ModelRequest("anthropic", "ok", 12000, 3000, 2, true, 40*time.Millisecond)
	m.ModelRequest("anthropic", "ok", 500, 500, 0, false, time.Millisecond)
	m.ModelRequest("openai-chat", "unreachable", 0, 0, 0, false, time.Millisecond)
	m.ModelRequest("klingon", "weird", 1, 1, 0, false, 0)
	mm := m.model
	for _, c := range []struct {
		got, want float64
		what      string
	}{
		{testutil.ToFloat64(mm.requests.WithLabelValues("anthropic", "ok")), 2, "anthropic ok requests"},
		{testutil.ToFloat64(mm.requests.WithLabelValues("openai-chat", "unreachable")), 1, "openai unreachable requests"},
		{testutil.ToFloat64(mm.requests.WithLabelValues("other", "other")), 1, "unknown labels bounded to other"},
		{testutil.ToFloat64(mm.tokens.WithLabelValues("anthropic", ModelTokensReceived)), 12500, "received tokens"},
		{testutil.ToFloat64(mm.tokens.WithLabelValues("anthropic", ModelTokensForwarded)), 3500, "forwarded tokens"},
		{testutil.ToFloat64(mm.folds.WithLabelValues("anthropic")), 2, "folded branches"},
		{testutil.ToFloat64(mm.guidance.WithLabelValues("anthropic")), 1, "guidance"},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.what, c.got, c.want)
		}
	}
	var nilMetrics *Metrics
	nilMetrics.ModelRequest("anthropic", "ok", 1, 1, 1, true, time.Second) // no panic
}
