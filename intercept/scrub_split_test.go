package intercept

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/foldproxy/foldproxy/policy"
)

// scrubResult runs result through the Scrub interceptor and returns what
// the agent gets.
func scrubResult(t *testing.T, result string) (json.RawMessage, map[string]int) {
	t.Helper()
	s := testScrubber(t, policy.Scrub{})
	ex := &Exchange{Method: "tools/call"}
	h := Chain(func(ctx context.Context, ex *Exchange) error { ex.Result = json.RawMessage(result); return nil }, Scrub(s))
	if err := h(context.Background(), ex); err != nil {
		t.Fatal(err)
	}
	if !json.Valid(ex.Result) {
		t.Fatalf("not JSON: %s", ex.Result)
	}
	return ex.Result, ex.Redactions
}

// TestScrubSecretSplitAcrossItems: a secret split across the text items
// of one result (which the model reads one after the other) is redacted in
// each part, in tool results, resource contents and prompt messages, also
// with a non-text item between and in three parts.
func TestScrubSecretSplitAcrossItems(t *testing.T) {
	tok := "ghp_" + hiEntropy36
	a, b, c := tok[:14], tok[14:27], tok[27:]
	for _, tc := range []struct{ name, result string }{
		{"content", `{"content":[{"type":"text","text":"the token is ` + a + `"},{"type":"text","text":"` + b + c + ` and more"}]}`},
		{"three parts, an image between", `{"content":[{"type":"text","text":"x ` + a + `"},{"type":"image","data":"aGVsbG8=","mimeType":"image/png"},{"type":"text","text":"` + b + `"},{"type":"text","text":"` + c + `\n"}]}`},
		{"resource contents", `{"contents":[{"uri":"file:///a","text":"` + a + b + `"},{"uri":"file:///b","text":"` + c + `"}]}`},
		{"prompt messages", `{"messages":[{"role":"user","content":{"type":"text","text":"` + a + `"}},{"role":"user","content":{"type":"text","text":"` + b + c + `"}}]}`},
	} {
		out, red := scrubResult(t, tc.result)
		for _, part := range []string{a, b, c} {
			if bytes.Contains(out, []byte(part)) {
				t.Errorf("%s: the part %q of the secret is still there: %s", tc.name, part, out)
			}
		}
		if red["github-pat"] != 1 || !bytes.Contains(out, []byte("[REDACTED:github-pat]")) {
			t.Errorf("%s: redactions %v in %s", tc.name, red, out)
		}
	}
	// Items that hold no secret together are left byte for byte.
	clean := `{"content":[{"type":"text","text":"ghp_"},{"type":"text","text":"is a prefix"}]}`
	if out, _ := scrubResult(t, clean); string(out) != clean {
		t.Errorf("a clean result changed: %s", out)
	}
}

// TestScrubGzipBase64: a secret inside gzip-compressed, base64-encoded
// text (a Helm release, a compressed config) is found, and the encoded
// run is redacted whole; compressed text without a secret passes as it is.
func TestScrubGzipBase64(t *testing.T) {
	gz := func(s string) string {
		var buf bytes.Buffer
		w := gzip.NewWriter(&buf)
		w.Write([]byte(s))
		w.Close()
		return base64.StdEncoding.EncodeToString(buf.Bytes())
	}
	s := testScrubber(t, policy.Scrub{})
	enc := gz("config:\n  github_token: ghp_" + hiEntropy36 + "\n")
	got, counts, err := s.ScrubText(context.Background(), "release data: "+enc+" end")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(got, enc) || counts["github-pat"] != 1 || got != "release data: [REDACTED:github-pat] end" {
		t.Errorf("gzip+base64 secret: %q %v", got, counts)
	}
	// In a JSON result too (base64 escaped as JSON may be: "\/").
	out, red := scrubResult(t, `{"content":[{"type":"text","text":"`+strings.ReplaceAll(enc, "/", `\/`)+`"}]}`)
	if bytes.Contains(out, []byte(enc[:40])) || red["github-pat"] != 1 {
		t.Errorf("gzip+base64 in a result: %s %v", out, red)
	}
	plain := "data: " + gz(strings.Repeat("nothing secret here\n", 50))
	if got, _, err := s.ScrubText(context.Background(), plain); err != nil || got != plain {
		t.Errorf("gzip+base64 without a secret: %q %v", got, err)
	}
	// A bomb: decompressed only up to the bound, and not an error.
	bomb := "x " + gz(strings.Repeat("a", 64<<20))
	if got, _, err := s.ScrubText(context.Background(), bomb); err != nil || got != bomb {
		t.Errorf("a gzip bomb: %v, changed %v", err, got != bomb)
	}
}

// BenchmarkScrubSplitPasses is what the split-secret and gzip passes add
// to a scrub of the trajectory's results (ScrubJSON, its baseline in the
// same run): the item walk of every result, and the search for a gzip
// header in each.
func BenchmarkScrubSplitPasses(b *testing.B) {
	res := pipeResults(b)
	s := testScrubber(b, policy.Scrub{})
	ctx := context.Background()
	b.Run("added", func(b *testing.B) {
		b.SetBytes(pipeBytes(res))
		for b.Loop() {
			for _, r := range res {
				if _, _, err := s.ScrubItemsUntil(ctx, time.Now().Add(time.Hour), r); err != nil {
					b.Fatal(err)
				}
				_ = bytes.Contains(r, []byte("H4sI")) // the gzip header in base64, which secrets looks for
			}
		}
	})
	b.Run("scrubjson", func(b *testing.B) {
		b.SetBytes(pipeBytes(res))
		for b.Loop() {
			for _, r := range res {
				if _, _, err := s.ScrubJSON(ctx, r); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}
