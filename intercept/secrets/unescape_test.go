package secrets

import (
	"encoding/json"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf16"
	"unicode/utf8"
)

// unescapeViewRef is unescapeView as first written, with a strings.Builder,
// kept as the reference the word-at-a-time one is tested against. It decodes one level of JSON string escapes in v.text. It
// reports false when v.text holds no escape sequence.
func unescapeViewRef(v *view) (*view, bool) {
	s := v.text
	i := strings.IndexByte(s, '\\')
	if i < 0 {
		return nil, false
	}
	var b strings.Builder
	b.Grow(len(s))
	// One record per escape: sized once (JSON text holds many \n).
	recs := make([]escRec, 0, strings.Count(s[i:], `\`))
	last := 0
	for i >= 0 {
		i += last
		b.WriteString(s[last:i])
		n, ok := escapeAtRef(s, i, &b, &recs)
		if !ok {
			b.WriteByte('\\')
			last = i + 1
		} else {
			last = i + n
		}
		if last >= len(s) {
			break
		}
		i = strings.IndexByte(s[last:], '\\')
	}
	if last < len(s) {
		b.WriteString(s[last:])
	}
	if len(recs) == 0 {
		return nil, false
	}
	return &view{text: b.String(), parent: v, esc: recs}, true
}

// escapeAt decodes the escape sequence at s[i] (a backslash) into b and
// returns its length in s, or false when it is not a JSON escape.
func escapeAtRef(s string, i int, b *strings.Builder, recs *[]escRec) (int, bool) {
	if i+1 >= len(s) {
		return 0, false
	}
	dst := b.Len()
	var c byte
	switch s[i+1] {
	case '"', '\\', '/':
		c = s[i+1]
	case 'b':
		c = '\b'
	case 'f':
		c = '\f'
	case 'n':
		c = '\n'
	case 'r':
		c = '\r'
	case 't':
		c = '\t'
	case 'u':
		r, ok := hex4Ref(s, i+2)
		if !ok {
			return 0, false
		}
		n := 6
		if utf16.IsSurrogate(r) {
			if r2, ok := hex4Ref(s, i+8); ok && i+7 < len(s) && s[i+6] == '\\' && s[i+7] == 'u' {
				if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
					r, n = d, 12
				}
			}
			if n == 6 {
				r = utf8.RuneError
			}
		}
		b.WriteRune(r)
		*recs = append(*recs, newEsc(dst, b.Len()-dst, i, n))
		return n, true
	default:
		return 0, false
	}
	b.WriteByte(c)
	*recs = append(*recs, newEsc(dst, 1, i, 2))
	return 2, true
}

// TestUnescapeViewMatchesRef checks unescapeView, with and without the
// newlines, against the reference on random texts dense in escapes, good
// and bad (surrogates, short \u, a backslash at the end), at every
// alignment, and on the trajectory data.
func TestUnescapeViewMatchesRef(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	parts := []string{"a", "\n", "x\ny", "\\u000a", "\\u000A\\n", "bc", "defghijk", "é", "\\", "\\\\", "\\n", "\\\"", "\\/", "\\t\\r\\b\\f", "\\u0041", "\\u00e9", "\\ud83d\\ude00", "\\ud83d", "\\ud83d\\u0041", "\\udc00x", "\\u12", "\\uZZZZ", "\\x", "\n", "{\"k\":\"v\"}"}
	check := func(text string) {
		t.Helper()
		got, gok := unescapeView(&view{text: text}, true)
		want, wok := unescapeViewRef(&view{text: text})
		if gok != wok {
			t.Fatalf("unescapeView(%q): ok %v, the reference %v", text, gok, wok)
		}
		if !gok {
			return
		}
		if got.text != want.text || !slices.Equal(got.esc, want.esc) {
			t.Fatalf("unescapeView(%q) = %q %v, the reference %q %v", text, got.text, got.esc, want.text, want.esc)
		}
		if nls := newlines(got.text, nil); !slices.Equal(got.nls, nls) && len(got.nls)+len(nls) > 0 {
			t.Fatalf("unescapeView(%q): newlines %v, want %v", text, got.nls, nls)
		}
		// A deeper view, without its newlines, decodes the same.
		deep, dok := unescapeView(&view{text: text}, false)
		if !dok || deep.text != want.text || !slices.Equal(deep.esc, want.esc) || deep.nls != nil {
			t.Fatalf("unescapeView(%q) without newlines = %q %v %v, the reference %q %v", text, deep.text, deep.esc, deep.nls, want.text, want.esc)
		}
	}
	for range 20000 {
		var b strings.Builder
		for range rng.IntN(40) {
			b.WriteString(parts[rng.IntN(len(parts))])
		}
		check(b.String())
	}
	for _, r := range pipeResults(t) {
		check(string(r))
		if v, ok := unescapeView(&view{text: string(r)}, true); ok {
			check(v.text)
		}
	}
}

// pipeResults returns every step output of the trajectories as a tools/call
// result, as intercept's pipeline benchmarks make them.
func pipeResults(tb testing.TB) []json.RawMessage {
	tb.Helper()
	outs := loadOutputs(tb)
	res := make([]json.RawMessage, len(outs))
	for i, o := range outs {
		b, err := json.Marshal(map[string]any{"content": []map[string]string{{"type": "text", "text": o}}})
		if err != nil {
			tb.Fatal(err)
		}
		res[i] = b
	}
	return res
}

// hex4Ref decodes the four hex digits at s[i], for the reference decoder:
// written apart from jsonscan's, which the view decodes with.
func hex4Ref(s string, i int) (rune, bool) {
	if i+4 > len(s) {
		return 0, false
	}
	r, err := strconv.ParseUint(s[i:i+4], 16, 32)
	if err != nil || strings.ContainsAny(s[i:i+4], "+-_xX") {
		return 0, false
	}
	return rune(r), true
}
