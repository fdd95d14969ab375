package secrets

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/viper"
	"github.com/zricethezav/gitleaks/v8/config"
)

// canonicalConfig writes what a scrubber takes from a configuration, in a
// fixed order: every rule with its regexes as text, the keywords, the rule
// order and the global allowlists.
func canonicalConfig(c config.Config) string {
	var b strings.Builder
	re := func(x interface{ String() string }) string {
		if x == nil {
			return "<nil>"
		}
		return x.String()
	}
	allow := func(a *config.Allowlist) {
		// gitleaks lists the stop words from a map: their order differs
		// from one translation to the next.
		stop := slices.Sorted(slices.Values(a.StopWords))
		fmt.Fprintf(&b, "  allow %q %v %q %q %q\n", a.Description, a.MatchCondition, a.Commits, a.RegexTarget, stop)
		for _, p := range a.Paths {
			fmt.Fprintf(&b, "   path %s\n", p.String())
		}
		for _, r := range a.Regexes {
			fmt.Fprintf(&b, "   regex %s\n", r.String())
		}
	}
	for _, id := range slices.Sorted(maps.Keys(c.Rules)) {
		r := c.Rules[id]
		var rx, px string
		if r.Regex != nil {
			rx = re(r.Regex)
		}
		if r.Path != nil {
			px = re(r.Path)
		}
		fmt.Fprintf(&b, "rule %s %q %v %d %q %q %q %q\n", r.RuleID, r.Description, r.Entropy, r.SecretGroup, rx, px, r.Tags, r.Keywords)
		for _, q := range r.RequiredRules {
			fmt.Fprintf(&b, "  requires %+v\n", *q)
		}
		for _, a := range r.Allowlists {
			allow(a)
		}
	}
	kw := make([]string, 0, len(c.Keywords))
	for k := range c.Keywords {
		kw = append(kw, k)
	}
	slices.Sort(kw)
	fmt.Fprintf(&b, "keywords %q\norder %q\ntitle %q min %q\n", kw, c.OrderedRules, c.Title, c.MinVersion)
	for _, a := range c.Allowlists {
		allow(a)
	}
	return b.String()
}

// viperConfigOf decodes a TOML configuration as translateToml does.
func viperConfigOf(t *testing.T, data []byte) config.ViperConfig {
	t.Helper()
	v := viper.New()
	v.SetConfigType("toml")
	if err := v.ReadConfig(bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	var vc config.ViperConfig
	if err := v.Unmarshal(&vc); err != nil {
		t.Fatal(err)
	}
	return vc
}

// TestTranslateParallel: translating the rules in parts on several cores
// gives the configuration gitleaks' Translate gives, for the default rules
// (222 rules, global allowlists, per-rule allowlists) and for a file with
// a rule that requires another (translated whole); a bad regex in any part
// is an error, not a panic.
func TestTranslateParallel(t *testing.T) {
	def := viperConfigOf(t, []byte(config.DefaultConfig))
	want, err := def.Translate()
	if err != nil {
		t.Fatal(err)
	}
	wantText := canonicalConfig(want)
	if !strings.Contains(wantText, "allow ") || len(want.Rules) < 4*translateMinRules {
		t.Fatalf("the default configuration lost what this test needs: %d rules", len(want.Rules))
	}
	for _, n := range []int{1, 2, 3, 4, 8, 1000} {
		got, err := translateParallel(viperConfigOf(t, []byte(config.DefaultConfig)), n)
		if err != nil {
			t.Fatalf("n=%d: %v", n, err)
		}
		if g := canonicalConfig(got); g != wantText {
			t.Fatalf("n=%d: the configuration differs from Translate's:\n%s", n, firstDiff(g, wantText))
		}
	}

	// A rule requiring another, the two rules far apart among many.
	var toml strings.Builder
	for i := range 3 * translateMinRules {
		fmt.Fprintf(&toml, "[[rules]]\nid = \"r%03d\"\nregex = '''tok%03d_[a-z]{8}'''\nkeywords = [\"tok%03d\"]\n", i, i, i)
		if i == 0 {
			toml.WriteString("[[rules.required]]\nid = \"r095\"\n")
		}
	}
	data := []byte(toml.String())
	req := viperConfigOf(t, data)
	want, err = req.Translate()
	if err != nil {
		t.Fatal(err)
	}
	got, err := translateParallel(viperConfigOf(t, data), 4)
	if err != nil {
		t.Fatalf("with a required rule: %v", err)
	}
	if g, w := canonicalConfig(got), canonicalConfig(want); g != w {
		t.Fatalf("with a required rule, the configuration differs:\n%s", firstDiff(g, w))
	}

	// A bad regex in the last part.
	bad := append(data, []byte("[[rules]]\nid = \"bad\"\nregex = '''(unclosed'''\n")...)
	if _, err := translateParallel(viperConfigOf(t, bytes.Replace(bad, []byte("[[rules.required]]\nid = \"r095\"\n"), nil, 1)), 4); err == nil {
		t.Fatal("a bad regex translated without an error")
	}
}

// firstDiff shows the first line where got and want differ.
func firstDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := range min(len(g), len(w)) {
		if g[i] != w[i] {
			return fmt.Sprintf("line %d:\n got  %s\n want %s", i+1, g[i], w[i])
		}
	}
	return fmt.Sprintf("lengths %d and %d lines", len(g), len(w))
}
