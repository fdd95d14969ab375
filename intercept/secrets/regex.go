package secrets

import (
	"regexp/syntax"
	"unicode"
	"unicode/utf8"
)

// addReach adds to reach the bytes a match of re can run through without
// bound: those of every character class repeated without an upper bound
// (except classes of white space only: indentation is not a secret's
// length), and the non-space bytes of every literal (the dots of a JWT
// between its runs).
func addReach(reach *[256]bool, re *syntax.Regexp, unbounded bool) {
	set := func(lo, hi rune) {
		if hi >= utf8.RuneSelf {
			for c := 0x80; c < 256; c++ {
				reach[c] = true
			}
			hi = utf8.RuneSelf - 1
		}
		for c := max(lo, 0); c <= hi; c++ {
			reach[c] = true
		}
	}
	switch re.Op {
	case syntax.OpLiteral:
		for _, r := range re.Rune {
			if r == ' ' || r == '\t' || r == '\n' || r == '\r' {
				continue
			}
			set(r, r)
			if re.Flags&syntax.FoldCase != 0 && r < utf8.RuneSelf {
				set(unicode.ToUpper(r), unicode.ToUpper(r))
				set(unicode.ToLower(r), unicode.ToLower(r))
			}
		}
	case syntax.OpCharClass:
		if !unbounded || spaceOnly(re.Rune) {
			return
		}
		for i := 0; i+1 < len(re.Rune); i += 2 {
			set(re.Rune[i], re.Rune[i+1])
		}
	case syntax.OpAnyChar:
		if unbounded {
			set(0, utf8.MaxRune)
		}
	case syntax.OpAnyCharNotNL:
		if unbounded {
			set(0, '\n'-1)
			set('\n'+1, utf8.MaxRune)
		}
	case syntax.OpStar, syntax.OpPlus:
		addReach(reach, re.Sub[0], true)
	case syntax.OpRepeat:
		addReach(reach, re.Sub[0], unbounded || re.Max < 0)
	default:
		for _, s := range re.Sub {
			addReach(reach, s, unbounded)
		}
	}
}

// spaceOnly reports whether a character class holds only white space.
func spaceOnly(ranges []rune) bool {
	for i := 0; i+1 < len(ranges); i += 2 {
		for r := ranges[i]; r <= ranges[i+1]; r++ {
			if !unicode.IsSpace(r) {
				return false
			}
		}
	}
	return true
}

// matchBounds returns the most bytes a match of re can span and the most
// newlines it can hold, each -1 when unbounded, in one walk of re.
func matchBounds(re *syntax.Regexp) (maxLen, maxNL int) {
	switch re.Op {
	case syntax.OpLiteral:
		for _, r := range re.Rune {
			if re.Flags&syntax.FoldCase != 0 {
				maxLen += utf8.UTFMax
			} else {
				maxLen += utf8.RuneLen(r)
			}
			if r == '\n' {
				maxNL++
			}
		}
		return maxLen, maxNL
	case syntax.OpCharClass:
		maxLen = utf8.UTFMax
		if len(re.Rune) > 0 && re.Rune[len(re.Rune)-1] < utf8.RuneSelf {
			maxLen = 1
		}
		for i := 0; i+1 < len(re.Rune); i += 2 {
			if re.Rune[i] <= '\n' && '\n' <= re.Rune[i+1] {
				return maxLen, 1
			}
		}
		return maxLen, 0
	case syntax.OpAnyChar:
		return utf8.UTFMax, 1
	case syntax.OpAnyCharNotNL:
		return utf8.UTFMax, 0
	case syntax.OpCapture, syntax.OpQuest:
		return matchBounds(re.Sub[0])
	case syntax.OpStar, syntax.OpPlus:
		if _, nl := matchBounds(re.Sub[0]); nl == 0 {
			return -1, 0 // unbounded, but through no newline
		}
		return -1, -1
	case syntax.OpRepeat:
		l, nl := matchBounds(re.Sub[0])
		maxLen, maxNL = -1, -1
		if l >= 0 && re.Max >= 0 {
			maxLen = l * re.Max
		}
		switch {
		case nl == 0:
			maxNL = 0
		case nl > 0 && re.Max >= 0:
			maxNL = nl * re.Max
		}
		return maxLen, maxNL
	case syntax.OpConcat, syntax.OpAlternate:
		for _, s := range re.Sub {
			l, nl := matchBounds(s)
			maxLen = addBound(re.Op, maxLen, l)
			maxNL = addBound(re.Op, maxNL, nl)
		}
		return maxLen, maxNL
	default: // empty-width assertions, empty match
		return 0, 0
	}
}

// addBound adds the bound m of one more operand of a concatenation (the
// sum) or an alternation (the larger) to the bound t of the ones before;
// -1 (unbounded) stays -1.
func addBound(op syntax.Op, t, m int) int {
	switch {
	case t < 0 || m < 0:
		return -1
	case op == syntax.OpConcat:
		return t + m
	default:
		return max(t, m)
	}
}
