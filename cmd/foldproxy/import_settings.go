package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/foldproxy/foldproxy/policy/jsonscan"
)

// impRuleMapping says how permission rules are renamed.
type impRuleMapping struct {
	servers []string // imported servers, as Claude Code names them
	name    string   // the foldproxy entry
	sep     string   // foldproxy's separator between server and tool
	// collapse permits replacing whole-server allow rules by one rule for
	// the whole proxy when they cover every server the proxy serves.
	collapse bool
}

// impRuleChange is one rewritten rule.
type impRuleChange struct {
	at       string // JSON path, such as permissions.allow[2]
	old, new string
	removed  bool // the rule is dropped; new names the rule that covers it
}

// impSettingsResult is the outcome of impRewriteSettings.
type impSettingsResult struct {
	data     []byte
	changes  []impRuleChange
	warnings []string
}

// impRewriteSettings renames the MCP permission rules of imported servers in
// a Claude Code settings file. Only the strings of permissions.allow, .deny
// and .ask that name an imported server change; every other byte of the
// file stays as it was.
//
// A tool rule mcp__S__T becomes mcp__N__S<sep>T, the name Claude Code gives
// the proxied tool. A whole-server rule (mcp__S or mcp__S__*) has no exact
// equivalent once S sits behind the proxy N:
//   - in deny and ask it becomes mcp__N__S<sep>*, a tool-name glob after the
//     literal mcp__N__ prefix, which deny and ask rules accept;
//   - in allow, Claude Code versions differ on such partial globs (some
//     refuse them in allow rules), and a rule for the whole proxy would
//     grant more than before. So when the allow list grants every proxied
//     server wholesale, those rules become the one rule mcp__N, which grants
//     exactly the same upstream tools (plus the proxy's fold tools); else
//     the rule is kept unchanged, with a warning: it no longer matches
//     anything, and Claude Code asks once per tool as usual.
func impRewriteSettings(data []byte, m impRuleMapping) (impSettingsResult, error) {
	res := impSettingsResult{data: data}
	top, err := impTopObject("", data)
	if err != nil {
		return res, err
	}
	perm, ok := top.get("permissions")
	if !ok {
		return res, nil
	}
	if data[perm.valStart] != '{' {
		return res, fmt.Errorf("permissions: want an object, got %s", jsonscan.Kind(data[perm.valStart:]))
	}
	pobj, err := impObjectMembers(data, perm.valStart)
	if err != nil {
		return res, fmt.Errorf("permissions: %w", err)
	}
	// Longest names first, so that server "a__b" wins over server "a".
	servers := append([]string(nil), m.servers...)
	sort.Slice(servers, func(i, j int) bool { return len(servers[i]) > len(servers[j]) })

	var edits []impEdit
	for _, list := range []string{"allow", "deny", "ask"} {
		arr, ok := pobj.get(list)
		if !ok {
			continue
		}
		e, err := impRewriteRuleList(data, arr, list, m, impRuleMatcher(servers), &res)
		if err != nil {
			return res, err
		}
		edits = append(edits, e...)
	}
	if len(edits) == 0 {
		return res, nil
	}
	out, err := impApplyEdits(data, edits)
	if err != nil {
		return res, err
	}
	res.data = out
	return res, nil
}

// impRuleMatcher is the imported servers, longest names first.
type impRuleMatcher []string

// match says which imported server a permission rule names: the whole
// server (mcp__S or mcp__S__*) or one tool of it.
func (servers impRuleMatcher) match(rule string) (server, tool string, whole, ok bool) {
	for _, s := range servers {
		p := "mcp__" + s
		if rule == p || rule == p+"__*" {
			return s, "", true, true
		}
		if t, found := strings.CutPrefix(rule, p+"__"); found && t != "" {
			return s, t, false, true
		}
	}
	return "", "", false, false
}

// impEdit replaces data[start:end] by text.
type impEdit struct {
	start, end int
	text       []byte
}

// impRewriteRuleList rewrites the rules of one list (allow, deny or ask) of
// the permissions object, as impRewriteSettings describes; it records the
// changes and warnings in res and returns the edits to data.
func impRewriteRuleList(data []byte, arr impMember, list string, m impRuleMapping, servers impRuleMatcher, res *impSettingsResult) ([]impEdit, error) {
	var edits []impEdit
	at := "permissions." + list
	if data[arr.valStart] != '[' {
		return nil, fmt.Errorf("%s: want an array of rules, got %s", at, jsonscan.Kind(data[arr.valStart:]))
	}
	elems, err := impArrayElems(data, arr.valStart)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", at, err)
	}
	rules := make([]string, len(elems))
	isRule := make([]bool, len(elems))
	for i, e := range elems {
		if data[e.Start] == '"' && json.Unmarshal(data[e.Start:e.End], &rules[i]) == nil {
			isRule[i] = true
		}
	}
	// Does this allow list grant every proxied server wholesale?
	whole := map[string]bool{}
	proxyRule := "mcp__" + m.name
	hasProxyRule := false
	for i := range elems {
		if !isRule[i] {
			continue
		}
		if rules[i] == proxyRule {
			hasProxyRule = true
		}
		if s, _, w, ok := servers.match(rules[i]); ok && w {
			whole[s] = true
		}
	}
	collapse := list == "allow" && m.collapse && len(servers) > 0 && len(whole) == len(servers)
	placed := hasProxyRule
	removed := make([]bool, len(elems))
	for i, e := range elems {
		if !isRule[i] {
			continue
		}
		s, tool, w, ok := servers.match(rules[i])
		if !ok {
			continue
		}
		elemAt := fmt.Sprintf("%s[%d]", at, i)
		var repl string
		switch {
		case !w:
			repl = "mcp__" + m.name + "__" + s + m.sep + tool
		case list != "allow":
			repl = "mcp__" + m.name + "__" + s + m.sep + "*"
		case collapse && !placed:
			repl = proxyRule
			placed = true
		case collapse:
			// Covered by the proxy rule, already in the list or placed
			// by an earlier element.
			removed[i] = true
			res.changes = append(res.changes, impRuleChange{at: elemAt, old: rules[i], new: proxyRule, removed: true})
			continue
		default:
			res.warnings = append(res.warnings, fmt.Sprintf("%s %s kept unchanged: a rule that allows one whole server behind the proxy (%s) is refused in allow rules by some Claude Code versions, and %s would also allow the other proxied servers; Claude Code will ask once per tool of %s (answer \"don't ask again\" to record it)",
				elemAt, impQuote(rules[i]), impQuote("mcp__"+m.name+"__"+s+m.sep+"*"), impQuote(proxyRule), s))
			continue
		}
		if repl == rules[i] {
			continue
		}
		res.changes = append(res.changes, impRuleChange{at: elemAt, old: rules[i], new: repl})
		edits = append(edits, impEdit{e.Start, e.End, jsonscan.Quote(repl)})
	}
	return append(edits, impRemoveElems(elems, removed)...), nil
}

// impRemoveElems removes the removed elements with one separating comma
// each: after a kept element, from its end; before any kept element, up to
// the next element's start. The ranges never overlap.
func impRemoveElems(elems []jsonscan.Span, removed []bool) []impEdit {
	var edits []impEdit
	keptBefore := false
	for i, e := range elems {
		switch {
		case !removed[i]:
			keptBefore = true
		case keptBefore:
			edits = append(edits, impEdit{elems[i-1].End, e.End, nil})
		case i+1 < len(elems):
			edits = append(edits, impEdit{e.Start, elems[i+1].Start, nil})
		default:
			edits = append(edits, impEdit{e.Start, e.End, nil})
		}
	}
	return edits
}

// impApplyEdits applies non-overlapping edits to data.
func impApplyEdits(data []byte, edits []impEdit) ([]byte, error) {
	sort.Slice(edits, func(i, j int) bool { return edits[i].start < edits[j].start })
	var b bytes.Buffer
	last := 0
	for _, e := range edits {
		if e.start < last {
			return nil, fmt.Errorf("internal error: overlapping edits at byte %d", e.start)
		}
		b.Write(data[last:e.start])
		b.Write(e.text)
		last = e.end
	}
	b.Write(data[last:])
	return b.Bytes(), nil
}

// impCountHomeRules counts the rules for servers in the user's own Claude
// Code settings. Errors count as none: the file is only read for a warning.
func impCountHomeRules(path string, servers []string) int {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	var s struct {
		Permissions map[string]json.RawMessage `json:"permissions"`
	}
	if json.Unmarshal(data, &s) != nil {
		return 0
	}
	n := 0
	for _, list := range []string{"allow", "deny", "ask"} {
		var rules []any
		if json.Unmarshal(s.Permissions[list], &rules) != nil {
			continue
		}
		for _, r := range rules {
			rule, ok := r.(string)
			if !ok {
				continue
			}
			for _, srv := range servers {
				if rule == "mcp__"+srv || strings.HasPrefix(rule, "mcp__"+srv+"__") {
					n++
					break
				}
			}
		}
	}
	return n
}
