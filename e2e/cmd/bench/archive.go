package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// archiveRun is the resident memory of one foldproxy in the archive
// section, in bytes.
type archiveRun struct {
	idle, after, peak int64 // VmRSS of the process holding the store, VmHWM
	relay, relayAnon  int64 // the stdio process attached to the daemon (default mode)
	elapsed           time.Duration
}

// runArchive measures section 4: the resident memory of the process that
// holds the store, idle and after 3,000 results of 100 KB have been
// archived: foldproxy serve --standalone over stdio, and the project's
// daemon of the default mode (with the stdio process attached to it); with
// -base, the base binary's too. Every result is archived, so this is the
// memory that must not grow with the archive.
func runArchive(ctx context.Context, e *env, res *results) error {
	const sec = "4 archive memory"
	calls, size, workers := 3000, 100_000, 4
	if e.quick {
		calls = 300
	}
	type variant struct {
		label, bin string
		extra      []string
	}
	variants := []variant{{"--standalone", e.proxy, []string{"--standalone"}}, {"daemon", e.proxy, nil}}
	if e.base != "" {
		variants = append(variants, variant{"base --standalone", e.base, []string{"--standalone"}}, variant{"base daemon", e.base, nil})
	}
	runs := map[string]archiveRun{}
	for _, v := range variants {
		r, err := archiveOnce(ctx, e, v.bin, v.extra, calls, size, workers)
		if err != nil {
			return fmt.Errorf("%s: %w", v.label, err)
		}
		runs[v.label] = r
	}
	for _, v := range variants {
		r := runs[v.label]
		suffix := ""
		if v.label != "--standalone" {
			suffix = ", " + v.label
		}
		base := ""
		switch v.label {
		case "--standalone", "daemon":
			base = "base " + v.label
		}
		// Issue 29: no higher than the base binary's, in the same run.
		cmp := func(x *row, get func(archiveRun) int64) {
			if b, ok := runs[base]; ok {
				x.Baseline, x.Base, x.Ratio = mib(get(b))+" base", float64(get(b))/(1<<20), ratio(float64(get(r)), float64(get(b)))
				x.Target, x.Met = "<= base", met(get(r) <= get(b))
			}
		}
		x := row{Section: sec, Metric: "VmRSS idle" + suffix, Value: mib(r.idle), Num: float64(r.idle) / (1 << 20), Unit: "MiB",
			Note: fmt.Sprintf("foldproxy serve %s, after one call", v.label)}
		if v.label == "--standalone" || v.label == "daemon" {
			x.Target, x.Met = "<= 40 MB", met(r.idle <= 40e6)
		}
		cmp(&x, func(a archiveRun) int64 { return a.idle })
		res.add(x)
		y := row{Section: sec, Metric: fmt.Sprintf("VmRSS after %d x 100 KB%s", calls, suffix), Value: mib(r.after),
			Num: float64(r.after) / (1 << 20), Unit: "MiB",
			Note: fmt.Sprintf("%d x %d B results over stdio in %.1fs (%d concurrent); peak (VmHWM) %s", calls, size, r.elapsed.Seconds(), workers, mib(r.peak))}
		if v.label == "--standalone" || v.label == "daemon" {
			y.Target, y.Met = "<= 150 MB", met(r.after <= 150e6)
		}
		cmp(&y, func(a archiveRun) int64 { return a.after })
		res.add(y)
		if r.relay > 0 {
			z := row{Section: sec, Metric: "VmRSS of the attached stdio process" + suffix, Value: mib(r.relay),
				Num: float64(r.relay) / (1 << 20), Unit: "MiB", Note: fmt.Sprintf("after the calls; its own (RssAnon) %s", mib(r.relayAnon))}
			cmp(&z, func(a archiveRun) int64 { return a.relay })
			res.add(z)
		}
	}
	return nil
}

// archiveOnce runs one foldproxy (bin, with extra arguments) through the
// archive section's calls.
func archiveOnce(ctx context.Context, e *env, bin string, extra []string, calls, size, workers int) (archiveRun, error) {
	var r archiveRun
	p, state, err := e.startProxyBin(ctx, "archive", bin, map[string]any{"replay": e.replayEntry()}, extra, "replay__emit")
	if err != nil {
		return r, err
	}
	defer p.close()
	pids := proxyPIDs(p.pid(), state)
	pid := pids[len(pids)-1] // the daemon, in the default mode
	// One call warms the path (the first archive write, the upstream's
	// first answer); then the process settles.
	if _, err := timeCalls(ctx, p, "replay__emit", size, 1); err != nil {
		return r, err
	}
	time.Sleep(time.Second)
	idle, err := procStatus(pid, "VmRSS", "VmHWM")
	if err != nil {
		return r, err
	}
	e.log.Info("archive: calling", "calls", calls, "bytes", size, "workers", workers, "bin", bin, "args", extra)
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
		return r, err
	}
	r.elapsed = time.Since(t0)
	time.Sleep(time.Second)
	after, err := procStatus(pid, "VmRSS", "VmHWM")
	if err != nil {
		return r, err
	}
	r.idle, r.after, r.peak = idle["VmRSS"], after["VmRSS"], after["VmHWM"]
	if len(pids) > 1 {
		if st, err := procStatus(pids[0], "VmRSS", "RssAnon"); err == nil {
			r.relay, r.relayAnon = st["VmRSS"], st["RssAnon"]
		}
	}
	return r, nil
}
