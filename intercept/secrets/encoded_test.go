package secrets

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// encodedWindowsByByte is encodedWindows as it was first written, a byte
// at a time, kept as the reference the fast one is tested against.
//
// It returns windows around segments of text that gitleaks'
// decoder would decode to printable text: base64 and hex runs, percent
// escapes and unicode escapes. It is a cheap prefilter; the decoding that
// counts is gitleaks'.
//
// Only segments that start in text[lo:hi] are reported (a segment running
// into lo belongs to the piece before); their windows reach outside.
func encodedWindowsByByte(text string, nls []int, lo, hi int) [][2]int {
	const ctxBytes = 256
	var wins [][2]int
	add := func(a, b int) {
		a, b = max(a-ctxBytes, 0), min(b+ctxBytes, len(text))
		if n := len(wins); n > 0 && a <= wins[n-1][1] {
			wins[n-1][1] = max(wins[n-1][1], b)
			return
		}
		wins = append(wins, [2]int{a, b})
	}
	i := lo
	for i > 0 && i < len(text) && isB64Byte(text[i-1]) && isB64Byte(text[i]) {
		i++
	}
	for i < hi {
		c := text[i]
		switch {
		case encClass[c]&encB64 != 0:
			j := i
			var seen uint8
			for j < len(text) && encClass[text[j]]&encB64 != 0 {
				seen |= encClass[text[j]]
				j++
			}
			likely := seen&encLikely != 0
			end := j
			for k := 0; k < 2 && end < len(text) && text[end] == '='; k++ {
				end++
			}
			if j-i >= 16 && likely && decodesPrintable(text[i:end]) {
				add(i, end)
			}
			i = max(end, i+1)
		case c == '%' && i+2 < len(text) && isHex(text[i+1]) && isHex(text[i+2]):
			li, _ := slices.BinarySearch(nls, i)
			add(lineStart(nls, li), lineEnd(nls, li, len(text)))
			i += 3
		case (c == '\\' && i+5 < len(text) && (text[i+1] == 'u' || text[i+1] == 'U') && isHex(text[i+2]) && isHex(text[i+5])) ||
			(c == 'U' && i+5 < len(text) && text[i+1] == '+' && isHex(text[i+2]) && isHex(text[i+5])):
			add(i, i+6)
			i += 6
		default:
			i++
		}
	}
	return wins
}

// TestEncodedWindowsMatchesByByte checks encodedWindows against the walk
// a byte at a time on random texts rich in base64 runs of every length,
// padding, percent and unicode escapes (some malformed), and on real
// tool output, over random pieces.
func TestEncodedWindowsMatchesByByte(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	alpha := []string{"a", "Z", "0", "9", "f", "_", "-", "+", "/", "=", "==", " ", "\n", "%", "%4", "%41", "\\", "\\u", "\\u00e9", "\\U0%%0", "u", "U+", ".", "\"", "QUJDREVGR0hJSktMTU5PUA", "aGVsbG8gd29ybGQgaGVsbG8"}
	check := func(text string, lo, hi int) {
		t.Helper()
		nls := newlines(text, nil)
		got, want := encodedWindows(text, nls, lo, hi), encodedWindowsByByte(text, nls, lo, hi)
		if !slices.Equal(got, want) {
			t.Fatalf("encodedWindows(%q, %d, %d) = %v, want %v", text, lo, hi, got, want)
		}
	}
	for range 20000 {
		var b strings.Builder
		for range rng.IntN(60) {
			w := alpha[rng.IntN(len(alpha))]
			if rng.IntN(4) == 0 {
				w = strings.Repeat(w, 1+rng.IntN(20))
			}
			b.WriteString(w)
		}
		text := b.String()
		lo, hi := rng.IntN(len(text)+1), rng.IntN(len(text)+1)
		if lo > hi {
			lo, hi = hi, lo
		}
		check(text, 0, len(text))
		check(text, lo, hi)
	}
	for _, out := range loadOutputs(t) {
		check(out, 0, len(out))
		if len(out) > 10 {
			check(out, len(out)/3, 2*len(out)/3)
		}
	}
}
