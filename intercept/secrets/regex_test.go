package secrets

import (
	"regexp/syntax"
	"testing"
	"unicode/utf8"
)

// TestMatchBoundsAsTwoWalks: the one walk gives, on every default rule
// and on regexes made to reach each case, what the two walks it replaced
// (one for lengths, one for newlines) gave.
func TestMatchBoundsAsTwoWalks(t *testing.T) {
	cfg, err := loadGitleaksConfig("")
	if err != nil {
		t.Fatal(err)
	}
	srcs := []string{
		`abc`, `(?i)abc\n`, `[a-z]{3,8}`, `[\s\S]{0,4}`, `.*`, `(?s).{2}`, `a+\n?`, `(a|bc\n|d)`,
		`x[^a]*y`, `(\n|a){2,5}`, `(\n|a){2,}`, `(ab){0,}`, `(?:a\nb)*`, `^\bfoo$`, `é{3}`, `(?:)`,
	}
	for _, id := range cfg.OrderedRules {
		if r := cfg.Rules[id]; r.Regex != nil {
			srcs = append(srcs, r.Regex.String())
		}
	}
	n := 0
	for _, src := range srcs {
		re, err := syntax.Parse(src, syntax.Perl)
		if err != nil {
			continue
		}
		re = re.Simplify()
		n++
		gotLen, gotNL := matchBounds(re)
		if wantLen, wantNL := maxMatchLenRef(re), maxMatchNewlinesRef(re); gotLen != wantLen || gotNL != wantNL {
			t.Errorf("%s: matchBounds = %d, %d; the two walks gave %d, %d", src, gotLen, gotNL, wantLen, wantNL)
		}
	}
	if n < 100 {
		t.Fatalf("only %d regexes checked", n)
	}
}

// maxMatchLenRef is the walk matchBounds replaced for lengths: it returns the most bytes a match of re can span, or -1 when
// unbounded.
func maxMatchLenRef(re *syntax.Regexp) int {
	switch re.Op {
	case syntax.OpLiteral:
		per := 0
		for _, r := range re.Rune {
			if re.Flags&syntax.FoldCase != 0 {
				per += utf8.UTFMax
			} else {
				per += utf8.RuneLen(r)
			}
		}
		return per
	case syntax.OpCharClass:
		if len(re.Rune) > 0 && re.Rune[len(re.Rune)-1] < utf8.RuneSelf {
			return 1
		}
		return utf8.UTFMax
	case syntax.OpAnyChar, syntax.OpAnyCharNotNL:
		return utf8.UTFMax
	case syntax.OpCapture, syntax.OpQuest:
		return maxMatchLenRef(re.Sub[0])
	case syntax.OpStar, syntax.OpPlus:
		return -1
	case syntax.OpRepeat:
		if re.Max < 0 {
			return -1
		}
		m := maxMatchLenRef(re.Sub[0])
		if m < 0 {
			return -1
		}
		return m * re.Max
	case syntax.OpConcat, syntax.OpAlternate:
		t := 0
		for _, s := range re.Sub {
			m := maxMatchLenRef(s)
			if m < 0 {
				return -1
			}
			if re.Op == syntax.OpConcat {
				t += m
			} else {
				t = max(t, m)
			}
		}
		return t
	default: // empty-width assertions, empty match
		return 0
	}
}

// maxMatchNewlinesRef is the walk matchBounds replaced for newlines: it
// returns the most newlines a match of re can hold, or -1
// when unbounded.
func maxMatchNewlinesRef(re *syntax.Regexp) int {
	switch re.Op {
	case syntax.OpLiteral:
		n := 0
		for _, r := range re.Rune {
			if r == '\n' {
				n++
			}
		}
		return n
	case syntax.OpCharClass:
		for i := 0; i+1 < len(re.Rune); i += 2 {
			if re.Rune[i] <= '\n' && '\n' <= re.Rune[i+1] {
				return 1
			}
		}
		return 0
	case syntax.OpAnyChar:
		return 1
	case syntax.OpAnyCharNotNL:
		return 0
	case syntax.OpCapture, syntax.OpQuest:
		return maxMatchNewlinesRef(re.Sub[0])
	case syntax.OpStar, syntax.OpPlus:
		if maxMatchNewlinesRef(re.Sub[0]) == 0 {
			return 0
		}
		return -1
	case syntax.OpRepeat:
		m := maxMatchNewlinesRef(re.Sub[0])
		if m == 0 {
			return 0
		}
		if m < 0 || re.Max < 0 {
			return -1
		}
		return m * re.Max
	case syntax.OpConcat, syntax.OpAlternate:
		t := 0
		for _, s := range re.Sub {
			m := maxMatchNewlinesRef(s)
			if m < 0 {
				return -1
			}
			if re.Op == syntax.OpConcat {
				t += m
			} else {
				t = max(t, m)
			}
		}
		return t
	default:
		return 0
	}
}
