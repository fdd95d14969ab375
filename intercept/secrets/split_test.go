package secrets

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/foldproxy/foldproxy/policy"
)

// FuzzScrubItems: any valid JSON result comes out of the item pass valid,
// without a panic, and unchanged when it reports nothing.
func FuzzScrubItems(f *testing.F) {
	tok := "ghp_" + hiEntropy36
	f.Add([]byte(`{"content":[{"type":"text","text":"` + tok[:10] + `"},{"type":"text","text":"` + tok[10:] + `"}]}`))
	f.Add([]byte(`{"contents":[{"text":"a"},{"text":"\u0067hp_"},{"text":1}],"messages":[{"content":{"text":"x"}}]}`))
	f.Add([]byte(`{"messages":[{"content":[{"text":"a"}]},{"content":{"text" : "b"}}],"text":"c"}`))
	f.Add([]byte(`[{"text":"a"},{"text":"b"}]`))
	s := testScrubber(f, policy.Scrub{})
	f.Fuzz(func(t *testing.T, raw []byte) {
		if !json.Valid(raw) {
			return
		}
		out, counts, err := s.ScrubItemsUntil(context.Background(), time.Now().Add(time.Hour), raw)
		if err != nil {
			return
		}
		if !json.Valid(out) {
			t.Fatalf("invalid JSON out of %s: %s", raw, out)
		}
		if len(counts) == 0 && !bytes.Equal(out, raw) {
			t.Fatalf("changed without a finding: %s -> %s", raw, out)
		}
	})
}
