package secrets

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"regexp"
	"regexp/syntax"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
	"unsafe"

	"github.com/zricethezav/gitleaks/v8/config"
	"github.com/zricethezav/gitleaks/v8/detect"
	glregexp "github.com/zricethezav/gitleaks/v8/regexp"
	"github.com/zricethezav/gitleaks/v8/report"
)

// found is one secret located in a scanned text, in byte offsets of that
// text.
type found struct {
	start, end int
	rule       string
	// secret is the secret as it appears in the text, used to redact its
	// other occurrences; empty when the finding came from a decoded segment.
	secret string
}

// engine finds secrets in text with gitleaks' rules and gitleaks' detector.
//
// gitleaks' Detector runs every rule whose keyword occurs anywhere in a
// fragment over the whole fragment. On real tool output (source code,
// logs) keywords such as "key", "api", "token", "ey" or "s." occur in
// nearly every fragment, so nearly every regex runs over every byte, and
// on Go's regexp engine that is a few MB/s. The engine keeps gitleaks'
// rules, allowlists, entropy checks and decoding, but gives each rule a
// detector of its own and runs it only over windows around the places
// where one of its keywords occurs. A rule falls in one of three kinds,
// from its regex:
//
//   - bounded: the longest match is known (at most maxBoundedLen bytes);
//     the window reaches that far on both sides of the keyword, cut to the
//     lines a match can span.
//   - stretched: matches are unbounded, but only through runs of some
//     bytes (a JWT through base64url characters and dots, a generic key's
//     value through [a-z0-9+/]). The window is pad bytes around the
//     keyword (cut to the lines a match can span), then stretched on both
//     sides to the end of the run of such bytes it ends in: a token of any
//     length is scanned whole.
//   - whole: a match can run through any byte (a PEM private key's body is
//     [\s\S]*?). When its keyword occurs, the rule runs over the whole
//     text, as gitleaks does.
//
// The difference from gitleaks' own semantics: a match that contains none
// of its rule's keywords and lies farther from every keyword than its
// window reaches is not reported. gitleaks' keywords are written to be
// part of the match, so in practice nothing is lost; the differential
// tests (TestEngineMatchesGitleaks, FuzzScrubDifferential) check the two
// agree.
//
// A text can be scanned in pieces: find reports the secrets whose keyword
// (or encoded segment) starts in text[lo:hi], with windows free to reach
// outside the piece, so that pieces need no overlap and a secret of any
// length across a piece border is found whole.
//
// Encoded segments (base64, hex, percent, unicode escapes) are handled by
// gitleaks' own decoder (Detector.MaxDecodeDepth), run with every rule over
// windows around segments that decode to printable text.
//
// An engine is immutable after construction and safe for concurrent use:
// gitleaks' Detector.DetectContext only reads the detector's configuration
// and keyword trie, and counts bytes atomically.
type engine struct {
	full  *detect.Detector
	rules []ruleScanner
	trie  *kwMatcher
	byKw  [][]int // keyword (trie pattern index) → rule indices
	// stops are the stop words taken out of the rules' allowlists, checked
	// on the detectors' findings (splitStopWords).
	stops  stopWords
	always []int // rules with a regex and no usable keyword
	pad    int
	// loud[a][b] is true when some stretched rule can stretch over the
	// two bytes a, b in a row; a piece border between two such bytes
	// would make both pieces scan the run. See splitPoint.
	loud *[256][256]bool
	// onWindow, when set (tests only), is called with the rule index and
	// length of every window a rule is run over: the work of a scan is
	// checked through it. It must be safe for concurrent use.
	onWindow func(rule, n int)
}

// ruleScanner is one rule with its own detector. A rule whose keywords
// the engine finds itself gets a detector without keywords (gitleaks then
// runs the rule over every window it is given, where a keyword of the rule
// always is), so that it holds no keyword trie of its own: 2 KB a keyword
// byte in gitleaks' trie, 5 MB over the default rules.
type ruleScanner struct {
	id     string
	det    *detect.Detector
	maxLen int // longest match in bytes; -1 when unbounded
	maxNL  int // most newlines one match can hold; -1 when unbounded
	// reach holds the bytes an unbounded match can run through beyond its
	// window (stretched rules); nil for bounded and whole rules.
	reach *[256]bool
	whole bool
	// filter, when set, is a condition every window the rule's regex
	// matches in meets; windows that fail it are not handed to gitleaks.
	filter *runFilter
	// re, when set, is the rule's regex, and det holds that rule alone:
	// a window it does not match is not handed to gitleaks, whose
	// detector would find nothing there but costs more per call (it
	// lowers and walks the window for keywords first).
	re *glregexp.Regexp
	// lead, for a whole rule every match of which starts with a literal
	// that starts with one of its keywords (curl-auth-user's "curl",
	// private-key's "-----BEGIN"), is that literal (lowered when the
	// regex ignores its case, fold); anchored and anchoredAfter are the
	// regex anchored at the start of the text and after one byte (the
	// byte before, for \b). Such a rule runs over the whole text only
	// from the first place its regex matches at, tested place by place
	// (see findWhole).
	lead                   string
	fold                   bool
	anchored, anchoredNext *regexp.Regexp
}

func (rs *ruleScanner) bounded() bool { return rs.maxLen >= 0 && rs.maxLen <= maxBoundedLen }

// decodeDepth is how many nested encodings gitleaks' decoder unwraps.
const decodeDepth = 3

// maxBoundedLen is the longest computed match length for which a rule is
// windowed by length; longer rules are stretched.
const maxBoundedLen = 2048

// maxWindowLines caps the lines around a keyword that a rule with
// unbounded match length but a bounded number of newlines is run over
// before stretching. gitleaks' generic rules allow up to nine newlines
// between a key and its value (runs of \s on both sides of the "="); real
// assignments put them on one line, or two, and scanning nine lines around
// every "key" or "token" of a source file costs more than half of the scan.
const maxWindowLines = 2

// snapLimit bounds how far a window edge moves to reach a word boundary.
const snapLimit = 256

// stretchTail is added past a stretched window's end for the match's
// terminator (a quote, a newline, an escaped \n).
const stretchTail = 16

func newEngine(cfg config.Config, pad int) (*engine, error) {
	e := &engine{pad: pad}
	stops, err := splitStopWords(&cfg)
	if err != nil {
		return nil, err
	}
	e.stops = stops
	e.full = detect.NewDetector(cfg)
	e.full.MaxDecodeDepth = decodeDepth
	e.full.IgnoreGitleaksAllow = true

	kwIndex := map[string]int{}
	var kws []string
	for _, id := range cfg.OrderedRules {
		r := cfg.Rules[id]
		if r.Regex == nil {
			continue // path-only rules never match content
		}
		usable := len(r.Keywords) > 0
		for _, k := range r.Keywords {
			if k == "" || !isASCII(k) {
				usable = false
			}
		}
		sub := config.Config{
			Rules:        map[string]config.Rule{id: r},
			Keywords:     map[string]struct{}{},
			OrderedRules: []string{id},
			Allowlists:   cfg.Allowlists,
		}
		if usable && len(r.RequiredRules) == 0 {
			// Run only over windows around its keywords (or over the
			// whole text when one occurs in it): gitleaks' keyword
			// test would always pass.
			bare := r
			bare.Keywords = nil
			sub.Rules[id] = bare
		} else {
			for _, k := range r.Keywords {
				sub.Keywords[k] = struct{}{}
			}
		}
		for _, req := range r.RequiredRules {
			rr, ok := cfg.Rules[req.RuleID]
			if !ok {
				return nil, fmt.Errorf("rule %q requires rule %q, which does not exist", id, req.RuleID)
			}
			sub.Rules[req.RuleID] = rr
			sub.OrderedRules = append(sub.OrderedRules, req.RuleID)
			for _, k := range rr.Keywords {
				sub.Keywords[k] = struct{}{}
			}
		}
		det := detect.NewDetector(sub)
		det.IgnoreGitleaksAllow = true
		rs := ruleScanner{id: id, det: det, maxLen: -1, maxNL: -1, whole: true}
		if re, err := syntax.Parse(r.Regex.String(), syntax.Perl); err == nil {
			re = re.Simplify()
			if len(r.RequiredRules) == 0 {
				rs.maxLen = maxMatchLen(re)
				rs.maxNL = maxMatchNewlines(re)
			}
			if len(r.RequiredRules) == 0 {
				// The rule's detector holds this rule alone (a rule with
				// required rules reports those rules' findings too).
				if raw, err := syntax.Parse(r.Regex.String(), syntax.Perl); err == nil {
					rs.filter = newRunFilter(raw)
				}
				rs.re = r.Regex
			}
			if !rs.bounded() {
				var reach [256]bool
				addReach(&reach, re, false)
				if slices.Contains(reach[:], false) {
					rs.reach, rs.whole = &reach, false
				}
			} else {
				rs.whole = false
			}
			if rs.whole && rs.re != nil {
				rs.anchorAtKeywords(re, r.Regex.String(), r.Keywords)
			}
		}
		// A regex Go's parser cannot read stays unbounded and whole.
		idx := len(e.rules)
		e.rules = append(e.rules, rs)

		if !usable {
			e.always = append(e.always, idx)
			continue
		}
		for _, k := range r.Keywords {
			// The text is matched ignoring ASCII case, as gitleaks
			// matches its lowered keywords in the lowered text.
			k = string(asciiLower(k))
			ki, ok := kwIndex[k]
			if !ok {
				ki = len(kws)
				kwIndex[k] = ki
				kws = append(kws, k)
				e.byKw = append(e.byKw, nil)
			}
			if !slices.Contains(e.byKw[ki], idx) {
				e.byKw[ki] = append(e.byKw[ki], idx)
			}
		}
	}
	e.trie = newKwMatcherFold(kws)
	e.loud = new([256][256]bool)
	for _, rs := range e.rules {
		if rs.reach == nil {
			continue
		}
		for a := range 256 {
			if !rs.reach[a] {
				continue
			}
			for b := range 256 {
				if rs.reach[b] {
					e.loud[a][b] = true
				}
			}
		}
	}
	return e, nil
}

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

// findAll returns the secrets of the whole text.
func (e *engine) findAll(ctx context.Context, text string) ([]found, error) {
	fs, _, err := e.find(ctx, text, newlines(text, nil), 0, len(text))
	return fs, err
}

// find returns the secrets of text found from the keywords (and encoded
// segments) that start in text[lo:hi]; nls are the offsets of text's
// newlines. Windows reach outside [lo, hi) as far as a match can. When
// [lo, hi) is not the whole text, whole rules whose keyword occurs are not
// run but returned (rule indices) for the caller to run once over the
// whole text with findWhole. It returns ctx's error when ctx ends before
// the scan does; the findings are then incomplete.
func (e *engine) find(ctx context.Context, text string, nls []int, lo, hi int) ([]found, []int, error) {
	n := len(text)
	lo, hi = max(lo, 0), min(hi, n)
	if lo >= hi {
		return nil, nil, nil
	}
	all := lo == 0 && hi == n
	// The keywords' places, by rule: (rule, place) pairs, sorted by rule
	// below (stably: each rule's places stay in the order found).
	hits := make([]kwHit, 0, 64)
	e.trie.eachStart(text, lo, hi, func(p, _, pattern int) {
		for _, ri := range e.byKw[pattern] {
			hits = append(hits, kwHit{rule: ri, pos: p})
		}
	})
	var out []found
	var whole []int
	for _, ri := range e.always {
		hits = append(hits, kwHit{rule: ri, pos: -1}) // the whole piece
	}
	slices.SortStableFunc(hits, func(a, b kwHit) int { return a.rule - b.rule })
	var h []int
	for i := 0; i < len(hits); {
		ri := hits[i].rule
		h = h[:0]
		for ; i < len(hits) && hits[i].rule == ri; i++ {
			if p := hits[i].pos; len(h) == 0 || h[len(h)-1] != p {
				h = append(h, p)
			}
		}
		rs := &e.rules[ri]
		var wins [][2]int
		switch {
		case rs.whole && all:
			fs, err := e.findWhole(ctx, text, ri)
			if err != nil {
				return nil, nil, err
			}
			out = append(out, fs...)
			continue
		case rs.whole:
			whole = append(whole, ri)
			continue
		case h[0] == -1:
			wins = e.pieceWindow(rs, text, lo, hi)
		default:
			wins = e.windows(rs, h, text, nls)
		}
		for _, w := range wins {
			if rs.filter != nil && !rs.filter.pass(text[w[0]:w[1]]) {
				continue
			}
			if e.onWindow != nil {
				e.onWindow(ri, w[1]-w[0])
			}
			win := windowText(text, w)
			// Over windows of every size: the windows of a rule
			// merge where its keywords are dense (code and JSON
			// full of "key" and "token"), and those of kilobytes
			// seldom match either: on 3 MB of the bench's mixed
			// text, gitleaks got 100 windows of generic-api-key
			// over 2 KB (6.9 KB on average) without this test,
			// and 32 windows of any size with it.
			if rs.re != nil && !rs.re.MatchString(win) {
				continue
			}
			fs, err := detectIn(ctx, rs.det, e.stops, win, w, false)
			if err != nil {
				return nil, nil, err
			}
			out = append(out, fs...)
		}
	}
	for _, w := range encodedWindows(text, nls, lo, hi) {
		fs, err := detectWindow(ctx, e.full, e.stops, text, w, true)
		if err != nil {
			return nil, nil, err
		}
		out = append(out, fs...)
	}
	return out, whole, ctx.Err()
}

// kwHit is a keyword of rule found at pos (-1: a rule without keywords,
// run over the whole piece).
type kwHit struct{ rule, pos int }

// findWhole runs rule ri over the whole text, as gitleaks does. A rule
// whose matches all start with its leading literal (lead) is run from the
// first place where the literal starts a match, tested at each place it
// occurs with the regex anchored there: most texts that hold "curl" hold
// no curl command with a password, and this rule's regex is the slowest
// of all over a whole text (about 90 MB/s, and gitleaks' detector adds
// as much again). Any other rule's detector runs only when its regex
// matches in the text.
func (e *engine) findWhole(ctx context.Context, text string, ri int) ([]found, error) {
	rs := &e.rules[ri]
	start := 0
	if rs.anchored != nil {
		q := rs.firstMatchAt(text)
		if q < 0 {
			return nil, ctx.Err()
		}
		start = max(q-1, 0) // with the byte before, for a \b there
	}
	win := text[start:]
	if f := rs.filter; f != nil && !f.pass(win) {
		return nil, ctx.Err()
	}
	if rs.anchored == nil && rs.re != nil && !rs.re.MatchString(win) {
		return nil, ctx.Err() // the rule's detector would find nothing
	}
	if e.onWindow != nil {
		e.onWindow(ri, len(win))
	}
	return detectWindow(ctx, rs.det, e.stops, text, [2]int{start, len(text)}, false)
}

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

// pieceWindow is the window of a rule without keywords for the piece
// text[lo:hi]: the piece, widened by the longest match, or by pad and
// stretched.
func (e *engine) pieceWindow(rs *ruleScanner, text string, lo, hi int) [][2]int {
	n := len(text)
	if rs.bounded() {
		return [][2]int{{max(lo-rs.maxLen, 0), min(hi+rs.maxLen+64, n)}}
	}
	a, b := max(lo-e.pad, 0), min(hi+e.pad, n)
	var st stretcher
	a, b = st.stretch(rs.reach, text, a, b)
	return [][2]int{{a, b}}
}

// stretcher extends windows through runs of a rule's reach, remembering
// the last run it walked so that many keywords in one long run cost one
// walk, not one each.
type stretcher struct {
	fwdFrom, fwdTo int // text[fwdFrom:fwdTo] is all reach
	bwdFrom, bwdTo int // text[bwdFrom:bwdTo] is all reach
}

func (st *stretcher) stretch(reach *[256]bool, text string, a, b int) (int, int) {
	n := len(text)
	if st.bwdFrom < a && a <= st.bwdTo {
		a = st.bwdFrom
	}
	a0 := a
	for a > 0 && reach[text[a-1]] {
		a--
	}
	if a < a0 {
		st.bwdFrom, st.bwdTo = a, a0
	}
	if st.fwdFrom <= b && b < st.fwdTo {
		b = st.fwdTo
	}
	b0 := b
	for b < n && reach[text[b]] {
		b++
	}
	if b > b0 {
		st.fwdFrom, st.fwdTo = b0, b
	}
	return a, min(b+stretchTail, n)
}

// windows returns the merged windows of text that rule rs must scan, given
// the positions of its keywords.
func (e *engine) windows(rs *ruleScanner, hits []int, text string, nls []int) [][2]int {
	n := len(text)
	wins := make([][2]int, 0, len(hits))
	var st stretcher
	for _, p := range hits {
		a, b := p-e.pad, p+e.pad
		if rs.bounded() {
			a, b = p-rs.maxLen, p+rs.maxLen+64
		}
		if rs.maxNL >= 0 {
			// Intersect with the lines a match can reach.
			nl := min(rs.maxNL, maxWindowLines)
			li, _ := slices.BinarySearch(nls, p) // newlines before p
			a = max(a, lineStart(nls, li-nl))
			b = min(b, lineEnd(nls, li+nl, n))
		}
		a, b = max(a, 0), min(b, n)
		for i := 0; i < snapLimit && a > 0 && isWordByte(text[a-1]); i++ {
			a--
		}
		for i := 0; i < snapLimit && b < n && isWordByte(text[b]); i++ {
			b++
		}
		if rs.reach != nil {
			a, b = st.stretch(rs.reach, text, a, b)
		}
		wins = append(wins, [2]int{a, b})
	}
	slices.SortFunc(wins, func(x, y [2]int) int { return x[0] - y[0] })
	merged := wins[:1]
	total := 0
	for _, w := range wins[1:] {
		last := &merged[len(merged)-1]
		if w[0] <= last[1] {
			last[1] = max(last[1], w[1])
			continue
		}
		merged = append(merged, w)
	}
	for _, w := range merged {
		total += w[1] - w[0]
	}
	if span := merged[len(merged)-1][1] - merged[0][0]; len(merged) > 1 && total*4 >= span*3 {
		return [][2]int{{merged[0][0], merged[len(merged)-1][1]}}
	}
	return merged
}

// splitPoint returns the first offset at or after i (and before n) where
// text can be cut into pieces without cutting a run that a stretched rule
// could stretch over, or len(text) when there is none. Pieces cut there do
// not each walk and scan the same long run.
func (e *engine) splitPoint(text string, i int) int {
	for ; i < len(text); i++ {
		if i > 0 && !e.loud[text[i-1]][text[i]] && utf8.RuneStart(text[i]) {
			return i
		}
	}
	return len(text)
}

// detectWindow runs det over text[w[0]:w[1]] and returns its findings in
// offsets of text, without those whose secret holds one of stops. With
// decodedOnly, findings that were not made in a decoded segment are
// dropped (the rule windows report those).
func detectWindow(ctx context.Context, det *detect.Detector, stops stopWords, text string, w [2]int, decodedOnly bool) ([]found, error) {
	return detectIn(ctx, det, stops, windowText(text, w), w, decodedOnly)
}

// windowText is the text gitleaks is given for text[w[0]:w[1]]: the
// window with a newline at its end. A trailing newline makes gitleaks
// report the end line and column of every match, which the offsets of
// findings are computed from.
func windowText(text string, w [2]int) string {
	win := text[w[0]:w[1]]
	switch {
	case strings.HasSuffix(win, "\n"):
		return win
	case w[1] < len(text) && text[w[1]] == '\n':
		return text[w[0] : w[1]+1] // the same string, not copied
	default:
		return win + "\n"
	}
}

// detectIn is detectWindow given the window's text (windowText).
func detectIn(ctx context.Context, det *detect.Detector, stops stopWords, win string, w [2]int, decodedOnly bool) ([]found, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	fs := det.DetectContext(ctx, detect.Fragment{Raw: win})
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if len(fs) == 0 {
		return nil, nil
	}
	nls := newlines(win, nil)
	limit := w[1] - w[0]
	out := make([]found, 0, len(fs))
	for i := range fs {
		if stops.allowed(&fs[i]) {
			continue
		}
		f, ok := locate(win, nls, &fs[i])
		if !ok || (decodedOnly && f.secret != "") {
			continue
		}
		f.start, f.end = min(f.start, limit), min(f.end, limit)
		if f.start >= f.end {
			continue
		}
		f.start += w[0]
		f.end += w[0]
		out = append(out, f)
	}
	return out, nil
}

// locate turns a gitleaks finding into byte offsets of the fragment it was
// found in. gitleaks reports lines and columns only: line L starts after
// the L-th newline, columns count bytes from that newline (from 1 on the
// first line).
func locate(win string, nls []int, f *report.Finding) (found, bool) {
	ls := func(line int) int {
		switch {
		case line <= 0:
			return 0
		case line-1 < len(nls):
			return nls[line-1]
		default:
			return -1
		}
	}
	s0, e0 := ls(f.StartLine), ls(f.EndLine)
	if s0 < 0 || e0 < 0 {
		return found{}, false
	}
	start, end := s0+f.StartColumn-1, e0+f.EndColumn
	if start < 0 || start > len(win) {
		return found{}, false
	}
	end = min(max(end, start), len(win))
	out := found{rule: f.RuleID}
	decoded := false
	for _, t := range f.Tags {
		if strings.HasPrefix(t, "decoded:") {
			decoded = true
		}
	}
	m := f.Match
	if decoded {
		// Redact the whole encoded segment the match starts in. gitleaks
		// maps a decoded match back to the segment, but a match that runs
		// past the segment's end (a delimiter after the secret) is mapped
		// to a wrong end, sometimes before its start.
		for start > 0 && isEncodedByte(win[start-1]) {
			start--
		}
		e := start
		for e < len(win) && isEncodedByte(win[e]) {
			e++
		}
		out.start, out.end = start, max(end, e)
		return out, out.end > out.start
	}
	if m == "" {
		out.start, out.end = start, end
		return out, end > start
	}
	// gitleaks trims newlines off the match but not off its start offset.
	i := strings.Index(win[start:min(len(win), start+len(m)+16)], m)
	if i < 0 {
		out.start, out.end = start, end
		return out, end > start
	}
	out.start, out.end = start+i, start+i+len(m)
	if s := f.Secret; s != "" && s != m {
		if j := strings.Index(m, s); j >= 0 {
			out.start, out.end = out.start+j, out.start+j+len(s)
		}
	}
	out.secret = win[out.start:out.end]
	return out, true
}

// encodedWindows returns windows around segments of text that gitleaks'
// decoder would decode to printable text: base64 and hex runs, percent
// escapes and unicode escapes. It is a cheap prefilter; the decoding that
// counts is gitleaks'.
//
// Only segments that start in text[lo:hi] are reported (a segment running
// into lo belongs to the piece before); their windows reach outside.
//
// It returns the windows of this walk over text[lo:hi]: at a byte of a
// base64 run ([\w/+-]), the run from there (and up to two '=' after it)
// is a segment when it has at least 16 bytes and a byte of likelyB64, and
// the walk goes on after it; at a % followed by two hex digits, the line
// is a segment and the walk goes on three bytes on; at \u or \U with hex
// digits two and five bytes on, the six bytes are one and the walk goes
// on six bytes on; at any other byte, the walk goes on at the next. It
// does not look at every byte: % and \ are found with IndexByte, and
// between them a run of 16 base64 bytes is looked for by testing every
// 16th byte (see longB64Runs).
func encodedWindows(text string, nls []int, lo, hi int) [][2]int {
	const ctxBytes = 256
	var wins [][2]int
	add := func(a, b int) {
		a, b = max(a-ctxBytes, 0), min(b+ctxBytes, len(text))
		if n := len(wins); n > 0 && a <= wins[n-1][1] {
			wins[n-1][1] = max(wins[n-1][1], b)
			return
		}
		wins = append(wins, [2]int{a, b})
	}
	i := lo
	for i > 0 && i < len(text) && isB64Byte(text[i-1]) && isB64Byte(text[i]) {
		i++
	}
	pct, bs := -1, -1 // the next % and \ at or after i, once looked for
	for i < hi {
		if pct < i {
			pct = indexFrom(text, '%', i)
		}
		if bs < i {
			bs = indexFrom(text, '\\', i)
		}
		z := min(pct, bs) // the next % or \, which no run crosses
		if z < 0 {
			z = max(pct, bs)
		}
		if z < 0 {
			z = len(text)
		}
		if !longB64Runs(text, i, min(z, len(text)), hi, add) || z >= hi {
			return wins
		}
		i = z
		c := text[i]
		switch {
		case c == '%' && i+2 < len(text) && isHex(text[i+1]) && isHex(text[i+2]):
			li, _ := slices.BinarySearch(nls, i)
			add(lineStart(nls, li), lineEnd(nls, li, len(text)))
			i += 3
		case c == '\\' && i+5 < len(text) && (text[i+1] == 'u' || text[i+1] == 'U') && isHex(text[i+2]) && isHex(text[i+5]):
			add(i, i+6)
			i += 6
		default:
			i++
		}
	}
	return wins
}

// indexFrom returns the index of the first c in text at or after i, or -1.
func indexFrom(text string, c byte, i int) int {
	j := strings.IndexByte(text[i:], c)
	if j < 0 {
		return -1
	}
	return i + j
}

// longB64Runs calls add for the segments of encodedWindows that are base64
// runs starting in text[p:min(z, hi)]: p is where the walk is (a run may
// start there even when the byte before is base64 too), and z is the end
// of text or a byte that is not base64 (no run crosses it). It reports
// false when the walk ends before z: a segment reaches hi.
//
// A run of 16 bytes starting in text[p:p+16] holds text[p+15]; when that
// byte is not base64, no run of 16 starts there, and the walk skips 16
// bytes after a single test.
func longB64Runs(text string, p, z, hi int, add func(a, b int)) bool {
	for p < z && p < hi {
		q := p + 15
		if q >= z {
			return true
		}
		if encClass[text[q]]&encB64 == 0 {
			p = q + 1
			continue
		}
		a := q
		for a > p && encClass[text[a-1]]&encB64 != 0 {
			a--
		}
		if a >= hi {
			return false
		}
		j := q + 1
		for j < z && encClass[text[j]]&encB64 != 0 {
			j++
		}
		if j-a < 16 {
			p = j
			continue
		}
		var seen uint8
		for k := a; k < j; k++ {
			seen |= encClass[text[k]]
		}
		end := j
		for k := 0; k < 2 && end < len(text) && text[end] == '='; k++ {
			end++
		}
		if seen&encLikely != 0 && decodesPrintable(text[a:end]) {
			add(a, end)
		}
		if end >= hi {
			return false
		}
		p = end
	}
	return p < hi
}

// Classes of bytes for encodedWindows.
const (
	encB64    = 1 << iota // isB64Byte
	encLikely             // likelyB64
	encNotStd             // not in standard base64's alphabet: - _
	encNotURL             // not in URL base64's alphabet: + /
)

var encClass = func() (t [256]uint8) {
	for c := range 256 {
		b := byte(c)
		if isB64Byte(b) {
			t[c] |= encB64
		}
		if likelyB64(b) {
			t[c] |= encLikely
		}
		if b == '-' || b == '_' {
			t[c] |= encNotStd
		}
		if b == '+' || b == '/' {
			t[c] |= encNotURL
		}
	}
	return t
}()

// decodesPrintable reports whether s decodes, as base64 (standard or URL)
// or hex, to printable ASCII, as gitleaks' decoder requires. s is a run of
// base64 bytes ([\w/+-]) and up to two '='.
//
// It decodes into a buffer on its stack when the segment fits (most do),
// not into a new one a segment as DecodeString would.
func decodesPrintable(s string) bool {
	var buf [decodeBuf]byte
	src := unsafe.Slice(unsafe.StringData(s), len(s)) // only read
	if isHexString(strings.TrimRight(s, "=")) && len(s) >= 32 {
		dst := sized(buf[:], hex.DecodedLen(len(s)))
		if n, err := hex.Decode(dst, src); err == nil && printableASCII(dst[:n]) {
			return true
		}
	}
	// Decoding fails, without decoding being tried, where the alphabet
	// or the length rules it out: standard base64 is padded to a multiple
	// of four and has no - or _; raw URL base64 has no padding, no + or /,
	// and no length of 4k+1.
	var seen uint8
	for i := 0; i < len(s); i++ {
		seen |= encClass[s[i]]
	}
	if seen&encNotStd == 0 && len(s)%4 == 0 {
		dst := sized(buf[:], base64.StdEncoding.DecodedLen(len(s)))
		if n, err := base64.StdEncoding.Decode(dst, src); err == nil && printableASCII(dst[:n]) {
			return true
		}
	}
	if seen&encNotURL != 0 || strings.IndexByte(s, '=') >= 0 || len(s)%4 == 1 {
		return false
	}
	dst := sized(buf[:], base64.RawURLEncoding.DecodedLen(len(s)))
	n, err := base64.RawURLEncoding.Decode(dst, src)
	return err == nil && printableASCII(dst[:n])
}

// decodeBuf is the size of decodesPrintable's buffer: the decoded length
// of a segment of 512 bytes.
const decodeBuf = 384

// sized returns buf[:n], or a new slice of n bytes when buf is shorter.
func sized(buf []byte, n int) []byte {
	if n > len(buf) {
		return make([]byte, n)
	}
	return buf[:n]
}

// isEncodedByte reports whether c can be part of a segment gitleaks
// decodes (base64, hex, percent or unicode escapes).
func isEncodedByte(c byte) bool { return isB64Byte(c) || c == '=' || c == '%' || c == '\\' }

// maxMatchLen returns the most bytes a match of re can span, or -1 when
// unbounded.
func maxMatchLen(re *syntax.Regexp) int {
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
		return maxMatchLen(re.Sub[0])
	case syntax.OpStar, syntax.OpPlus:
		return -1
	case syntax.OpRepeat:
		if re.Max < 0 {
			return -1
		}
		m := maxMatchLen(re.Sub[0])
		if m < 0 {
			return -1
		}
		return m * re.Max
	case syntax.OpConcat, syntax.OpAlternate:
		t := 0
		for _, s := range re.Sub {
			m := maxMatchLen(s)
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

// maxMatchNewlines returns the most newlines a match of re can hold, or -1
// when unbounded.
func maxMatchNewlines(re *syntax.Regexp) int {
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
		return maxMatchNewlines(re.Sub[0])
	case syntax.OpStar, syntax.OpPlus:
		if maxMatchNewlines(re.Sub[0]) == 0 {
			return 0
		}
		return -1
	case syntax.OpRepeat:
		m := maxMatchNewlines(re.Sub[0])
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
			m := maxMatchNewlines(s)
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
