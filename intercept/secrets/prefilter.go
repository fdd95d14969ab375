package secrets

import (
	"math"
	"regexp/syntax"
	"unicode/utf8"
)

// A runFilter is a necessary condition for a rule's regex to match
// somewhere in a text: the text holds a run of at least n consecutive
// bytes of some class, for one of a few (class, n) alternatives. It is
// derived from the regex itself (every match of `SK[0-9a-fA-F]{32}` holds
// 34 bytes of [0-9A-Fa-fKS] in a row), so that a window failing it cannot
// hold a match and gitleaks need not be run over it: the result is the
// same, exactly, at the cost of one pass over the window's bytes.
//
// Classes are over bytes. A character class or literal holding a rune
// outside ASCII holds every byte from 0x80 up, so that a run of n runes is
// a run of at least n bytes of the class whatever their encoding (and
// whatever case folding of non-ASCII letters the regex engine applies).
type runFilter struct {
	alts []runReq
}

// runReq is one alternative of a runFilter.
type runReq struct {
	class *[256]bool
	n     int
}

// minRunFilter is the shortest run a filter is built on: shorter runs of
// any class that can occur in code pass nearly every window.
const minRunFilter = 8

// newRunFilter derives the runFilter of a regex, or returns nil when the
// regex yields none worth checking.
func newRunFilter(re *syntax.Regexp) *runFilter {
	alts := runReqs(re).best()
	if len(alts) == 0 {
		return nil
	}
	for _, a := range alts {
		if a.n < minRunFilter {
			return nil
		}
	}
	return &runFilter{alts: alts}
}

// pass reports whether s holds a run that one of the alternatives asks
// for. When it does not, the regex the filter came from matches nowhere in
// s.
//
// detectWindow hands gitleaks a window with a newline added when it does
// not end in one; pass(s) counts that newline too.
func (f *runFilter) pass(s string) bool {
	nl := !endsInNewline(s)
	for _, a := range f.alts {
		if hasRun(a.class, s, a.n) {
			return true
		}
		if nl && a.class['\n'] && tailRun(a.class, s, a.n-1)+1 >= a.n {
			return true
		}
	}
	return false
}

// hasRun reports whether s holds n (at least 1) consecutive bytes of
// class. It tests one byte in n where no run is near: every run of n
// bytes starting in s[p:p+n] holds s[p+n-1], so when that byte is not of
// the class none does, and the search goes on at p+n.
func hasRun(class *[256]bool, s string, n int) bool {
	p := 0 // no run of n bytes starts before p
	for p+n <= len(s) {
		q := p + n - 1
		if !class[s[q]] {
			p = q + 1
			continue
		}
		// The bytes of the class around q, from a (not before p) to e.
		a := q
		for a > p && class[s[a-1]] {
			a--
		}
		e := q + 1
		for e < len(s) && e-a < n && class[s[e]] {
			e++
		}
		if e-a >= n {
			return true
		}
		// s[e] is not of the class (or e is the end): a run starting
		// at or before e would hold it.
		p = e + 1
	}
	return false
}

// tailRun returns how many bytes of class end s, counting up to limit.
func tailRun(class *[256]bool, s string, limit int) int {
	n := 0
	for i := len(s) - 1; i >= 0 && n < limit && class[s[i]]; i-- {
		n++
	}
	return n
}

func endsInNewline(s string) bool { return len(s) > 0 && s[len(s)-1] == '\n' }

// reqs is what runReqs knows of a node's matches. A pure node matches
// only bytes of class, at least n of them. alts, whether the node is pure
// or not, is a disjunction of runs one of which every match holds (none:
// nothing is known), the most selective found.
type reqs struct {
	pure  bool
	class *[256]bool
	n     int
	alts  []runReq
}

// score estimates how selective a disjunction of runs is: the bits of its
// weakest alternative (its length times the bits a byte of its class
// leaves out of ASCII), less one for each further alternative (another
// pass).
func score(alts []runReq) float64 {
	if len(alts) == 0 {
		return 0
	}
	best := math.Inf(1)
	for _, a := range alts {
		k := 0
		for _, in := range a.class[:utf8.RuneSelf] {
			if in {
				k++
			}
		}
		best = min(best, float64(a.n)*math.Log2(128/float64(max(k, 1))))
	}
	return best - float64(len(alts)-1)
}

// moreSelective returns the more selective of two disjunctions.
func moreSelective(a, b []runReq) []runReq {
	if score(b) > score(a) {
		return b
	}
	return a
}

// best returns the most selective disjunction known of r's matches.
func (r reqs) best() []runReq {
	if r.pure && r.n > 0 {
		return moreSelective(r.alts, []runReq{{class: r.class, n: r.n}})
	}
	return r.alts
}

func unionClass(a, b *[256]bool) *[256]bool {
	var c [256]bool
	for i := range c {
		c[i] = a[i] || b[i]
	}
	return &c
}

// runReqs computes what every match of re holds (see reqs). It errs on
// the side of knowing less: a node it does not understand is neither pure
// nor has alternatives.
func runReqs(re *syntax.Regexp) reqs {
	switch re.Op {
	case syntax.OpEmptyMatch, syntax.OpBeginLine, syntax.OpEndLine, syntax.OpBeginText,
		syntax.OpEndText, syntax.OpWordBoundary, syntax.OpNoWordBoundary:
		// Empty width: a run goes on across it.
		return reqs{pure: true, class: new([256]bool)}
	case syntax.OpLiteral:
		c := new([256]bool)
		for _, r := range re.Rune {
			addRune(c, r, re.Flags&syntax.FoldCase != 0)
		}
		return reqs{pure: true, class: c, n: len(re.Rune)}
	case syntax.OpCharClass:
		c := new([256]bool)
		for i := 0; i+1 < len(re.Rune); i += 2 {
			lo, hi := re.Rune[i], re.Rune[i+1]
			if hi >= utf8.RuneSelf {
				for b := 0x80; b < 256; b++ {
					c[b] = true
				}
				hi = utf8.RuneSelf - 1
			}
			for r := lo; r <= hi; r++ {
				c[r] = true
			}
		}
		return reqs{pure: true, class: c, n: 1}
	case syntax.OpAnyCharNotNL:
		c := new([256]bool)
		for b := range c {
			c[b] = b != '\n'
		}
		return reqs{pure: true, class: c, n: 1}
	case syntax.OpAnyChar:
		c := new([256]bool)
		for b := range c {
			c[b] = true
		}
		return reqs{pure: true, class: c, n: 1}
	case syntax.OpCapture:
		return runReqs(re.Sub[0])
	case syntax.OpStar, syntax.OpQuest, syntax.OpPlus, syntax.OpRepeat:
		sub := runReqs(re.Sub[0])
		lo := 0
		switch re.Op {
		case syntax.OpPlus:
			lo = 1
		case syntax.OpRepeat:
			lo = re.Min
		}
		var alts []runReq
		if lo > 0 {
			alts = sub.alts // every match holds at least one match of sub
		}
		if sub.pure {
			return reqs{pure: true, class: sub.class, n: sub.n * lo, alts: alts}
		}
		return reqs{alts: alts}
	case syntax.OpConcat:
		subs := make([]reqs, len(re.Sub))
		var best []runReq
		allPure := true
		for i, s := range re.Sub {
			subs[i] = runReqs(s)
			best = moreSelective(best, subs[i].best())
			allPure = allPure && subs[i].pure
		}
		// Every stretch of pure nodes in a row is a run of their union.
		for i := range subs {
			if !subs[i].pure {
				continue
			}
			c, n := subs[i].class, subs[i].n
			for j := i + 1; j < len(subs) && subs[j].pure; j++ {
				c, n = unionClass(c, subs[j].class), n+subs[j].n
				if n > 0 {
					best = moreSelective(best, []runReq{{class: c, n: n}})
				}
			}
		}
		if allPure && len(subs) > 0 {
			c, n := subs[0].class, subs[0].n
			for _, s := range subs[1:] {
				c, n = unionClass(c, s.class), n+s.n
			}
			return reqs{pure: true, class: c, n: n, alts: best}
		}
		return reqs{alts: best}
	case syntax.OpAlternate:
		subs := make([]reqs, len(re.Sub))
		allPure := len(re.Sub) > 0
		var alts []runReq
		known := true
		for i, s := range re.Sub {
			subs[i] = runReqs(s)
			allPure = allPure && subs[i].pure
			b := subs[i].best()
			if len(b) == 0 {
				known = false
			}
			alts = append(alts, b...)
		}
		if !known {
			alts = nil
		}
		if allPure {
			c, n := subs[0].class, subs[0].n
			for _, s := range subs[1:] {
				c, n = unionClass(c, s.class), min(n, s.n)
			}
			return reqs{pure: true, class: c, n: n, alts: alts}
		}
		return reqs{alts: alts}
	default:
		return reqs{}
	}
}

// addRune adds the bytes of r to c (both ASCII cases with fold; every
// byte from 0x80 up for a rune outside ASCII, or a letter whose case
// folding may reach outside ASCII, as k and s do).
func addRune(c *[256]bool, r rune, fold bool) {
	if r >= utf8.RuneSelf {
		for b := 0x80; b < 256; b++ {
			c[b] = true
		}
		return
	}
	c[r] = true
	if fold {
		if 'a' <= r && r <= 'z' {
			c[r-'a'+'A'] = true
		} else if 'A' <= r && r <= 'Z' {
			c[r-'A'+'a'] = true
		}
		if r == 'k' || r == 'K' || r == 's' || r == 'S' {
			for b := 0x80; b < 256; b++ {
				c[b] = true
			}
		}
	}
}
