package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// runArchive measures section 4: the resident memory of the process that
// holds the store (foldproxy serve --standalone over stdio), idle and after
// 3,000 results of 100 KB have been archived. Every result is archived, so
// this is the memory that must not grow with the archive.
func runArchive(ctx context.Context, e *env, res *results) error {
	const sec = "4 archive memory"
	calls, size, workers := 3000, 100_000, 4
	if e.quick {
		calls = 300
	}
	p, err := e.startProxyArgs(ctx, "archive", map[string]any{"replay": e.replayEntry()}, []string{"--standalone"}, "replay__emit")
	if err != nil {
		return err
	}
	defer p.close()
	pid := p.pid()
	// One call warms the path (the first archive write, the upstream's
	// first answer); then the process settles.
	if _, err := timeCalls(ctx, p, "replay__emit", size, 1); err != nil {
		return err
	}
	time.Sleep(time.Second)
	idle, err := procStatus(pid, "VmRSS", "VmHWM")
	if err != nil {
		return err
	}
	e.log.Info("archive: calling", "calls", calls, "bytes", size, "workers", workers)
	t0 := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, workers)
	for w := range workers {
		wg.Go(func() {
			for next.Add(1) <= int64(calls) {
				if _, err := timeCalls(ctx, p, "replay__emit", size, 1); err != nil {
					errs[w] = err
					return
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	elapsed := time.Since(t0)
	time.Sleep(time.Second)
	after, err := procStatus(pid, "VmRSS", "VmHWM")
	if err != nil {
		return err
	}
	note := fmt.Sprintf("%d x %d B results over stdio in %.1fs (%d concurrent)", calls, size, elapsed.Seconds(), workers)
	res.add(row{Section: sec, Metric: "VmRSS idle", Value: mib(idle["VmRSS"]),
		Num: float64(idle["VmRSS"]) / (1 << 20), Unit: "MiB",
		Target: "<= 40 MB", Met: met(idle["VmRSS"] <= 40e6), Note: "foldproxy serve --standalone, after one call"})
	res.add(row{Section: sec, Metric: fmt.Sprintf("VmRSS after %d x 100 KB", calls), Value: mib(after["VmRSS"]),
		Baseline: mib(idle["VmRSS"]) + " idle", Ratio: ratio(float64(after["VmRSS"]), float64(idle["VmRSS"])),
		Num: float64(after["VmRSS"]) / (1 << 20), Base: float64(idle["VmRSS"]) / (1 << 20), Unit: "MiB",
		Target: "<= 150 MB", Met: met(after["VmRSS"] <= 150e6), Note: note})
	res.add(row{Section: sec, Metric: "VmHWM (peak)", Value: mib(after["VmHWM"]),
		Num: float64(after["VmHWM"]) / (1 << 20), Unit: "MiB"})
	return nil
}
