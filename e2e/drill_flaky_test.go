//go:build drills

package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// Drill 2: an upstream that crashes on every third call (flaky
// -crash-every 3), driven by a few concurrent sessions. Each call either
// succeeds or fails fast with an error that names the upstream; none hangs
// (each is bounded at flakyCallBound); the upstream is restarted after
// every crash, with backoff, as foldproxy_upstream_restarts_total and the
// proxy's log both show; and it still answers at the end.

const (
	flakyWorkers   = 3
	flakyPerWorker = 20 // 60 calls in all
	flakyCallBound = 10 * time.Second
)

func TestDrillFlakyUpstream(t *testing.T) {
	ctx := testContext(t, 4*time.Minute)
	cfg := writeConfig(t, map[string]any{"flaky": stdioEntry(helperBin(t, "flaky"), "-crash-every", "3")}, nil)
	px := startDrillProxy(t, cfg, t.TempDir())
	hc := drillHTTPClient(2 * flakyWorkers)

	type result struct {
		worker, call int
		took         time.Duration
		ok           bool
		text         string
		err          error // transport failure or hang
	}
	results := make(chan result, flakyWorkers*flakyPerWorker)
	var wg sync.WaitGroup
	for w := 0; w < flakyWorkers; w++ {
		c := &drillClient{hc: hc, url: px.url}
		if err := c.initialize(ctx); err != nil {
			t.Fatalf("worker %d: %v", w, err)
		}
		if w == 0 {
			c.waitTools(ctx, t, "flaky__work")
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < flakyPerWorker; i++ {
				cctx, cancel := context.WithTimeout(ctx, flakyCallBound)
				t0 := time.Now()
				out, err := c.callTool(cctx, "flaky__work", nil)
				r := result{worker: w, call: i, took: time.Since(t0), err: err}
				if cctx.Err() != nil && ctx.Err() == nil {
					r.err = fmt.Errorf("hung: no answer within %v (%v)", flakyCallBound, err)
				}
				cancel()
				if err == nil {
					r.ok, r.text = !out.failed(), out.describe()
				}
				results <- r
			}
		}()
	}
	wg.Wait()
	close(results)

	var ok, failed int
	var maxOK, maxFail time.Duration
	kinds := map[string]int{} // failure texts, shortened
	for r := range results {
		switch {
		case r.err != nil:
			t.Errorf("worker %d call %d: %v", r.worker, r.call, r.err)
		case r.ok:
			ok++
			maxOK = max(maxOK, r.took)
			if !strings.Contains(r.text, "work call") {
				t.Errorf("worker %d call %d: unexpected success text %q", r.worker, r.call, truncate(r.text, 200))
			}
		default:
			failed++
			maxFail = max(maxFail, r.took)
			if !strings.Contains(r.text, `"flaky"`) && !strings.Contains(r.text, "flaky") {
				t.Errorf("worker %d call %d: the error %q does not name the upstream \"flaky\"", r.worker, r.call, truncate(r.text, 300))
			}
			k := r.text
			if i := strings.Index(k, "("); i > 0 {
				k = k[:i]
			}
			kinds[strings.TrimSpace(truncate(k, 120))]++
		}
	}

	// The upstream still answers: this also restarts it after the last crash.
	c := &drillClient{hc: hc, url: px.url}
	if err := c.initialize(ctx); err != nil {
		t.Fatal(err)
	}
	var final *toolOutcome
	for i := 0; i < 20; i++ { // a call may land while the upstream restarts
		cctx, cancel := context.WithTimeout(ctx, flakyCallBound)
		out, err := c.callTool(cctx, "flaky__stats", nil)
		cancel()
		if err != nil {
			t.Fatalf("flaky__stats after the drill: %v", err)
		}
		if final = out; !out.failed() {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	if final.failed() {
		t.Errorf("flaky__stats after the drill still fails: %s", final.describe())
	}
	if px.p.exited() {
		t.Fatalf("foldproxy exited: %v", px.p.err)
	}

	// Restarts: the proxy's log has one "upstream up" per start, and the
	// upstream's own stderr (relayed to the log) one line per crash.
	log := px.p.out.String()
	ups := countLines(log, `msg="upstream up"`, "upstream=flaky")
	crashes := countLines(log, "crashing on purpose")
	logRestarts := ups - 1
	metric, found, err := scrapeMetric(ctx, hc, "http://"+px.addr+"/metrics", "foldproxy_upstream_restarts_total", `upstream="flaky"`)
	if err != nil {
		t.Errorf("scraping /metrics: %v", err)
	}
	if crashes == 0 || failed == 0 {
		t.Errorf("the upstream never crashed (%d crashes, %d failed calls): the drill tested nothing", crashes, failed)
	}
	if logRestarts < crashes {
		t.Errorf("%d crashes but only %d restarts in the log", crashes, logRestarts)
	}
	if !found || int(metric) != logRestarts {
		t.Errorf("foldproxy_upstream_restarts_total{upstream=\"flaky\"} = %v (present %v), want %d: the restarts in the log", metric, found, logRestarts)
	}
	gaps := upGaps(log)
	t.Logf("DRILL flaky [crash-every 3]: %d calls by %d sessions: %d succeeded (slowest %v), %d failed fast (slowest %v), 0 hung; failures: %v; "+
		"crashes %d, restarts %d in the log, foldproxy_upstream_restarts_total %v; gaps between upstream starts: %s",
		flakyWorkers*flakyPerWorker, flakyWorkers, ok, maxOK.Round(time.Millisecond), failed, maxFail.Round(time.Millisecond), kinds,
		crashes, logRestarts, metric, gaps)
}

// upGaps summarizes the time between consecutive "upstream up" lines of the
// flaky upstream in the proxy's log: min, median and max.
func upGaps(log string) string {
	var times []time.Time
	for line := range strings.SplitSeq(log, "\n") {
		if !strings.Contains(line, `msg="upstream up"`) || !strings.Contains(line, "upstream=flaky") {
			continue
		}
		rest, ok := strings.CutPrefix(line, "time=")
		if !ok {
			continue
		}
		ts, _, _ := strings.Cut(rest, " ")
		if tm, err := time.Parse(time.RFC3339Nano, ts); err == nil {
			times = append(times, tm)
		}
	}
	if len(times) < 2 {
		return "n/a"
	}
	var gaps []time.Duration
	for i := 1; i < len(times); i++ {
		gaps = append(gaps, times[i].Sub(times[i-1]))
	}
	for i := range gaps { // insertion sort: a few dozen values
		for j := i; j > 0 && gaps[j] < gaps[j-1]; j-- {
			gaps[j], gaps[j-1] = gaps[j-1], gaps[j]
		}
	}
	return fmt.Sprintf("min %v, median %v, max %v", gaps[0].Round(time.Millisecond), gaps[len(gaps)/2].Round(time.Millisecond), gaps[len(gaps)-1].Round(time.Millisecond))
}
