package secrets

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	ahocorasick "github.com/BobuSumisu/aho-corasick"
	"github.com/zricethezav/gitleaks/v8/report"
)

// TestKwMatcherMatchesTrie checks that kwMatcher reports the occurrences
// gitleaks' trie reports, in the same order, on random patterns and texts
// over a small alphabet (many overlaps and shared suffixes).
func TestKwMatcherMatchesTrie(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 13))
	word := func(n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = "abc.-"[rng.IntN(5)]
		}
		return string(b)
	}
	type hit struct{ end, n, p int }
	for round := range 300 {
		seen := map[string]bool{}
		var pats []string
		for range 1 + rng.IntN(12) {
			p := word(1 + rng.IntN(5))
			if !seen[p] {
				seen[p] = true
				pats = append(pats, p)
			}
		}
		text := []byte(word(rng.IntN(200)) + "xyz" + word(rng.IntN(50)))
		var want, got []hit
		ahocorasick.NewTrieBuilder().AddStrings(pats).Build().Walk(text, func(end, n, p int64) bool {
			want = append(want, hit{int(end), int(n), int(p)})
			return true
		})
		m := newKwMatcher(pats)
		m.walk(string(text), func(end, n, p int) bool {
			got = append(got, hit{end, n, p})
			return true
		})
		check := func(what string, got []hit) {
			t.Helper()
			if len(got) != len(want) {
				t.Fatalf("round %d: %s: patterns %q in %q: %d hits, the trie %d", round, what, pats, text, len(got), len(want))
			}
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("round %d: %s: patterns %q in %q: hit %d is %+v, the trie's %+v", round, what, pats, text, i, got[i], want[i])
				}
			}
		}
		check("exact", got)
		// The folding matcher finds the same in the text with random
		// letters upper-cased, and with upper-case patterns.
		mixed := []byte(string(text))
		upPats := make([]string, len(pats))
		for i, c := range mixed {
			if 'a' <= c && c <= 'z' && rng.IntN(2) == 0 {
				mixed[i] = c - 'a' + 'A'
			}
		}
		for i, p := range pats {
			upPats[i] = strings.ToUpper(p)
		}
		for _, ps := range [][]string{pats, upPats} {
			got = got[:0]
			fm := newKwMatcherFold(ps)
			fm.walk(string(mixed), func(end, n, p int) bool {
				got = append(got, hit{end, n, p})
				return true
			})
			check("fold", got)
			// eachStart finds the same occurrences by their starts, in
			// any piece of the text.
			lo, hi := rng.IntN(len(mixed)+1), rng.IntN(len(mixed)+1)
			if lo > hi {
				lo, hi = hi, lo
			}
			if round%3 == 0 {
				lo, hi = 0, len(mixed)
			}
			var wantStarts, gotStarts []hit
			for _, h := range want {
				if s := h.end - h.n + 1; s >= lo && s < hi {
					wantStarts = append(wantStarts, hit{s, h.n, h.p})
				}
			}
			slices.SortFunc(wantStarts, func(a, b hit) int {
				if a.end != b.end {
					return a.end - b.end
				}
				return a.n - b.n
			})
			fm.eachStart(string(mixed), lo, hi, func(s, n, p int) {
				gotStarts = append(gotStarts, hit{s, n, p})
			})
			if !slices.Equal(gotStarts, wantStarts) {
				t.Fatalf("round %d: eachStart of %q in %q[%d:%d]: %v, want %v", round, ps, mixed, lo, hi, gotStarts, wantStarts)
			}
		}
		for range 20 {
			s := word(rng.IntN(12))
			contains := false
			for _, p := range pats {
				contains = contains || strings.Contains(s, p)
			}
			if m.contains(s) != contains {
				t.Fatalf("round %d: patterns %q: contains(%q) = %v", round, pats, s, !contains)
			}
		}
	}
	if m := newKwMatcher([]string{"", "ab"}); m.contains("xy") || !m.contains("xaby") {
		t.Fatal("an empty pattern must never match, the others must")
	}
	if m := newKwMatcherFold([]string{"", "aB"}); m.contains("xy") || !m.contains("xAby") || !m.contains("xab") {
		t.Fatal("an empty pattern must never match, the others must")
	}
}

// TestStopWordsAsGitleaks checks that the stop words taken out of the
// default rules' allowlists drop exactly the findings gitleaks' own
// allowlists drop for holding a stop word.
func TestStopWordsAsGitleaks(t *testing.T) {
	cfg, err := loadGitleaksConfig("")
	if err != nil {
		t.Fatal(err)
	}
	orig := cfg.Rules
	split := cfg
	sw, err := splitStopWords(&split)
	if err != nil {
		t.Fatal(err)
	}
	if len(sw) == 0 {
		t.Fatal("no stop words split from the default rules")
	}
	rng := rand.New(rand.NewPCG(7, 7))
	checked := 0
	for id := range sw {
		r := orig[id]
		var words []string
		for _, a := range r.Allowlists {
			words = append(words, a.StopWords...)
		}
		for _, a := range split.Rules[id].Allowlists {
			if len(a.StopWords) > 0 {
				t.Fatalf("rule %s keeps stop words in an allowlist after the split", id)
			}
		}
		for range 2000 {
			var b strings.Builder
			for range 1 + rng.IntN(3) {
				switch rng.IntN(3) {
				case 0:
					w := words[rng.IntN(len(words))]
					if rng.IntN(2) == 0 {
						w = strings.ToUpper(w)
					}
					b.WriteString(w)
				case 1:
					w := words[rng.IntN(len(words))]
					b.WriteString(w[:len(w)/2])
				default:
					b.WriteString(secretLike(rng))
				}
			}
			s := b.String()
			want := false
			for _, a := range r.Allowlists {
				if ok, _ := a.ContainsStopWord(s); ok {
					want = true
				}
			}
			if got := sw.allowed(&report.Finding{RuleID: id, Secret: s}); got != want {
				t.Fatalf("rule %s, secret %q: allowed %v, gitleaks' allowlists %v", id, s, got, want)
			}
			checked++
		}
	}
	if got := sw.allowed(&report.Finding{RuleID: "no-such-rule", Secret: "aaaaaa"}); got {
		t.Fatal("a rule without split stop words allowed a finding")
	}
	t.Logf("%d secrets checked over %d rules", checked, len(sw))
}

func secretLike(rng *rand.Rand) string {
	const chars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-"
	b := make([]byte, 4+rng.IntN(20))
	for i := range b {
		b[i] = chars[rng.IntN(len(chars))]
	}
	return string(b)
}

// TestSweepFindsEveryOccurrence checks sweep's matcher path (more than four
// short secrets) against strings.Index: every occurrence, overlapping ones
// included, under the rule that found the secret.
func TestSweepFindsEveryOccurrence(t *testing.T) {
	secrets := []string{"abcdefgh1", "bcdefgh12", "zzzzzzzz", "token-0000", "k3y-k3y-k3y", "qwertyuiop"}
	var fs []found
	for i, s := range secrets {
		fs = append(fs, found{secret: s, rule: "rule-" + string(rune('a'+i))})
	}
	text := "x abcdefgh12 y zzzzzzzzz token-0000token-0000 k3y-k3y-k3y-k3y qwertyuio end abcdefgh1"
	type span struct {
		start, end int
		rule       string
	}
	want := map[span]bool{}
	for i, s := range secrets {
		for p := 0; p+len(s) <= len(text); p++ {
			if text[p:p+len(s)] == s {
				want[span{p, p + len(s), fs[i].rule}] = true
			}
		}
	}
	got := map[span]bool{}
	for _, f := range sweep(text, fs) {
		got[span{f.start, f.end, f.rule}] = true
	}
	if len(got) != len(want) {
		t.Fatalf("sweep found %d spans, want %d: %v, want %v", len(got), len(want), got, want)
	}
	for s := range want {
		if !got[s] {
			t.Errorf("sweep missed %+v (%q)", s, text[s.start:s.end])
		}
	}
}
