package secrets

import (
	"strings"

	"github.com/zricethezav/gitleaks/v8/config"
	"github.com/zricethezav/gitleaks/v8/report"
)

// kwMatcher finds every occurrence of a set of byte strings in a text
// (Aho-Corasick), as a DFA over byte classes: the bytes that occur in no
// pattern share one class, and a state's transitions take one int32 per
// class. gitleaks' trie (github.com/BobuSumisu/aho-corasick) keeps 256
// int64 transitions per state, 2 KB a state: the default rules' keywords
// took 2.6 MB there and the 1,446 stop words of generic-api-key 8.7 MB,
// held for as long as the process runs. Here they take about a tenth of
// that, and a byte costs one lookup, without walking failure links.
type kwMatcher struct {
	class  [256]uint8
	nclass int
	// next is the transition table: next[s+class] for the state s, where
	// states are numbered in steps of nclass (state i is i*nclass). An
	// entry is the next state, or -(state)-1 when a pattern ends in the
	// next state (or its suffix chain): a byte costs one load and a
	// branch when nothing matches.
	next []int32
	// emit is, for a state index, the first state of its suffix chain
	// (itself included) where a pattern ends, or -1.
	emit []int32
	out  []int32 // state index → the pattern ending exactly there, or -1
	link []int32 // state index → the next state of its suffix chain where a pattern ends, or -1
	plen []int32 // pattern → its length

	// For eachStart (matchers built by newKwMatcherFold only): tri is a
	// bit set of the hashes (triHash) of the first three bytes of the
	// patterns, folded (foldByte); a pattern of one or two bytes sets
	// those bytes followed by any. grow is the trie's own transitions,
	// without the failure links: grow[s+class] is the next state (numbered
	// as in next) times two, plus one when a pattern ends there, or -1
	// where no pattern continues.
	tri  *[1 << 16 / 64]uint64
	grow []int32
}

// newKwMatcher builds the matcher of pats; pattern i is reported as i.
// Empty patterns never match (as in gitleaks' trie); a repeated pattern is
// reported under its first index.
func newKwMatcher(pats []string) *kwMatcher { return buildKwMatcher(pats, false) }

// newKwMatcherFold builds a matcher that ignores ASCII case: it finds in
// a text what newKwMatcher of the lowered patterns finds in the lowered
// text (asciiLower), without lowering the text.
func newKwMatcherFold(pats []string) *kwMatcher {
	low := make([]string, len(pats))
	for i, p := range pats {
		low[i] = string(asciiLower(p))
	}
	return buildKwMatcher(low, true)
}

func buildKwMatcher(pats []string, fold bool) *kwMatcher {
	m := &kwMatcher{plen: make([]int32, len(pats))}
	for _, p := range pats {
		for i := 0; i < len(p); i++ {
			if m.class[p[i]] == 0 {
				m.nclass++
				m.class[p[i]] = uint8(m.nclass)
			}
		}
	}
	m.nclass++ // class 0: bytes of no pattern
	if m.nclass > 256 {
		// Every byte value occurs in a pattern: 255 classes plus the
		// unused class 0 do not fit a uint8, so classes are the bytes.
		m.nclass = 256
		for c := range m.class {
			m.class[c] = uint8(c)
		}
	}
	nc := m.nclass
	newState := func() int32 {
		s := int32(len(m.out))
		for range nc {
			m.next = append(m.next, -1)
		}
		m.out = append(m.out, -1)
		return s
	}
	newState() // the root, 0
	for i, p := range pats {
		m.plen[i] = int32(len(p))
		if p == "" {
			continue
		}
		s := int32(0)
		for j := 0; j < len(p); j++ {
			k := int(s)*nc + int(m.class[p[j]])
			if m.next[k] < 0 {
				t := newState()
				m.next[k] = t
			}
			s = m.next[k]
		}
		if m.out[s] < 0 {
			m.out[s] = int32(i)
		}
	}
	if fold {
		m.buildStarts(pats)
	}
	n := len(m.out)
	fail := make([]int32, n)
	m.link = make([]int32, n)
	m.emit = make([]int32, n)
	m.link[0], m.emit[0] = -1, -1
	queue := make([]int32, 0, n)
	for c := range nc {
		if t := m.next[c]; t < 0 {
			m.next[c] = 0
		} else {
			fail[t] = 0
			queue = append(queue, t)
		}
	}
	for len(queue) > 0 {
		s := queue[0]
		queue = queue[1:]
		f := fail[s]
		if m.out[f] >= 0 {
			m.link[s] = f
		} else {
			m.link[s] = m.link[f]
		}
		if m.out[s] >= 0 {
			m.emit[s] = s
		} else {
			m.emit[s] = m.link[s]
		}
		for c := range nc {
			k := int(s)*nc + c
			if t := m.next[k]; t < 0 {
				m.next[k] = m.next[int(f)*nc+c]
			} else {
				fail[t] = m.next[int(f)*nc+c]
				queue = append(queue, t)
			}
		}
	}
	for k, t := range m.next {
		v := t * int32(nc)
		if m.emit[t] >= 0 {
			v = -v - 1
		}
		m.next[k] = v
	}
	if fold {
		for c := 'A'; c <= 'Z'; c++ {
			m.class[c] = m.class[c-'A'+'a']
		}
	}
	return m
}

// walk calls fn for every occurrence of a pattern in text, in the order of
// their ends; at one end, the longest pattern first. fn gets the offset of
// the occurrence's last byte, its length and the pattern's index; walk
// stops when fn returns false.
func (m *kwMatcher) walk(text string, fn func(end, n, pattern int) bool) {
	s, nc := int32(0), int32(m.nclass)
	next := m.next
	for i := 0; i < len(text); i++ {
		v := next[int(s)+int(m.class[text[i]])]
		if v >= 0 {
			s = v
			continue
		}
		s = -v - 1
		for u := m.emit[s/nc]; u >= 0; u = m.link[u] {
			p := m.out[u]
			if !fn(i, int(m.plen[p]), int(p)) {
				return
			}
		}
	}
}

// buildStarts builds tri and grow from the trie (m.next before failure
// links are added) of the lowered patterns pats.
func (m *kwMatcher) buildStarts(pats []string) {
	nc := int32(m.nclass)
	m.grow = make([]int32, len(m.next))
	for k, t := range m.next {
		switch {
		case t < 0:
			m.grow[k] = -1
		case m.out[t] >= 0:
			m.grow[k] = t*nc*2 + 1
		default:
			m.grow[k] = t * nc * 2
		}
	}
	m.tri = new([1 << 16 / 64]uint64)
	set := func(a, b, c byte) {
		h := triHash(uint32(foldByte(a))<<16 | uint32(foldByte(b))<<8 | uint32(foldByte(c)))
		m.tri[h/64] |= 1 << (h % 64)
	}
	for _, p := range pats {
		switch len(p) {
		case 0:
		case 1:
			for b := range 256 {
				for c := range 256 {
					set(p[0], byte(b), byte(c))
				}
			}
		case 2:
			for c := range 256 {
				set(p[0], p[1], byte(c))
			}
		default:
			set(p[0], p[1], p[2])
		}
	}
}

// foldByte maps the two cases of an ASCII letter to one byte (and other
// bytes to some byte: only equal bytes, and letters equal but for case,
// must fold alike).
func foldByte(c byte) byte { return c | 0x20 }

// triHash hashes three folded bytes (the first one highest) to 16 bits.
func triHash(k uint32) uint32 { return k * 0x9e3779b1 >> 16 }

// eachStart calls fn for every occurrence of a pattern in text that
// starts in text[lo:hi] (and may end past hi), in the order of their
// starts; at one start, the shortest pattern first. fn gets the
// occurrence's start, its length and the pattern's index. It finds what
// walk finds (ignoring ASCII case: only a matcher of newKwMatcherFold has
// it), but tests every place against a bit set of the first three bytes
// of the patterns, which needs no state from one byte to the next (walk's
// next state depends on the last), and follows the trie only from the few
// places that pass: on real text that costs a fraction of walk.
func (m *kwMatcher) eachStart(text string, lo, hi int, fn func(start, n, pattern int)) {
	hi = min(hi, len(text))
	lo = max(lo, 0)
	if lo >= hi {
		return
	}
	last := min(hi, len(text)-2) // places with two bytes after them
	tri := m.tri
	p := lo
	if p < last {
		k := uint32(foldByte(text[p]))<<8 | uint32(foldByte(text[p+1]))
		for ; p < last; p++ {
			k = (k<<8 | uint32(foldByte(text[p+2]))) & 0xffffff
			if h := triHash(k); tri[h/64]&(1<<(h%64)) == 0 {
				continue
			}
			m.from(text, p, fn)
		}
	}
	for ; p < hi; p++ {
		m.from(text, p, fn)
	}
}

// from reports the patterns that start at text[p], following the trie.
func (m *kwMatcher) from(text string, p int, fn func(start, n, pattern int)) {
	s := int32(0)
	for i := p; i < len(text); i++ {
		v := m.grow[int(s)+int(m.class[text[i]])]
		if v < 0 {
			return
		}
		s = v >> 1
		if v&1 != 0 {
			fn(p, i-p+1, int(m.out[s/int32(m.nclass)]))
		}
	}
}

// contains reports whether some pattern occurs in s.
func (m *kwMatcher) contains(s string) bool {
	st := int32(0)
	for i := 0; i < len(s); i++ {
		st = m.next[int(st)+int(m.class[s[i]])]
		if st < 0 {
			return true
		}
	}
	return false
}

// stopWords holds the stop words of the rules' allowlists that the engine
// checks itself: see splitStopWords.
type stopWords map[string][]*kwMatcher // rule id → one matcher per allowlist

// allowed reports whether f's secret contains a stop word of its rule, as
// gitleaks' Allowlist.ContainsStopWord tests it.
func (sw stopWords) allowed(f *report.Finding) bool {
	ms := sw[f.RuleID]
	if len(ms) == 0 || f.Secret == "" {
		return false
	}
	s := strings.ToLower(f.Secret)
	for _, m := range ms {
		if m.contains(s) {
			return true
		}
	}
	return false
}

// splitStopWords takes the stop words out of cfg's rule allowlists and
// returns them as matchers, to be checked on the detectors' findings
// (stopWords.allowed): gitleaks builds a trie of 2 KB a state for every
// allowlist's stop words (8.7 MB for generic-api-key's), and a Detector
// only reads them through that trie. Only allowlists whose condition is OR
// are split, where "allowed" is "some regex matches or the secret holds a
// stop word", so that dropping a finding afterwards when its secret holds
// one is the same test; the allowlists of a rule that another rule
// requires stay whole (a required rule's findings are checked inside the
// Detector). cfg's rules are replaced, not changed: the allowlists given
// are shared with the caller.
func splitStopWords(cfg *config.Config) (stopWords, error) {
	required := map[string]bool{}
	for _, r := range cfg.Rules {
		for _, req := range r.RequiredRules {
			required[req.RuleID] = true
		}
	}
	sw := stopWords{}
	rules := make(map[string]config.Rule, len(cfg.Rules))
	for id, r := range cfg.Rules {
		rules[id] = r
		if required[id] {
			continue
		}
		var split bool
		for _, a := range r.Allowlists {
			if a != nil && len(a.StopWords) > 0 && a.MatchCondition == config.AllowlistMatchOr {
				split = true
			}
		}
		if !split {
			continue
		}
		var lists []*config.Allowlist
		for _, a := range r.Allowlists {
			if a == nil || len(a.StopWords) == 0 || a.MatchCondition != config.AllowlistMatchOr {
				lists = append(lists, a)
				continue
			}
			words := make([]string, len(a.StopWords))
			for i, w := range a.StopWords {
				words[i] = strings.ToLower(w)
			}
			sw[id] = append(sw[id], newKwMatcher(words))
			if len(a.Commits) == 0 && len(a.Paths) == 0 && len(a.Regexes) == 0 {
				continue // stop words only: nothing left for gitleaks to check
			}
			na := &config.Allowlist{
				Description:    a.Description,
				MatchCondition: a.MatchCondition,
				Commits:        a.Commits,
				Paths:          a.Paths,
				RegexTarget:    a.RegexTarget,
				Regexes:        a.Regexes,
			}
			if err := na.Validate(); err != nil {
				return nil, err
			}
			lists = append(lists, na)
		}
		r.Allowlists = lists
		rules[id] = r
	}
	cfg.Rules = rules
	return sw, nil
}
