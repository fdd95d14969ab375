package main

import (
	"context"
	"log/slog"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync/atomic"
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
// tick after some work it collects and returns the free pages at once
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
	// trimTick is how often the heap is sampled after work.
	trimTick = 250 * time.Millisecond
	// trimQuiet is the most a tick may allocate and still be quiet.
	trimQuiet = 256 << 10
	// trimMin is the least garbage plus free heap worth a collection.
	trimMin = 4 << 20
	// trimSettle is how many quiet ticks in a row end the sampling after
	// a wake: what follows a call's reply (the store's commit, the audit
	// record, the catalogue of an upstream that just started) allocates
	// after its first quiet tick.
	trimSettle = 4
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

// Waking only after work. The trimmer does not sample on a fixed tick
// while the process idles: it samples every trimTick from start-up until
// trimSettle quiet ticks in a row, and after that only once woken, until
// the next such run. It is woken by activity: a tool call that ends
// (trimActivity, from the intercept chain), and a garbage collection of a
// process that allocated since the trimmer last looked (watchGC: a burst
// that allocates enough to matter runs one). An idle process runs no
// collection but the runtime's forced one every two minutes, which
// allocated nothing, so the trimmer does not wake then.

var (
	trimWake  = make(chan struct{}, 1)
	trimArmed atomic.Bool   // sampling every trimTick: no need to wake it
	trimSeen  atomic.Uint64 // /gc/heap/allocs:bytes at the last sample
)

// trimActivity wakes the trimmer after some work (cheap when it is
// already sampling).
func trimActivity() {
	if trimArmed.Load() {
		return
	}
	select {
	case trimWake <- struct{}{}:
	default:
	}
}

// watchGC calls wake after every garbage collection that follows more
// than trimQuiet bytes of allocation since the trimmer's last sample: a
// cleanup on an unreachable sentinel runs after each collection, and sets
// the next one.
func watchGC() {
	type sentinel struct{ _ [64]byte } // not from the tiny allocator, which batches cleanups
	ms := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	var arm func()
	arm = func() {
		runtime.AddCleanup(new(sentinel), func(struct{}) {
			metrics.Read(ms)
			if ms[0].Value.Kind() == metrics.KindUint64 && ms[0].Value.Uint64() > trimSeen.Load()+trimQuiet {
				trimActivity()
			}
			arm()
		}, struct{}{})
	}
	arm()
}

// trimDeps are what the trimmer's loop reads and does, replaced in tests.
type trimDeps struct {
	sample      func() heapSample
	free        func() // debug.FreeOSMemory
	dropStartup func() int64
	wake        <-chan struct{}
	armed       *atomic.Bool
}

// trimWhenIdle returns memory to the OS whenever the process goes quiet
// after allocating, until ctx ends.
func trimWhenIdle(ctx context.Context, logger *slog.Logger) {
	ms := make([]metrics.Sample, len(trimMetrics))
	for i, name := range trimMetrics {
		ms[i].Name = name
	}
	watchGC()
	trimLoop(ctx, logger, trimDeps{
		sample: func() heapSample {
			s := readHeap(ms)
			trimSeen.Store(s.allocs)
			return s
		},
		free:        debug.FreeOSMemory,
		dropStartup: dropStartupPages,
		wake:        trimWake,
		armed:       &trimArmed,
	})
}

// trimLoop samples the heap every trimTick while armed: from the start,
// and from each wake, until trimSettle quiet ticks in a row.
func trimLoop(ctx context.Context, logger *slog.Logger, d trimDeps) {
	tick := time.NewTimer(trimTick)
	defer tick.Stop()
	d.armed.Store(true)
	var t trimmer
	started := false
	quietRun := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.wake:
			if !d.armed.Load() {
				d.armed.Store(true)
				tick.Reset(trimTick)
			}
			quietRun = 0
			continue
		case <-tick.C:
		}
		quiet, trim := t.step(d.sample())
		if trim {
			d.free()
		}
		if quiet && !started {
			// Once, when start-up is over (after its collection, which
			// reads the pc tables of every goroutine's stack). Not after
			// later trims: what calls run through is used again, and
			// unmapping it would only move it out of the count.
			started = true
			n := d.dropStartup()
			logger.Debug("start-up over: the executable's pages it read unmapped", "resident_bytes", n, "heap_trim", trim)
		}
		if trim {
			// The collection allocates a little: start the next
			// quiet tick from here.
			t.step(d.sample())
		}
		if !quiet {
			quietRun = 0
		} else if quietRun++; quietRun >= trimSettle {
			// Settled: sleep until woken.
			d.armed.Store(false)
			continue
		}
		tick.Reset(trimTick)
	}
}
