package secrets

import (
	"context"
	"fmt"
	"regexp"
	"regexp/syntax"
	"slices"

	"github.com/zricethezav/gitleaks/v8/config"
	"github.com/zricethezav/gitleaks/v8/detect"
	glregexp "github.com/zricethezav/gitleaks/v8/regexp"
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
				rs.maxLen, rs.maxNL = matchBounds(re)
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
	e.loud = loudPairs(e.rules)
	return e, nil
}

// loudPairs returns the pairs of bytes some stretched rule of rules can
// stretch over in a row (engine.loud).
func loudPairs(rules []ruleScanner) *[256][256]bool {
	loud := new([256][256]bool)
	for _, rs := range rules {
		if rs.reach == nil {
			continue
		}
		for a := range 256 {
			if !rs.reach[a] {
				continue
			}
			for b := range 256 {
				if rs.reach[b] {
					loud[a][b] = true
				}
			}
		}
	}
	return loud
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
