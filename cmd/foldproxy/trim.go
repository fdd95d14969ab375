package main

import (
	"context"
	"log/slog"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// Returning memory when the process goes quiet.
//
// Go collects garbage when the heap has grown by GOGC (100%) over what was
// live after the last collection, and a process that stops allocating
// never reaches that point: what a burst of work left (a 100 KB result is
// decoded, scrubbed, counted and archived through several copies) stays
// resident until the runtime's forced collection two minutes later and the
// scavenger's slow return after it. foldproxy mostly waits for an agent
// between calls, so once the process has allocated almost nothing for a
// tick it collects and returns the free pages at once
// (debug.FreeOSMemory), when there is enough to return. During a burst no
// tick is quiet and nothing changes: GOGC stays at its default, so the
// throughput of a busy proxy pays nothing for this.
//
// The pages of the executable that start-up mapped (code, read-only data:
// the tokenizer's vocabulary literal, gitleaks' configuration) are
// unmapped once, at the first quiet tick, which ends start-up
// (dropStartupPages). This changes no memory in use: the pages stay in the
// page cache, shared by every foldproxy process, where the kernel can
// reclaim them sooner than mapped ones; what calls run through maps back
// on the next call and stays.

const (
	// trimTick is how often the heap is sampled.
	trimTick = 250 * time.Millisecond
	// trimQuiet is the most a tick may allocate and still be quiet.
	trimQuiet = 256 << 10
	// trimMin is the least garbage plus free heap worth a collection.
	trimMin = 4 << 20
)

// heapSample is what the trimmer reads of the heap.
type heapSample struct {
	allocs  uint64 // bytes allocated since the start (cumulative)
	objects uint64 // bytes of heap objects, live or not yet collected
	live    uint64 // bytes live after the last collection
	free    uint64 // free heap bytes not returned to the OS
}

// trimmer decides, tick by tick, when to return memory.
type trimmer struct {
	last heapSample
	have bool
}

// step takes a tick's sample and reports whether the tick was quiet and
// whether to trim now: it was, and there are at least trimMin bytes to
// give back.
func (t *trimmer) step(s heapSample) (quiet, trim bool) {
	prev, had := t.last, t.have
	t.last, t.have = s, true
	if !had || s.allocs-prev.allocs > trimQuiet {
		return false, false
	}
	var garbage uint64
	if s.objects > s.live {
		garbage = s.objects - s.live
	}
	return true, garbage+s.free >= trimMin
}

var trimMetrics = []string{
	"/gc/heap/allocs:bytes",
	"/memory/classes/heap/objects:bytes",
	"/gc/heap/live:bytes",
	"/memory/classes/heap/free:bytes",
}

func readHeap(ms []metrics.Sample) heapSample {
	metrics.Read(ms)
	v := func(i int) uint64 {
		if ms[i].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return ms[i].Value.Uint64()
	}
	return heapSample{allocs: v(0), objects: v(1), live: v(2), free: v(3)}
}

// trimWhenIdle returns memory to the OS whenever the process goes quiet
// after allocating, until ctx ends.
func trimWhenIdle(ctx context.Context, logger *slog.Logger) {
	ms := make([]metrics.Sample, len(trimMetrics))
	for i, name := range trimMetrics {
		ms[i].Name = name
	}
	tick := time.NewTicker(trimTick)
	defer tick.Stop()
	var t trimmer
	started := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		quiet, trim := t.step(readHeap(ms))
		if trim {
			debug.FreeOSMemory()
		}
		if quiet && !started {
			// Once, when start-up is over (after its collection, which
			// reads the pc tables of every goroutine's stack). Not after
			// later trims: what calls run through is used again, and
			// unmapping it would only move it out of the count.
			started = true
			n := dropStartupPages()
			logger.Debug("start-up over: the executable's pages it read unmapped", "resident_bytes", n, "heap_trim", trim)
		}
		if trim {
			// The collection allocates a little: start the next
			// quiet tick from here.
			t.step(readHeap(ms))
		}
	}
}
