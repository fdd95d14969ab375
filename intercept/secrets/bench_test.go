package secrets

import (
	"bufio"
	"compress/gzip"
	"context"
	"encoding/json"
	"math/rand/v2"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/foldproxy/foldproxy/policy"
)

// trajectoryPath holds real coding-agent tool output (see its README).
const trajectoryPath = "../../e2e/testdata/trajectories/swe-dev.jsonl.gz"

// loadOutputs returns the output of every step of the replay trajectories,
// skipping the test when the file is absent.
func loadOutputs(tb testing.TB) []string {
	tb.Helper()
	f, err := os.Open(trajectoryPath)
	if err != nil {
		tb.Fatalf("trajectory data (held under e2e/testdata): %v", err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		tb.Fatalf("%s: %v", trajectoryPath, err)
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
			tb.Fatalf("%s: %v", trajectoryPath, err)
		}
		for _, s := range rec.Steps {
			outs = append(outs, s.Output)
		}
	}
	if err := sc.Err(); err != nil {
		tb.Fatalf("%s: %v", trajectoryPath, err)
	}
	return outs
}

// toolResults wraps each output as an MCP tools/call result.
func toolResults(tb testing.TB, outs []string) []json.RawMessage {
	tb.Helper()
	res := make([]json.RawMessage, len(outs))
	for i, o := range outs {
		b, err := json.Marshal(map[string]any{
			"content": []map[string]string{{"type": "text", "text": o}},
			"isError": false,
		})
		if err != nil {
			tb.Fatal(err)
		}
		res[i] = b
	}
	return res
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
// as bytes per CPU second ("cpuMB/s"): on a loaded machine, where wall
// time depends on the other processes, the CPU time of the work itself
// does not (much). It includes the garbage collector's.
func reportCPU(b *testing.B, start time.Duration, bytes int) {
	d := cpuTime(b) - start
	b.ReportMetric(float64(d.Nanoseconds())/float64(b.N), "cpu-ns/op")
	if d > 0 {
		b.ReportMetric(float64(bytes)*float64(b.N)/d.Seconds()/1e6, "cpuMB/s")
	}
}

// The benchmarks report throughput over the real trajectory outputs. Run
// them with -cpu 1 and -cpu 2: calls run in parallel (RunParallel, one
// goroutine per GOMAXPROCS), as concurrent tool results do in the proxy.
//
//	go test ./intercept/secrets -run '^$' -bench Scrub -cpu 1,2 [-tags gore2regex]

func BenchmarkScrubText(b *testing.B) {
	outs := loadOutputs(b)
	s := testScrubber(b, policy.Scrub{})
	n := 0
	for _, o := range outs {
		n += len(o)
	}
	b.SetBytes(int64(n))
	b.ResetTimer()
	cpu0 := cpuTime(b)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			for _, o := range outs {
				if _, _, err := s.ScrubText(context.Background(), o); err != nil {
					b.Error(err)
					return
				}
			}
		}
	})
	reportCPU(b, cpu0, n)
}

func BenchmarkScrubJSON(b *testing.B) {
	res := toolResults(b, loadOutputs(b))
	s := testScrubber(b, policy.Scrub{})
	n := 0
	for _, r := range res {
		n += len(r)
	}
	b.SetBytes(int64(n))
	b.ResetTimer()
	cpu0 := cpuTime(b)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			for _, r := range res {
				if _, _, err := s.ScrubJSON(context.Background(), r); err != nil {
					b.Error(err)
					return
				}
			}
		}
	})
	reportCPU(b, cpu0, n)
}

// BenchmarkScrubTextLarge scans all outputs as one 2 MB text: one call,
// chunked, its chunks spread over GOMAXPROCS workers.
func BenchmarkScrubTextLarge(b *testing.B) {
	text := strings.Join(loadOutputs(b), "\n")
	s := testScrubber(b, policy.Scrub{})
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		if _, _, err := s.ScrubText(context.Background(), text); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkScrubTextNoKeyword measures the fast path: text in which no
// rule keyword occurs.
func BenchmarkScrubTextNoKeyword(b *testing.B) {
	text := strings.Repeat("lorem ipsum dolor amet, consectetur adipiscing elit; 0123456789\n", 1024)
	s := testScrubber(b, policy.Scrub{})
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		if _, _, err := s.ScrubText(context.Background(), text); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkScrubSpaceFree scrubs 2 MiB of text without spaces (random
// base64, in which keywords such as "ey" and "key" occur by chance) and
// 2 MiB of a repeated line, against 2 MiB of real tool output in the same
// run: the ratios of ns/op are the slowdown of those cases.
func BenchmarkScrubSpaceFree(b *testing.B) {
	const n = 2 << 20
	prose := strings.Join(loadOutputs(b), "\n")
	for len(prose) < n {
		prose += prose
	}
	rng := rand.New(rand.NewPCG(2, 2))
	const b64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
	free := make([]byte, n)
	for i := range free {
		free[i] = b64[rng.IntN(len(b64))]
	}
	cases := map[string]string{
		"prose":      prose[:n],
		"space-free": string(free),
		"repetitive": strings.Repeat("api_key = value\n", n/16),
	}
	s := testScrubber(b, policy.Scrub{})
	for _, name := range []string{"prose", "space-free", "repetitive"} {
		b.Run(name, func(b *testing.B) {
			text := cases[name]
			b.SetBytes(int64(len(text)))
			for b.Loop() {
				if _, _, err := s.ScrubText(context.Background(), text); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkScrubJSONTiny scrubs one small tool result (a directory
// listing, 150 bytes) in which no rule keyword occurs: the fixed cost of
// a call.
func BenchmarkScrubJSONTiny(b *testing.B) {
	s := testScrubber(b, policy.Scrub{})
	raw := json.RawMessage(`{"content":[{"type":"text","text":"total 4\ndrwxr-xr-x 2 root root 4096 Nov 24 04:13 .\n-rw-r--r-- 1 root root 934 Nov 24 04:13 README.md"}],"isError":false}`)
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime(b)
	for b.Loop() {
		if _, _, err := s.ScrubJSON(context.Background(), raw); err != nil {
			b.Fatal(err)
		}
	}
	reportCPU(b, cpu0, len(raw))
}
