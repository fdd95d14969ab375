package storetest

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/foldproxy/foldproxy/fold/memory"
	"github.com/foldproxy/foldproxy/policy"
)

// BenchInject fills the store with n memories of the corpus and measures
// memory.Service.Inject (what branch_create runs) for queries made from
// the trajectories' tasks, reporting p50 and p99 in microseconds and the
// items injected per query. words counts tokens as whitespace-separated
// words, to leave the tokenizer out of the figure.
func BenchInject(b *testing.B, st memory.Store, corpus []*memory.Memory, queries []string) {
	ctx := context.Background()
	for _, m := range corpus {
		if err := st.Put(ctx, m); err != nil {
			b.Fatal(err)
		}
	}
	svc, err := memory.New(memory.Options{
		Settings: policy.Memory{Project: corpus[0].Project, Principal: "alice"}, Store: st,
		Count: func(s string) int { return len(strings.Fields(s)) },
	})
	if err != nil {
		b.Fatal(err)
	}
	var lat []time.Duration
	items := 0
	b.ResetTimer()
	i := 0
	for b.Loop() {
		t0 := time.Now()
		got, _, err := svc.Inject(ctx, queries[i%len(queries)], 8192)
		lat = append(lat, time.Since(t0))
		if err != nil {
			b.Fatal(err)
		}
		items += len(got)
		i++
	}
	b.StopTimer()
	slices.Sort(lat)
	pct := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) }
	b.ReportMetric(pct(0.50), "p50-µs")
	b.ReportMetric(pct(0.99), "p99-µs")
	b.ReportMetric(float64(items)/float64(len(lat)), "items/op")
}

// Queries returns one query per trajectory: its task's text, as a
// branch's description and prompt would carry it.
func Queries(trajs []Trajectory) []string {
	out := make([]string, 0, len(trajs))
	for _, tr := range trajs {
		q := strings.TrimPrefix(tr.Task, "Consider the following PR description:\n")
		out = append(out, q[:min(len(q), 1500)])
	}
	return out
}
