package intercept

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/foldproxy/foldproxy/intercept/secrets"
	"github.com/foldproxy/foldproxy/intercept/tokens"
	"github.com/foldproxy/foldproxy/policy"
)

// The interceptors' tests build the engines of intercept/secrets and
// intercept/tokens as those packages' own tests do; these helpers are the
// same as theirs.

var scrubbers sync.Map

// testScrubber returns a scrubber with the settings p, built once per p.
// A zero Timeout becomes an hour: the default 10 s withholds a result whose
// scan takes longer, which under the race detector on a loaded machine a
// long text's can. Tests of that bound set it and drive time (synctest).
func testScrubber(tb testing.TB, p policy.Scrub) *secrets.Scrubber {
	tb.Helper()
	if p.Timeout == 0 {
		p.Timeout = policy.Duration(time.Hour)
	}
	key := fmt.Sprintf("%+v", p)
	if s, ok := scrubbers.Load(key); ok {
		return s.(*secrets.Scrubber)
	}
	s, err := secrets.NewScrubber(p, nil)
	if err != nil {
		tb.Fatalf("NewScrubber(%+v): %v", p, err)
	}
	scrubbers.Store(key, s)
	return s
}

// hiEntropy36 completes a GitHub token prefix ("ghp_") into a token
// gitleaks reports.
const hiEntropy36 = "A1b2C3d4E5f6G7h8J9k0L1m2N3p4Q5r6S7t8"

func newCounter(tb testing.TB, enc string) *tokens.Counter {
	tb.Helper()
	c, err := tokens.NewCounter(policy.Tokens{Encoding: enc, ImageTokens: 1600, AudioTokens: 800})
	if err != nil {
		tb.Fatalf("NewCounter(%q): %v", enc, err)
	}
	return c
}

// trajectoryOutputs returns the non-empty step outputs of the trajectory
// file the repository holds under e2e/testdata.
func trajectoryOutputs(tb testing.TB) []string {
	tb.Helper()
	f, err := os.Open(pipeTrajectories)
	if err != nil {
		tb.Fatalf("trajectory data (held under e2e/testdata): %v", err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		tb.Fatalf("gunzip trajectories: %v", err)
	}
	sc := bufio.NewScanner(zr)
	sc.Buffer(nil, 64<<20)
	var outs []string
	for sc.Scan() {
		var rec struct {
			Steps []struct {
				Output string `json:"output"`
			} `json:"steps"`
		}
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			tb.Fatalf("trajectory line: %v", err)
		}
		for _, s := range rec.Steps {
			if s.Output != "" {
				outs = append(outs, s.Output)
			}
		}
	}
	if err := sc.Err(); err != nil {
		tb.Fatalf("read trajectories: %v", err)
	}
	return outs
}

// bigText returns at least n bytes of real tool output.
func bigText(tb testing.TB, n int) string {
	tb.Helper()
	outs := trajectoryOutputs(tb)
	var b strings.Builder
	for b.Len() < n {
		for _, o := range outs {
			b.WriteString(o)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// textResult returns a tools/call result with one text block, encoded
// without HTML escaping, as the TypeScript and Python SDKs send it.
func textResult(tb testing.TB, text string) json.RawMessage {
	tb.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	err := enc.Encode(map[string]any{
		"content": []any{map[string]any{"type": "text", "text": text, "annotations": map[string]any{"audience": []string{"assistant"}}}},
		"_meta":   map[string]any{"k": "v"},
	})
	if err != nil {
		tb.Fatal(err)
	}
	return bytes.TrimSpace(buf.Bytes())
}

// cpuTime returns the CPU time the process has used, user and system.
func cpuTime(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU reports the CPU time a benchmark used since start, per op and
// as bytes per CPU second ("cpuMB/s"). It includes the garbage collector's.
func reportCPU(b *testing.B, start time.Duration, bytes int) {
	d := cpuTime(b) - start
	b.ReportMetric(float64(d.Nanoseconds())/float64(b.N), "cpu-ns/op")
	if d > 0 {
		b.ReportMetric(float64(bytes)*float64(b.N)/d.Seconds()/1e6, "cpuMB/s")
	}
}

// sum is the number of secrets in counts.
func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
