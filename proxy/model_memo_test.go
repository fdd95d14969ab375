package proxy

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestScrubMemo(t *testing.T) {
	calls := map[string]int{}
	fail := true
	m := newScrubMemo(func(_ context.Context, text string) (string, error) {
		calls[text]++
		if text == "flaky" && fail {
			return "", errors.New("scan timed out")
		}
		return strings.ReplaceAll(text, "SECRET", "[REDACTED:x]"), nil
	}, 4, 1<<20)
	ctx := context.Background()
	for range 3 {
		for text, want := range map[string]string{"clean text": "clean text", "a SECRET b": "a [REDACTED:x] b"} {
			got, err := m.Scrub(ctx, text)
			if err != nil || got != want {
				t.Fatalf("Scrub(%q) = %q, %v; want %q", text, got, err, want)
			}
		}
	}
	if calls["clean text"] != 1 || calls["a SECRET b"] != 1 {
		t.Errorf("the scrubber ran %v times, want once per text", calls)
	}
	// An error is returned and not remembered.
	if _, err := m.Scrub(ctx, "flaky"); err == nil {
		t.Fatal("Scrub(flaky): no error")
	}
	fail = false
	if got, err := m.Scrub(ctx, "flaky"); err != nil || got != "flaky" || calls["flaky"] != 2 {
		t.Errorf("after a failed scan: %q, %v, %d scans; want a new scan", got, err, calls["flaky"])
	}
	// Bounded: at most two generations of maxEntries.
	for i := range 100 {
		if _, err := m.Scrub(ctx, fmt.Sprintf("text %d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(m.cur) + len(m.old); n > 8 {
		t.Errorf("the memo holds %d texts, want at most 8", n)
	}
	// Nothing of a raw secret is kept: only hashes and scrubbed texts.
	for _, gen := range []map[[32]byte]memoEntry{m.cur, m.old} {
		for _, e := range gen {
			if strings.Contains(e.scrubbed, "SECRET") {
				t.Errorf("the memo holds a raw secret: %q", e.scrubbed)
			}
		}
	}
}
