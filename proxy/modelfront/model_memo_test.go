package modelfront

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
	if n := len(m.gen.cur) + len(m.gen.old); n > 8 {
		t.Errorf("the memo holds %d texts, want at most 8", n)
	}
	// Nothing of a raw secret is kept: only hashes and scrubbed texts.
	for _, gen := range []map[[32]byte]memoEntry{m.gen.cur, m.gen.old} {
		for _, e := range gen {
			if strings.Contains(e.scrubbed, "SECRET") {
				t.Errorf("the memo holds a raw secret: %q", e.scrubbed)
			}
		}
	}
}

func TestCountMemo(t *testing.T) {
	calls := map[string]int{}
	count := func(text string) int { calls[text]++; return len(strings.Fields(text)) }
	m := newCountMemo(count, 4)
	long := strings.Repeat("word ", countMemoMin/5+1)
	other := strings.Repeat("other word ", countMemoMin/11+1)
	short := "a short text"
	for range 3 {
		for text, want := range map[string]int{long: countMemoMin/5 + 1, other: 2 * (countMemoMin/11 + 1), short: 3} {
			if got := m.Count(text); got != want {
				t.Fatalf("Count(%.20q...) = %d, want %d", text, got, want)
			}
		}
	}
	// Long texts are counted once; short ones every time (not kept).
	if calls[long] != 1 || calls[other] != 1 || calls[short] != 3 {
		t.Errorf("counts made: %d, %d, %d; want 1, 1, 3", calls[long], calls[other], calls[short])
	}
	// Bounded: at most two generations of maxEntries.
	for i := range 100 {
		m.Count(fmt.Sprintf("%d %s", i, long))
	}
	if n := len(m.gen.cur) + len(m.gen.old); n > 8 {
		t.Errorf("the memo holds %d counts, want at most 8", n)
	}
	// An entry of the old generation is still found, and moves forward.
	m.Count(long)
	if calls[long] != 2 {
		t.Fatalf("long was evicted by 100 others, yet counted %d times", calls[long])
	}
	m.Count(fmt.Sprintf("%d %s", 200, long))
	m.Count(fmt.Sprintf("%d %s", 201, long))
	m.Count(long)
	if calls[long] != 2 {
		t.Errorf("a text of the current generation was counted again (%d counts)", calls[long])
	}
}

// The across memo asks the scrubber once for a run of parts it found
// clean, every time for one it changed, and never mistakes one run for
// another made of the same bytes cut elsewhere.
func TestAcrossMemo(t *testing.T) {
	calls := 0
	m := newAcrossMemo(func(_ context.Context, texts []string) ([]string, error) {
		calls++
		out := append([]string(nil), texts...)
		if len(out) == 2 && out[0] == "AKIA" {
			out[0], out[1] = "[R]", "[R]"
		}
		return out, nil
	}, 16)
	ctx := context.Background()
	for range 3 {
		if out, err := m.ScrubAcross(ctx, []string{"ab", "cd"}); err != nil || out[0] != "ab" {
			t.Fatal(out, err)
		}
	}
	if calls != 1 {
		t.Fatalf("a clean run was scanned %d times", calls)
	}
	if _, err := m.ScrubAcross(ctx, []string{"abc", "d"}); err != nil || calls != 2 {
		t.Fatalf("another cut of the same bytes was taken from the memo (calls %d)", calls)
	}
	for range 2 {
		if out, _ := m.ScrubAcross(ctx, []string{"AKIA", "IOSF"}); out[0] != "[R]" {
			t.Fatalf("a changed run came back %v", out)
		}
	}
	if calls != 4 {
		t.Fatalf("calls %d, want a changed run scanned each time", calls)
	}
}
