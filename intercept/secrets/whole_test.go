package secrets

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/foldproxy/foldproxy/policy"
)

// wholeRules returns the indices of the engine's whole rules (run over the
// whole text when their keyword occurs) that run from their keyword.
func wholeRules(tb testing.TB, e *engine) []int {
	tb.Helper()
	var out []int
	for i, rs := range e.rules {
		if rs.whole && rs.anchored != nil {
			out = append(out, i)
		}
	}
	ids := []string{}
	for _, i := range out {
		ids = append(ids, e.rules[i].id)
	}
	for _, want := range []string{"curl-auth-user", "private-key"} {
		if !slices.Contains(ids, want) {
			tb.Fatalf("rule %s does not run from its keyword (those that do: %v)", want, ids)
		}
	}
	return out
}

// wholeFragments are pieces of texts around curl commands and PEM blocks:
// the places and shapes where a match starts, or looks as if it could.
func wholeFragments(tb testing.TB) []string {
	return []string{
		"curl", "curl ", "xcurl", "curl_", "CURL", "Curl", " -u ", "--user=", "--user ", "-u",
		`"alice:s3cr3tPa55w0rd"`, `'bob:Zx9!longerpass'`, "admin:hunter2x9", "joe:$TOKEN", `"user:pw"`,
		"https://example.com/api", "\n", "\r\n", "\n\n", "\t", " ", ":", `"`, "'", "-----BEGIN", "-----begin",
		"-----BEGIN RSA PRIVATE KEY-----\n", "-----BEGIN CERTIFICATE-----\n", "-----END RSA PRIVATE KEY-----",
		"KEY-----", strings.Repeat("MIIEvQIBADANBgkqhkiG9w0BAQEFAASC", 3) + "\n", "é", "\xff", "a",
		"word", "0123456789abcdef", "curl -sS -u deploy:Q7mz3LkP9wX2 https://ci.example.com/job\n",
		"curl --user \"ops:Tr0ub4dor&3xyz\" -X GET https://x\n", testKeyPEM(tb) + "\n",
	}
}

// TestWholeRulesFromTheirKeyword: the rules that run over the whole text
// (curl-auth-user, private-key) find exactly what their detector finds
// over the whole text, now that they run from the first place their
// regex matches at, on texts made of the pieces where a match starts or
// looks as if it could, in random order and number.
func TestWholeRulesFromTheirKeyword(t *testing.T) {
	s := testScrubber(t, policy.Scrub{})
	e := s.eng
	rules := wholeRules(t, e)
	frags := wholeFragments(t)
	rng := rand.New(rand.NewPCG(29, 1))
	ctx := context.Background()
	matched := map[string]int{}
	for n := range 3000 {
		var b strings.Builder
		for range 1 + rng.IntN(40) {
			b.WriteString(frags[rng.IntN(len(frags))])
		}
		text := b.String()
		for _, ri := range rules {
			rs := &e.rules[ri]
			want, err := detectWindow(ctx, rs.det, e.stops, text, [2]int{0, len(text)}, false)
			if err != nil {
				t.Fatal(err)
			}
			got, err := e.findWhole(ctx, text, ri)
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("text %d, rule %s: found %v, gitleaks over the whole text %v\ntext %q", n, rs.id, got, want, text)
			}
			matched[rs.id] += len(want)
		}
	}
	for _, id := range []string{"curl-auth-user", "private-key"} {
		if matched[id] == 0 {
			t.Errorf("no text held a match of %s: the test checks nothing for it", id)
		}
	}
}

// FuzzWholeRulesFromTheirKeyword is TestWholeRulesFromTheirKeyword on
// fuzzed texts.
func FuzzWholeRulesFromTheirKeyword(f *testing.F) {
	for _, fr := range wholeFragments(f) {
		f.Add("x " + fr + " y")
	}
	f.Add("curl -u alice:Zx9longpass https://h\n")
	s := testScrubber(f, policy.Scrub{})
	e := s.eng
	rules := wholeRules(f, e)
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, text string) {
		for _, ri := range rules {
			rs := &e.rules[ri]
			want, err := detectWindow(ctx, rs.det, e.stops, text, [2]int{0, len(text)}, false)
			if err != nil {
				t.Fatal(err)
			}
			got, err := e.findWhole(ctx, text, ri)
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("rule %s: found %v, gitleaks over the whole text %v", rs.id, got, want)
			}
		}
	})
}
