package secrets

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"

	"github.com/spf13/viper"
	"github.com/zricethezav/gitleaks/v8/config"
)

// maxExtendDepth bounds a chain of .gitleaks.toml files that extend one
// another through [extend] path, as gitleaks itself does.
const maxExtendDepth = 2

// placeholderRegex never matches; it has capture groups so that a
// secretGroup on an amending rule passes Translate's check (the merged rule
// is validated again against its real regex).
const placeholderRegex = `()()()()()()()()()()()()()()()()[^\s\S]`

// loadGitleaksConfig returns gitleaks' default configuration, extended by
// the user's .gitleaks.toml at path when path is not empty.
//
// gitleaks' own loader (ViperConfig.Translate with [extend]) keeps its
// progress in package-level variables of the config package and in viper's
// global instance, so it is neither safe for concurrent use nor repeatable
// within one process. foldproxy therefore decodes every file with a private
// viper instance, translates each file on its own (with [extend] cleared)
// and performs the merge itself, with the same rules as gitleaks' extend:
// a rule the user redefines is merged field by field into the base rule,
// new rules are added, allowlists are appended, and [extend] disabledRules
// removes base rules.
//
// One deliberate difference: gitleaks' default rules are always the base
// of the chain, whether or not the file says [extend] useDefault = true. A
// scrubber that silently dropped the default rules because a file forgot
// that line would let secrets through; a user who wants a rule gone names
// it in [extend] disabledRules.
func loadGitleaksConfig(path string) (cfg config.Config, err error) {
	// gitleaks compiles rule regexes with MustCompile: a bad pattern panics.
	defer func() {
		if r := recover(); r != nil {
			where := "gitleaks default rules"
			if path != "" {
				where = "gitleaks config " + path
			}
			cfg, err = config.Config{}, fmt.Errorf("%s: %v", where, r)
		}
	}()
	base, err := translateToml([]byte(config.DefaultConfig), "gitleaks default rules")
	if err != nil {
		return config.Config{}, err
	}
	if path == "" {
		return finishConfig(base.cfg, "gitleaks default rules")
	}
	merged, err := loadChain(path, base, 0)
	if err != nil {
		return config.Config{}, err
	}
	return finishConfig(merged, "gitleaks config "+path)
}

// translated is one decoded configuration file before merging.
type translated struct {
	cfg    config.Config
	extend config.Extend
	// targeted are allowlists with targetRules, keyed by rule id; they are
	// attached after merging, when every rule they can name is known.
	targeted map[string][]*config.Allowlist
}

// loadChain reads the file at path and merges it over the configuration
// it extends (another file through [extend] path, and ultimately base).
func loadChain(path string, base translated, depth int) (config.Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return config.Config{}, fmt.Errorf("gitleaks config %s: %w", path, err)
	}
	t, err := translateToml(data, "gitleaks config "+path)
	if err != nil {
		return config.Config{}, err
	}
	if t.extend.URL != "" {
		return config.Config{}, fmt.Errorf("gitleaks config %s: [extend] url is not supported; use path or useDefault", path)
	}
	if t.extend.Path != "" && t.extend.UseDefault {
		return config.Config{}, fmt.Errorf("gitleaks config %s: [extend] path and useDefault cannot both be set", path)
	}
	under := base.cfg
	if t.extend.Path != "" {
		if depth+1 >= maxExtendDepth {
			return config.Config{}, fmt.Errorf("gitleaks config %s: [extend] path chain is deeper than %d files", path, maxExtendDepth)
		}
		p := t.extend.Path
		if !filepath.IsAbs(p) {
			p = filepath.Join(filepath.Dir(path), p)
		}
		if under, err = loadChain(p, base, depth+1); err != nil {
			return config.Config{}, err
		}
	}
	merged := mergeConfig(t.cfg, under, t.extend.DisabledRules)
	for id, als := range t.targeted {
		r, ok := merged.Rules[id]
		if !ok {
			return config.Config{}, fmt.Errorf("gitleaks config %s: [[allowlists]] targetRules names rule %q, which does not exist", path, id)
		}
		r.Allowlists = append(r.Allowlists, als...)
		merged.Rules[id] = r
	}
	return merged, nil
}

// translateToml decodes one TOML configuration with a private viper
// instance and translates it with [extend] cleared, so that gitleaks'
// global extend machinery never runs.
func translateToml(data []byte, name string) (translated, error) {
	v := viper.New()
	v.SetConfigType("toml")
	if err := v.ReadConfig(bytes.NewReader(data)); err != nil {
		return translated{}, fmt.Errorf("%s: %v", name, err)
	}
	var vc config.ViperConfig
	if err := v.Unmarshal(&vc); err != nil {
		return translated{}, fmt.Errorf("%s: %v", name, err)
	}
	t := translated{extend: vc.Extend}
	vc.Extend = config.Extend{}

	// Pull out allowlists that target rules: Translate would refuse those
	// naming a rule of the base configuration.
	if vc.AllowList != nil && len(vc.AllowList.TargetRules) > 0 {
		vc.Allowlists = append(vc.Allowlists, vc.AllowList)
		vc.AllowList = nil
	}
	var targeted []*struct {
		rules []string
	}
	var tv config.ViperConfig
	kept := vc.Allowlists[:0:0]
	for _, a := range vc.Allowlists {
		if a == nil || len(a.TargetRules) == 0 {
			kept = append(kept, a)
			continue
		}
		targeted = append(targeted, &struct{ rules []string }{a.TargetRules})
		c := *a
		c.TargetRules = nil
		tv.Allowlists = append(tv.Allowlists, &c)
	}
	vc.Allowlists = kept

	// A rule that only amends a base rule (say, adds an allowlist) has no
	// regex of its own; Translate would refuse it before the merge can fill
	// the regex in. Give it a placeholder that never matches and remove the
	// placeholder again after translation.
	var amending []string
	for i := range vc.Rules {
		if vc.Rules[i].Regex == "" && vc.Rules[i].Path == "" {
			vc.Rules[i].Regex = placeholderRegex
			amending = append(amending, vc.Rules[i].ID)
		}
	}
	cfg, err := translateParallel(vc, runtime.GOMAXPROCS(0))
	if err != nil {
		return translated{}, fmt.Errorf("%s: %v", name, err)
	}
	for _, id := range amending {
		if r, ok := cfg.Rules[id]; ok {
			r.Regex = nil
			cfg.Rules[id] = r
		}
	}
	t.cfg = cfg
	if len(targeted) > 0 {
		tc, err := tv.Translate()
		if err != nil {
			return translated{}, fmt.Errorf("%s: %v", name, err)
		}
		t.targeted = make(map[string][]*config.Allowlist)
		for i, al := range tc.Allowlists {
			for _, id := range targeted[i].rules {
				t.targeted[id] = append(t.targeted[id], al)
			}
		}
	}
	return t, nil
}

// translateMinRules is the fewest rules per part worth a goroutine of
// its own in translateParallel.
const translateMinRules = 32

// translateParallel is vc.Translate with the rules split into up to n
// parts translated at once. Translating is mostly compiling the rules'
// regexes (on go-re2 about 120 ms of CPU for the default rules, the
// longest step of a proxy's start), one after another; the parts compile
// on n cores. The first part carries everything but the other parts'
// rules (title, minimum version, global allowlists), the others their
// rules alone, and the rules, keywords and rule order of all are joined
// into the first part's configuration: what Translate builds per rule
// depends on that rule alone, and finishConfig validates the whole again
// and recomputes the keywords and the order. Rules that require other
// rules ([[rules.required]]) are checked by Translate within one
// configuration, so a file that has any is translated whole.
//
// Translate reads package-level state of gitleaks' config package (its
// extend depth) but writes it only when extending, which translateToml
// has switched off; a bad regex panics in gitleaks' MustCompile, so each
// part recovers its own panic and returns it as an error.
func translateParallel(vc config.ViperConfig, n int) (config.Config, error) {
	parts := min(n, len(vc.Rules)/translateMinRules)
	for _, r := range vc.Rules {
		if len(r.Required) > 0 {
			parts = 1
		}
	}
	if parts <= 1 {
		return vc.Translate()
	}
	vcs := make([]config.ViperConfig, parts)
	vcs[0] = vc
	vcs[0].Rules = nil
	for i, r := range vc.Rules {
		vcs[i%parts].Rules = append(vcs[i%parts].Rules, r)
	}
	cfgs := make([]config.Config, parts)
	errs := make([]error, parts)
	var wg sync.WaitGroup
	for i := range vcs {
		wg.Go(func() {
			defer func() {
				if r := recover(); r != nil {
					errs[i] = fmt.Errorf("%v", r)
				}
			}()
			cfgs[i], errs[i] = vcs[i].Translate()
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return config.Config{}, err
		}
	}
	out := cfgs[0]
	for _, c := range cfgs[1:] {
		for id, r := range c.Rules {
			if _, dup := out.Rules[id]; dup {
				// Translate keeps the last of two rules with one id;
				// parts would not know which came last.
				return vc.Translate()
			}
			out.Rules[id] = r
		}
		for k := range c.Keywords {
			out.Keywords[k] = struct{}{}
		}
		out.OrderedRules = append(out.OrderedRules, c.OrderedRules...)
	}
	sort.Strings(out.OrderedRules)
	return out, nil
}

// mergeConfig merges top over base, as gitleaks' Config.extend does, and
// returns a new configuration; neither argument is modified.
func mergeConfig(top, base config.Config, disabled []string) config.Config {
	off := make(map[string]bool, len(disabled))
	for _, id := range disabled {
		off[id] = true
	}
	out := top
	out.Rules = make(map[string]config.Rule, len(top.Rules)+len(base.Rules))
	for id, r := range top.Rules {
		out.Rules[id] = r
	}
	for id, b := range base.Rules {
		if off[id] {
			continue
		}
		cur, ok := out.Rules[id]
		if !ok {
			out.Rules[id] = b
			continue
		}
		if cur.Description != "" {
			b.Description = cur.Description
		}
		if cur.Entropy != 0 {
			b.Entropy = cur.Entropy
		}
		if cur.SecretGroup != 0 {
			b.SecretGroup = cur.SecretGroup
		}
		if cur.Regex != nil {
			b.Regex = cur.Regex
		}
		if cur.Path != nil {
			b.Path = cur.Path
		}
		b.Tags = append(append([]string(nil), b.Tags...), cur.Tags...)
		b.Keywords = append(append([]string(nil), b.Keywords...), cur.Keywords...)
		b.Allowlists = append(append([]*config.Allowlist(nil), b.Allowlists...), cur.Allowlists...)
		out.Rules[id] = b
	}
	out.Allowlists = append(append([]*config.Allowlist(nil), top.Allowlists...), base.Allowlists...)
	return out
}

// finishConfig validates every rule, recomputes the keyword set and the
// rule order from the merged rules.
func finishConfig(c config.Config, name string) (config.Config, error) {
	c.Keywords = make(map[string]struct{})
	c.OrderedRules = c.OrderedRules[:0:0]
	for id, r := range c.Rules {
		if err := r.Validate(); err != nil {
			return config.Config{}, fmt.Errorf("%s: %v", name, err)
		}
		for i, k := range r.Keywords {
			r.Keywords[i] = strings.ToLower(k)
			c.Keywords[r.Keywords[i]] = struct{}{}
		}
		c.OrderedRules = append(c.OrderedRules, id)
	}
	sort.Strings(c.OrderedRules)
	for id, r := range c.Rules {
		for _, req := range r.RequiredRules {
			if _, ok := c.Rules[req.RuleID]; !ok {
				return config.Config{}, fmt.Errorf("%s: rule %q requires rule %q, which does not exist", name, id, req.RuleID)
			}
		}
	}
	if len(c.Rules) == 0 {
		return config.Config{}, fmt.Errorf("%s: no rules", name)
	}
	return c, nil
}
