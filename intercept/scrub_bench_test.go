package intercept

import (
	"bufio"
	"compress/gzip"
	"context"
	"encoding/json"
	"os"
	"testing"

	"github.com/foldproxy/foldproxy/policy"
)

// trajectoryPath holds real coding-agent tool output (see its README).
const trajectoryPath = "/work/shared/data/trajectories/swe-dev.jsonl.gz"

// loadOutputs returns the output of every step of the replay trajectories,
// skipping the test when the file is absent.
func loadOutputs(tb testing.TB) []string {
	tb.Helper()
	f, err := os.Open(trajectoryPath)
	if err != nil {
		tb.Skipf("trajectory data not available: %v", err)
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

func BenchmarkScrubText(b *testing.B) {
	outs := loadOutputs(b)
	s, err := NewScrubber(policy.Scrub{}, nil)
	if err != nil {
		b.Fatal(err)
	}
	n := 0
	for _, o := range outs {
		n += len(o)
	}
	ctx := context.Background()
	b.SetBytes(int64(n))
	b.ResetTimer()
	for b.Loop() {
		for _, o := range outs {
			if _, _, err := s.ScrubText(ctx, o); err != nil {
				b.Fatal(err)
			}
		}
	}
}

func BenchmarkScrubJSON(b *testing.B) {
	res := toolResults(b, loadOutputs(b))
	s, err := NewScrubber(policy.Scrub{}, nil)
	if err != nil {
		b.Fatal(err)
	}
	n := 0
	for _, r := range res {
		n += len(r)
	}
	ctx := context.Background()
	b.SetBytes(int64(n))
	b.ResetTimer()
	for b.Loop() {
		for _, r := range res {
			if _, _, err := s.ScrubJSON(ctx, r); err != nil {
				b.Fatal(err)
			}
		}
	}
}
