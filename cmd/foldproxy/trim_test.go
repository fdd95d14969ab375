package main

import (
	"runtime/metrics"
	"testing"
)

func TestTrimmer(t *testing.T) {
	const mb = 1 << 20
	var tr trimmer
	steps := []struct {
		name        string
		s           heapSample
		quiet, want bool
	}{
		{"first sample: nothing to compare", heapSample{allocs: 100 * mb, objects: 60 * mb, live: 30 * mb}, false, false},
		{"busy: allocating", heapSample{allocs: 120 * mb, objects: 80 * mb, live: 30 * mb}, false, false},
		{"quiet with garbage", heapSample{allocs: 120*mb + 1000, objects: 80 * mb, live: 30 * mb}, true, true},
		{"quiet, little garbage", heapSample{allocs: 120*mb + 2000, objects: 31 * mb, live: 30 * mb, free: 1 * mb}, true, false},
		{"quiet, free pages", heapSample{allocs: 120*mb + 3000, objects: 30 * mb, live: 30 * mb, free: 5 * mb}, true, true},
		{"live above objects (a collection under way)", heapSample{allocs: 120*mb + 4000, objects: 29 * mb, live: 30 * mb}, true, false},
		{"just over the quiet limit", heapSample{allocs: 120*mb + 4000 + trimQuiet + 1, objects: 60 * mb, live: 30 * mb}, false, false},
		{"quiet again", heapSample{allocs: 120*mb + 4000 + trimQuiet + 1, objects: 60 * mb, live: 30 * mb}, true, true},
	}
	for _, st := range steps {
		if quiet, got := tr.step(st.s); quiet != st.quiet || got != st.want {
			t.Errorf("%s: step = %v, %v, want %v, %v", st.name, quiet, got, st.quiet, st.want)
		}
	}
}

// TestReadHeap checks that every metric the trimmer reads exists in this
// Go version (an unknown name reads as zero and would never trim).
func TestReadHeap(t *testing.T) {
	known := map[string]bool{}
	for _, d := range metrics.All() {
		known[d.Name] = true
	}
	for _, name := range trimMetrics {
		if !known[name] {
			t.Errorf("runtime/metrics has no %s", name)
		}
	}
	ms := make([]metrics.Sample, len(trimMetrics))
	for i, name := range trimMetrics {
		ms[i].Name = name
	}
	s := readHeap(ms)
	if s.allocs == 0 || s.objects == 0 {
		t.Fatalf("heap sample %+v: allocations and objects must be counted", s)
	}
}
