package secrets

import (
	"encoding/base64"
	"encoding/hex"
	"math/rand/v2"
	"regexp/syntax"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/foldproxy/foldproxy/policy"
)

// sampleMatch writes to b a random string that re matches (mostly: empty
// width assertions are ignored, so callers check the sample with the real
// regex). Repetitions are drawn from their minimum up to a few more, and
// characters from the whole class, non-ASCII ranges included.
func sampleMatch(rng *rand.Rand, re *syntax.Regexp, b *strings.Builder) {
	switch re.Op {
	case syntax.OpLiteral:
		for _, r := range re.Rune {
			if re.Flags&syntax.FoldCase != 0 && rng.IntN(2) == 0 {
				r = foldOnce(r)
			}
			b.WriteRune(r)
		}
	case syntax.OpCharClass:
		if len(re.Rune) == 0 {
			return
		}
		i := 2 * rng.IntN(len(re.Rune)/2)
		lo, hi := re.Rune[i], re.Rune[i+1]
		if hi-lo > 1000 {
			hi = lo + 1000
		}
		r := lo + rng.Int32N(hi-lo+1)
		if !utf8.ValidRune(r) {
			r = lo
		}
		b.WriteRune(r)
	case syntax.OpAnyCharNotNL, syntax.OpAnyChar:
		const any = "aZ9_-. \t=:\"'"
		b.WriteByte(any[rng.IntN(len(any))])
	case syntax.OpCapture:
		sampleMatch(rng, re.Sub[0], b)
	case syntax.OpStar, syntax.OpPlus, syntax.OpQuest, syntax.OpRepeat:
		lo, hi := 0, 3
		switch re.Op {
		case syntax.OpPlus:
			lo, hi = 1, 4
		case syntax.OpQuest:
			hi = 1
		case syntax.OpRepeat:
			lo, hi = re.Min, re.Max
			if hi < 0 {
				hi = lo + 3
			}
		}
		n := lo + rng.IntN(hi-lo+1)
		if rng.IntN(3) == 0 {
			n = lo // the shortest matches are the ones a filter must not miss
		}
		for range n {
			sampleMatch(rng, re.Sub[0], b)
		}
	case syntax.OpConcat:
		for _, s := range re.Sub {
			sampleMatch(rng, s, b)
		}
	case syntax.OpAlternate:
		sampleMatch(rng, re.Sub[rng.IntN(len(re.Sub))], b)
	}
}

// foldOnce returns r's other case, for ASCII letters.
func foldOnce(r rune) rune {
	switch {
	case 'a' <= r && r <= 'z':
		return r - 'a' + 'A'
	case 'A' <= r && r <= 'Z':
		return r - 'A' + 'a'
	}
	return r
}

// TestRunFilterNeverRejectsAMatch draws strings each rule's regex matches
// (checked with the rule's own compiled regex, as gitleaks runs it) and
// checks that the rule's filter passes them, alone and inside other text:
// a window the filter rejects cannot hold a match, so skipping gitleaks
// there changes nothing.
func TestRunFilterNeverRejectsAMatch(t *testing.T) {
	s := testScrubber(t, policy.Scrub{})
	cfg, err := loadGitleaksConfig("")
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(13, 13))
	filtered, matched := 0, 0
	for _, rs := range s.eng.rules {
		if rs.filter == nil {
			continue
		}
		filtered++
		r := cfg.Rules[rs.id]
		re, err := syntax.Parse(r.Regex.String(), syntax.Perl)
		if err != nil {
			t.Fatalf("%s: %v", rs.id, err)
		}
		got := 0
		for range 100 {
			var b strings.Builder
			sampleMatch(rng, re, &b)
			sample := b.String()
			for _, text := range []string{sample, sample + "\n", "x = " + sample + " ;\n", "\t" + sample} {
				if !r.Regex.MatchString(text) {
					continue
				}
				got++
				if !rs.filter.pass(text) {
					t.Errorf("%s: the filter rejects %q, which the rule's regex matches", rs.id, text)
				}
			}
		}
		if got == 0 {
			t.Errorf("%s: no sample matched the rule's regex: the rule is untested", rs.id)
		}
		matched += got
	}
	if filtered < len(s.eng.rules)/2 {
		t.Errorf("only %d of %d rules have a filter", filtered, len(s.eng.rules))
	}
	t.Logf("%d rules with a filter, %d matching samples passed", filtered, matched)
}

// TestRunFilterCases checks the filter derived from a few regexes.
func TestRunFilterCases(t *testing.T) {
	for _, c := range []struct {
		re         string
		pass, fail []string
	}{
		{`SK[0-9a-fA-F]{32}`, []string{"SK0123456789abcdef0123456789ABCDEF"}, []string{"SK0123456789abcdef0123456789ABCDE", "task " + strings.Repeat("z", 40)}},
		// The newline detectWindow adds to a window counts.
		{`a[\s0-9]{9}`, []string{"a12345678"}, []string{"a1234567"}},
		// Either branch.
		{`(?:hvs\.[\w-]{90,120}|s\.(?i:[a-z0-9]{24}))`, []string{"s." + strings.Repeat("Ab", 12), "hvs." + strings.Repeat("-", 90)}, []string{"s." + strings.Repeat("Ab", 11) + " ", "hvs." + strings.Repeat("-", 89) + " "}},
		// Non-ASCII letters that fold to ASCII ones (the Kelvin sign).
		{`(?i)k[a-z]{9}`, []string{"\u212aabcdefghi"}, []string{"kabcdefgh "}},
	} {
		re, err := syntax.Parse(c.re, syntax.Perl)
		if err != nil {
			t.Fatal(err)
		}
		f := newRunFilter(re)
		if f == nil {
			t.Errorf("%s: no filter", c.re)
			continue
		}
		for _, s := range c.pass {
			if !f.pass(s) {
				t.Errorf("%s: rejects %q", c.re, s)
			}
		}
		for _, s := range c.fail {
			if f.pass(s) {
				t.Errorf("%s: passes %q", c.re, s)
			}
		}
	}
	for _, re := range []string{`a+`, `[\w.-]{0,50}`, `(?:ab|c*)x`} {
		p, err := syntax.Parse(re, syntax.Perl)
		if err != nil {
			t.Fatal(err)
		}
		if f := newRunFilter(p); f != nil {
			t.Errorf("%s: a filter of %v, want none (too short to pay)", re, f.alts)
		}
	}
}

// decodesPrintableRef is decodesPrintable without the shortcuts: it tries
// every decoding.
func decodesPrintableRef(s string) bool {
	if isHexString(strings.TrimRight(s, "=")) && len(s) >= 32 {
		if b, err := hex.DecodeString(s); err == nil && printableASCII(b) {
			return true
		}
	}
	if b, err := base64.StdEncoding.DecodeString(s); err == nil && printableASCII(b) {
		return true
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	return err == nil && printableASCII(b)
}

// TestDecodesPrintableShortcuts checks that the shortcuts of
// decodesPrintable (the alphabet and length tests) change none of its
// answers: on random runs of base64 bytes, and on encodings of text.
func TestDecodesPrintableShortcuts(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	const alpha = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/-_"
	var cases []string
	for i := range 20000 {
		n := 1 + rng.IntN(40)
		if i%50 == 0 {
			n = 500 + rng.IntN(300) // past decodesPrintable's buffer
		}
		b := make([]byte, n)
		for i := range b {
			b[i] = alpha[rng.IntN(len(alpha))]
		}
		text := make([]byte, rng.IntN(30))
		if i%50 == 1 {
			text = make([]byte, 350+rng.IntN(200))
		}
		for i := range text {
			text[i] = byte(0x20 + rng.IntN(0x60))
		}
		cases = append(cases, string(b), string(b)+"=", string(b)+"==",
			base64.StdEncoding.EncodeToString(text), base64.RawStdEncoding.EncodeToString(text),
			base64.URLEncoding.EncodeToString(text), base64.RawURLEncoding.EncodeToString(text),
			hex.EncodeToString(text))
	}
	yes := 0
	for _, c := range cases {
		want := decodesPrintableRef(c)
		if got := decodesPrintable(c); got != want {
			t.Fatalf("decodesPrintable(%q) = %v, want %v", c, got, want)
		}
		if want {
			yes++
		}
	}
	if yes < len(cases)/10 {
		t.Fatalf("only %d of %d cases decode: the test is weak", yes, len(cases))
	}
}

// passRef is runFilter.pass as first written, a byte at a time: the
// reference the skipping one is tested against.
func passRef(f *runFilter, s string) bool {
	nl := !endsInNewline(s)
	for _, a := range f.alts {
		run := 0
		for i := 0; i < len(s); i++ {
			if a.class[s[i]] {
				run++
				if run >= a.n {
					return true
				}
			} else {
				run = 0
			}
		}
		if nl && a.class['\n'] && run+1 >= a.n {
			return true
		}
	}
	return false
}

// TestRunFilterSkipExact: pass, which tests one byte in n away from runs,
// answers as the byte-at-a-time reference on random texts of bytes in and
// out of the classes, runs of every length around n at every place
// included, and on texts ending in a run, with and without a newline.
func TestRunFilterSkipExact(t *testing.T) {
	var digits, hexNL [256]bool
	for c := '0'; c <= '9'; c++ {
		digits[c], hexNL[c] = true, true
	}
	for c := 'a'; c <= 'f'; c++ {
		hexNL[c] = true
	}
	hexNL['\n'] = true
	filters := []*runFilter{
		{alts: []runReq{{class: &digits, n: 8}}},
		{alts: []runReq{{class: &hexNL, n: 9}}},
		{alts: []runReq{{class: &digits, n: 12}, {class: &hexNL, n: 8}}},
	}
	r := rand.New(rand.NewPCG(7, 9))
	alpha := "0123456789abcdefxyz \n"
	for range 200000 {
		b := make([]byte, r.IntN(40))
		for i := range b {
			b[i] = alpha[r.IntN(len(alpha))]
		}
		if r.IntN(4) == 0 {
			// A run of digits of a length around the filters' n.
			at, n := r.IntN(len(b)+1), 6+r.IntN(8)
			b = append(b[:at], append([]byte(strings.Repeat("7", n)), b[at:]...)...)
		}
		s := string(b)
		for i, f := range filters {
			if got, want := f.pass(s), passRef(f, s); got != want {
				t.Fatalf("filter %d, %q: pass %v, byte at a time %v", i, s, got, want)
			}
		}
	}
}
