//go:build drills

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Drill 3: a soak of soakSessions concurrent HTTP sessions, each making
// soakCalls calls to replay's cheap emit tool. Zero errors are allowed. The
// proxy's resident memory (VmRSS) is sampled once every session has made
// soakWarm calls (the warm-up: every session open, every code path run) and
// again at the end, with every session still open; the only assertion on it
// is a generous bound, end < 2× warm-up. Both numbers are logged, and a
// third after the sessions are deleted.

const soakWarm = 5

// soakSessions is the concurrent sessions: 200, or
// FOLDPROXY_DRILL_SOAK_SESSIONS (make drills-quick runs fewer).
var soakSessions = envInt("FOLDPROXY_DRILL_SOAK_SESSIONS", 200)

// soakCalls is the calls per session: 25, or FOLDPROXY_DRILL_SOAK_CALLS for
// a longer soak by hand.
var soakCalls = envInt("FOLDPROXY_DRILL_SOAK_CALLS", 25)

func TestDrillSoak(t *testing.T) {
	ctx := testContext(t, 5*time.Minute)
	cfg := writeConfig(t, map[string]any{"replay": replayEntry(t)}, nil)
	px := startDrillProxy(t, cfg, t.TempDir())
	hc := drillHTTPClient(soakSessions + 8)
	probe := &drillClient{hc: hc, url: px.url}
	if err := probe.initialize(ctx); err != nil {
		t.Fatal(err)
	}
	probe.waitTools(ctx, t, "replay__emit")
	metricsURL := "http://" + px.addr + "/metrics"
	// runtime reads the proxy's live heap and goroutines from /metrics, to
	// tell a leak of Go objects from memory the runtime keeps.
	runtime := func() string {
		heap, _, err1 := scrapeMetric(ctx, hc, metricsURL, "go_memstats_heap_inuse_bytes")
		gor, _, err2 := scrapeMetric(ctx, hc, metricsURL, "go_goroutines")
		if err1 != nil || err2 != nil {
			return fmt.Sprintf("(metrics: %v %v)", err1, err2)
		}
		return fmt.Sprintf("heap in use %.1f MiB, %d goroutines", heap/(1<<20), int(gor))
	}
	rssStart, err := vmRSS(px.pid())
	if err != nil {
		t.Fatalf("reading the proxy's VmRSS: %v", err)
	}
	rtStart := runtime()

	var (
		errCount atomic.Int64
		okCalls  atomic.Int64
		mu       sync.Mutex
		firstErr []string
	)
	fail := func(format string, args ...any) {
		errCount.Add(1)
		mu.Lock()
		if len(firstErr) < 10 {
			firstErr = append(firstErr, fmt.Sprintf(format, args...))
		}
		mu.Unlock()
	}
	var warm, all sync.WaitGroup
	release := make(chan struct{})
	warm.Add(soakSessions)
	all.Add(soakSessions)
	clients := make([]*drillClient, soakSessions)
	t0 := time.Now()
	for s := 0; s < soakSessions; s++ {
		c := &drillClient{hc: hc, url: px.url}
		clients[s] = c
		go func() {
			defer all.Done()
			warmed := false
			defer func() {
				if !warmed {
					warm.Done()
				}
			}()
			if err := c.initialize(ctx); err != nil {
				fail("session %d: %v", s, err)
				return
			}
			for i := 0; i < soakCalls; i++ {
				if i == soakWarm {
					warmed = true
					warm.Done()
					select {
					case <-release:
					case <-ctx.Done():
						fail("session %d: %v waiting for the warm-up sample", s, ctx.Err())
						return
					}
				}
				n := 256 + (s*31+i*17)%768
				out, err := c.callTool(ctx, "replay__emit", map[string]any{"bytes": n, "kind": "log"})
				switch {
				case err != nil:
					fail("session %d call %d: %v", s, i, err)
				case out.failed() || len(out.text) != n:
					fail("session %d call %d: %d bytes, want %d (failed %v): %s", s, i, len(out.text), n, out.failed(), truncate(out.describe(), 200))
				default:
					okCalls.Add(1)
				}
			}
		}()
	}
	if !waitGroupWithin(&warm, ctx) {
		close(release)
		t.Fatalf("the sessions did not finish the warm-up: %v", ctx.Err())
	}
	warmTook := time.Since(t0)
	rssWarm, err := vmRSS(px.pid())
	if err != nil {
		t.Fatalf("reading the proxy's VmRSS: %v", err)
	}
	rtWarm := runtime()
	close(release)
	if !waitGroupWithin(&all, ctx) {
		t.Fatalf("the sessions did not finish: %v", ctx.Err())
	}
	took := time.Since(t0)
	rssEnd, err := vmRSS(px.pid())
	if err != nil {
		t.Fatalf("reading the proxy's VmRSS: %v", err)
	}

	rtEnd := runtime()

	// End the sessions, then sample once more.
	var deleted atomic.Int64
	var dwg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for _, c := range clients {
		if c.sid == "" {
			continue
		}
		dwg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; dwg.Done() }()
			req, err := http.NewRequestWithContext(ctx, http.MethodDelete, c.url, nil)
			if err != nil {
				return
			}
			req.Header.Set("Mcp-Session-Id", c.sid)
			resp, err := hc.Do(req)
			if err != nil {
				fail("DELETE session %s: %v", c.sid, err)
				return
			}
			resp.Body.Close()
			if resp.StatusCode/100 == 2 {
				deleted.Add(1)
			} else {
				fail("DELETE session %s: status %d", c.sid, resp.StatusCode)
			}
		}()
	}
	dwg.Wait()
	time.Sleep(time.Second)
	rssClosed, _ := vmRSS(px.pid())
	rtClosed := runtime()

	if px.p.exited() {
		t.Fatalf("foldproxy exited during the soak: %v", px.p.err)
	}
	if n := errCount.Load(); n > 0 {
		t.Errorf("%d errors; the first ones:\n%s", n, joinLines(firstErr))
	}
	if want := int64(soakSessions * soakCalls); okCalls.Load() != want {
		t.Errorf("%d calls succeeded, want %d", okCalls.Load(), want)
	}
	if rssEnd >= 2*rssWarm {
		t.Errorf("VmRSS grew from %d KiB after the warm-up to %d KiB at the end: not flat", rssWarm, rssEnd)
	}
	t.Logf("DRILL soak: %d sessions × %d calls = %d calls, %d errors, in %v (warm-up of %d calls each in %v); %d sessions deleted; "+
		"proxy VmRSS: %d KiB idle, %d KiB after warm-up, %d KiB at the end (%+.1f%%), %d KiB after the sessions were deleted; "+
		"Go runtime: idle %s; warm-up %s; end %s; deleted %s",
		soakSessions, soakCalls, okCalls.Load(), errCount.Load(), took.Round(time.Millisecond), soakWarm, warmTook.Round(time.Millisecond),
		deleted.Load(), rssStart, rssWarm, rssEnd, 100*float64(rssEnd-rssWarm)/float64(rssWarm), rssClosed,
		rtStart, rtWarm, rtEnd, rtClosed)
}

// waitGroupWithin waits for wg until ctx ends, and reports whether wg
// finished.
func waitGroupWithin(wg *sync.WaitGroup, ctx context.Context) bool {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-ctx.Done():
		return false
	}
}

func joinLines(lines []string) string {
	out := ""
	for _, l := range lines {
		out += "  " + l + "\n"
	}
	return out
}
