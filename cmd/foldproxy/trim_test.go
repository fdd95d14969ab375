package main

import (
	"context"
	"log/slog"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
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

// fakeHeap is the heap trimLoop reads in TestTrimLoopSleepsWhenIdle.
type fakeHeap struct {
	mu             sync.Mutex
	s              heapSample
	samples, frees int
	startupDrops   int
}

func (h *fakeHeap) sample() heapSample {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.samples++
	return h.s
}

func (h *fakeHeap) free() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.frees++
	h.s.objects, h.s.free = h.s.live, 0
}

func (h *fakeHeap) alloc(n uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.s.allocs += n
	h.s.objects += n
}

func (h *fakeHeap) counts() (samples, frees, drops int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.samples, h.frees, h.startupDrops
}

// An idle process does not wake: the trimmer samples from start-up until
// the first quiet tick, then only after it is woken (a call ended, a
// collection after allocation), until the next quiet tick. Before, it
// sampled the heap four times a second for ever.
func TestTrimLoopSleepsWhenIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const mb = 1 << 20
		h := &fakeHeap{s: heapSample{allocs: 50 * mb, objects: 30 * mb, live: 20 * mb}}
		wake := make(chan struct{}, 1)
		var armed atomic.Bool
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() {
			defer close(done)
			trimLoop(ctx, slog.New(slog.DiscardHandler), trimDeps{
				sample: h.sample, free: h.free, wake: wake, armed: &armed,
				dropStartup: func() int64 { h.mu.Lock(); h.startupDrops++; h.mu.Unlock(); return 0 },
			})
		}()

		// Start-up: the first tick has nothing to compare, the second is
		// quiet: the garbage is returned and start-up's pages dropped;
		// trimSettle quiet ticks end the sampling.
		time.Sleep((1 + trimSettle) * trimTick)
		synctest.Wait()
		samples, frees, drops := h.counts()
		if frees != 1 || drops != 1 || armed.Load() {
			t.Fatalf("after start-up: %d samples, %d trims, %d start-up drops, armed %v; want 1 trim, 1 drop, asleep", samples, frees, drops, armed.Load())
		}

		// Idle for an hour: no sample at all.
		time.Sleep(time.Hour)
		synctest.Wait()
		if n, _, _ := h.counts(); n != samples {
			t.Fatalf("an idle hour took %d samples of the heap; want none", n-samples)
		}

		// A burst, then the wake: sampled while busy, trimmed at the first
		// quiet tick, asleep again.
		h.alloc(40 * mb)
		wake <- struct{}{}
		synctest.Wait()
		if !armed.Load() {
			t.Fatal("woken, the trimmer is not sampling")
		}
		time.Sleep(trimTick) // busy: 40 MB since the last sample
		synctest.Wait()
		h.alloc(3 * mb)      // what follows the reply
		time.Sleep(trimTick) // busy again
		synctest.Wait()
		time.Sleep(trimTick) // quiet: trim
		synctest.Wait()
		if _, frees, _ := h.counts(); frees != 2 || !armed.Load() {
			t.Fatalf("at the first quiet tick after the burst: %d trims, armed %v; want 2, still sampling", frees, armed.Load())
		}
		time.Sleep(trimSettle * trimTick) // settled: asleep
		synctest.Wait()
		samples, frees, drops = h.counts()
		if frees != 2 || drops != 1 || armed.Load() {
			t.Fatalf("after a burst: %d trims, %d start-up drops, armed %v; want 2 trims, still 1 drop, asleep", frees, drops, armed.Load())
		}
		time.Sleep(time.Hour)
		synctest.Wait()
		if n, _, _ := h.counts(); n != samples {
			t.Fatalf("an idle hour after the burst took %d samples; want none", n-samples)
		}

		// A cancelled context ends the loop.
		cancel()
		<-done
	})
}
