package secrets

import (
	"regexp"
	"regexp/syntax"
	"strings"
)

// anchorAtKeywords sets lead, fold and the anchored regexes when every
// match of re (the rule's regex src, simplified) starts with a literal
// that starts with one of keywords.
func (rs *ruleScanner) anchorAtKeywords(re *syntax.Regexp, src string, keywords []string) {
	lit, fold, ok := leadingLiteral(re)
	if !ok || !isASCII(lit) {
		return
	}
	low := string(asciiLower(lit))
	found := false
	for _, k := range keywords {
		if k != "" && strings.HasPrefix(low, string(asciiLower(k))) {
			found = true
		}
	}
	if !found {
		return
	}
	a, err1 := regexp.Compile(`^(?:` + src + `)`)
	b, err2 := regexp.Compile(`^(?s:.)(?:` + src + `)`)
	if err1 != nil || err2 != nil {
		return
	}
	rs.lead, rs.fold, rs.anchored, rs.anchoredNext = lit, fold, a, b
	if fold {
		rs.lead = low
	}
}

// leadingLiteral returns the literal every match of re starts with, past
// word-boundary assertions, and whether it ignores case.
func leadingLiteral(re *syntax.Regexp) (string, bool, bool) {
	for {
		switch re.Op {
		case syntax.OpCapture:
			re = re.Sub[0]
		case syntax.OpConcat:
			i := 0
			for i < len(re.Sub) && (re.Sub[i].Op == syntax.OpWordBoundary || re.Sub[i].Op == syntax.OpNoWordBoundary) {
				i++
			}
			if i == len(re.Sub) {
				return "", false, false
			}
			re = re.Sub[i]
		case syntax.OpLiteral:
			return string(re.Rune), re.Flags&syntax.FoldCase != 0, len(re.Rune) > 0
		default:
			return "", false, false
		}
	}
}

// firstMatchAt returns the first place in text where the rule's regex
// matches, as gitleaks' search would find it, or -1 when it matches
// nowhere: every match starts where lead does, so each place lead occurs
// is tested with the regex anchored there (the standard library's engine
// reads the text lazily and stops as soon as no match can start there).
// A match found this way is the place gitleaks' own search starts from.
func (rs *ruleScanner) firstMatchAt(text string) int {
	for p := 0; ; p++ {
		i := indexLead(text[p:], rs.lead, rs.fold)
		if i < 0 {
			return -1
		}
		p += i
		var ok bool
		if p == 0 {
			ok = rs.anchored.MatchReader(strings.NewReader(text))
		} else {
			// With the byte before, for a \b at the start.
			ok = rs.anchoredNext.MatchReader(strings.NewReader(text[p-1:]))
		}
		if ok {
			return p
		}
	}
}

// indexLead returns the first place of lit in s (ignoring ASCII case with
// fold, lit then lowered), or -1.
func indexLead(s, lit string, fold bool) int {
	if !fold {
		return strings.Index(s, lit)
	}
	// The part of lit without letters is found exactly, the rest
	// compared ignoring case.
	k := 0
	for k < len(lit) && !('a' <= lit[k] && lit[k] <= 'z') {
		k++
	}
	for off := 0; off+len(lit) <= len(s); {
		var i int
		if k > 0 {
			i = strings.Index(s[off:], lit[:k])
		} else {
			i = strings.IndexAny(s[off:], lit[:1]+strings.ToUpper(lit[:1]))
		}
		if i < 0 {
			return -1
		}
		p := off + i
		if p+len(lit) <= len(s) && strings.EqualFold(s[p:p+len(lit)], lit) {
			return p
		}
		off = p + 1
	}
	return -1
}
