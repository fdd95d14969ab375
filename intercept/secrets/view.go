package secrets

import (
	"encoding/binary"
	"math/bits"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"
	"unsafe"

	"github.com/foldproxy/foldproxy/policy/jsonscan"
)

// A view is a text derived from the raw text by undoing one level of JSON
// string escaping (\n, \", \\, \uXXXX, ...), with a map back to the text
// it was derived from. Secrets inside escaped JSON — a tool result whose
// text is a JSON document, or text that embeds {\"token\": \"ghp_...\"} —
// are invisible to several gitleaks rules in their escaped form; they are
// scanned in the view, and what is found there is mapped back to the raw
// bytes it came from, so that the redaction covers the escaped form in the
// original (escape sequences are always redacted whole).
type view struct {
	text   string
	parent *view    // nil for the raw text
	esc    []escRec // decoded escapes, in order
	// nls are the offsets of text's newlines (newlines), found while
	// decoding; nil for the raw text.
	nls []int
	// bufs holds text, esc and nls when they came from viewPool; release
	// gives them back.
	bufs *viewBufs
}

// viewBufs are the buffers of a decoded view. A scan decodes every JSON
// text it scans (and again what that holds escaped); the buffers go back
// to viewPool once nothing refers to the view anymore (release): the
// deeper views when the scan ends, the first one when the count has read
// it (Decoded.release), rather than becoming garbage a call.
type viewBufs struct {
	buf []byte
	esc []escRec
	nls []int
}

var viewPool = sync.Pool{New: func() any { return new(viewBufs) }}

// release gives v's buffers back to viewPool. Nothing may use v, or a
// string or slice of it, afterwards. A view not from the pool (the raw
// text) is left alone.
func (v *view) release() {
	if v == nil || v.bufs == nil {
		return
	}
	b := v.bufs
	v.bufs, v.text, v.esc, v.nls = nil, "", nil, nil
	// Very large buffers are not kept: one 10 MB result would pin them.
	if cap(b.buf) > maxPooledView {
		b.buf = nil
	}
	if cap(b.esc) > maxPooledView/8 {
		b.esc = nil
	}
	if cap(b.nls) > maxPooledView/16 {
		b.nls = nil
	}
	viewPool.Put(b)
}

// put gives b, a buffer of viewPool that no view holds, back to it (b may
// be nil).
func (b *viewBufs) put() {
	if b == nil {
		return
	}
	if cap(b.buf) > maxPooledView {
		b.buf = nil
	}
	viewPool.Put(b)
}

// maxPooledView is the largest decoded text whose buffer goes back to
// viewPool: a result of a few MB is scanned with no new buffer (one of
// 1 MB decodes into 1 MB and more, with its escape records and newlines),
// and the pool keeps no buffer past two collections.
const maxPooledView = 4 << 20

// escRec records that text[dst:dst+dlen] was decoded from
// parent.text[src:src+slen]. It takes 12 bytes, not 32 (a JSON text holds
// an escape every few dozen bytes, and a record per escape was most of
// what a scan allocated): offsets fit 32 bits, as scan refuses a longer
// text (maxScanText), and lengths 8 bits, as an escape is at most 12
// bytes long.
type escRec struct {
	dst32, src32 uint32
	dlen8, slen8 uint8
}

// maxScanText is the longest text the scrubber scans (escRec's offsets).
const maxScanText = 1<<32 - 1

func newEsc(dst, dlen, src, slen int) escRec {
	return escRec{dst32: uint32(dst), src32: uint32(src), dlen8: uint8(dlen), slen8: uint8(slen)}
}

func (r escRec) dst() int  { return int(r.dst32) }
func (r escRec) src() int  { return int(r.src32) }
func (r escRec) dlen() int { return int(r.dlen8) }
func (r escRec) slen() int { return int(r.slen8) }

// unescapeView decodes one level of JSON string escapes in v.text. It
// reports false when v.text holds no escape sequence. With nls, the view
// lists the offsets of its newlines (the first view's, which the scan and
// the count use whole); a deeper view is only scanned around its escapes,
// whose windows find their own.
//
// The text is copied eight bytes at a time, each word tested for a
// backslash at once (JSON text holds an escape every few dozen bytes, a
// \n a line, and a copy call and a search call a stretch between two cost
// more than the bytes). The escapes are decoded by policy/jsonscan, the
// module's one JSON unescaper (the escapes of one character by its table,
// inline); this loop keeps the records that map the decoded text back to
// the raw one. A backslash that starts no JSON escape is kept as it is.
func unescapeView(v *view, withNLs bool) (*view, bool) {
	s := v.text
	i := strings.IndexByte(s, '\\')
	if i < 0 {
		return nil, false
	}
	// The decoded text is never longer than s (an escape decodes to fewer
	// bytes than it takes); eight more bytes let every word be stored
	// whole.
	bufs := viewPool.Get().(*viewBufs)
	buf := slices.Grow(bufs.buf[:0], len(s)+8)
	buf = buf[:cap(buf)]
	d := copy(buf, s[:i])
	// One record per escape: sized once (JSON text holds many \n).
	nesc := strings.Count(s[i:], `\`)
	recs := slices.Grow(bufs.esc[:0], nesc)
	// The newlines of the decoded text are listed on the way, those
	// before i first: most come from \n escapes, at most one an escape.
	var nls []int
	if withNLs {
		nls = slices.Grow(bufs.nls[:0], nesc+strings.Count(s, "\n"))
		for j := 0; j < i; j++ {
			if s[j] == '\n' {
				nls = append(nls, j)
			}
		}
	}
	for i < len(s) {
		if !withNLs {
			// Only the backslashes stop the copy: a deeper view holds
			// few (one every few KB of real output), found vectorized.
			j := strings.IndexByte(s[i:], '\\')
			if j < 0 {
				d += copy(buf[d:], s[i:])
				break
			}
			d += copy(buf[d:], s[i:i+j])
			i += j
		} else if i+8 <= len(s) {
			w := load64(s, i)
			binary.LittleEndian.PutUint64(buf[d:d+8], w)
			m := byteMask(w, '\\') | byteMask(w, '\n')
			if m == 0 {
				i, d = i+8, d+8
				continue
			}
			k := bits.TrailingZeros64(m) / 8 // the first backslash or newline
			i, d = i+k, d+k
		}
		switch s[i] {
		case '\n':
			buf[d] = '\n'
			if withNLs {
				nls = append(nls, d)
			}
			i, d = i+1, d+1
			continue
		case '\\':
		default:
			buf[d] = s[i]
			i, d = i+1, d+1
			continue
		}
		if i+1 < len(s) {
			if c := jsonscan.ShortEscape(s[i+1]); c != 0 {
				buf[d] = c
				if c == '\n' && withNLs {
					nls = append(nls, d)
				}
				recs = append(recs, newEsc(d, 1, i, 2))
				i, d = i+2, d+1
				continue
			}
		}
		// buf has room for what the escape decodes to (fewer bytes than
		// it takes in s): the append writes in place.
		out, n, ok := jsonscan.AppendEscape(buf[:d], s[i:])
		if !ok {
			buf[d] = '\\'
			i, d = i+1, d+1
			continue
		}
		dn := len(out) - d
		if dn == 1 && buf[d] == '\n' && withNLs {
			nls = append(nls, d)
		}
		recs = append(recs, newEsc(d, dn, i, n))
		i, d = i+n, d+dn
	}
	bufs.buf, bufs.esc = buf[:0], recs[:0]
	if withNLs {
		bufs.nls = nls[:0]
	}
	if len(recs) == 0 {
		viewPool.Put(bufs)
		return nil, false
	}
	return &view{text: unsafe.String(unsafe.SliceData(buf), d), parent: v, esc: recs, nls: nls, bufs: bufs}, true
}

// byteMask returns a word with the high bit set of each byte of w equal to
// c, exactly (no carry runs between bytes).
func byteMask(w uint64, c byte) uint64 {
	const ones, low7 = 0x0101010101010101, 0x7f7f7f7f7f7f7f7f
	x := w ^ (uint64(c) * ones)
	return ^((x&low7 + low7) | x) & (0x80 * ones)
}

// load64 returns the eight bytes of s at i as a little-endian word (one
// load).
func load64(s string, i int) uint64 {
	b := s[i : i+8]
	return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
		uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
}

// toParent maps the range [a, b) of v.text to the range of v.parent.text it
// was decoded from.
func (v *view) toParent(a, b int) (int, int) {
	pos := func(i int, end bool) int {
		k, _ := slices.BinarySearchFunc(v.esc, i, func(r escRec, i int) int {
			if r.dst()+r.dlen() <= i {
				return -1
			}
			if r.dst() > i {
				return 1
			}
			return 0
		})
		// k is the first record ending after i.
		if k < len(v.esc) && v.esc[k].dst() <= i {
			if end {
				return v.esc[k].src() + v.esc[k].slen()
			}
			return v.esc[k].src()
		}
		if k == 0 {
			if end {
				return i + 1
			}
			return i
		}
		r := v.esc[k-1]
		p := r.src() + r.slen() + (i - r.dst() - r.dlen())
		if end {
			return p + 1
		}
		return p
	}
	if b <= a {
		p := pos(a, false)
		return p, p
	}
	return pos(a, false), pos(b-1, true)
}

// toRoot maps [a, b) of v.text to the raw text.
func (v *view) toRoot(a, b int) (int, int) {
	for ; v.parent != nil; v = v.parent {
		a, b = v.toParent(a, b)
	}
	return a, b
}

// changedWindows returns merged windows of v.text around its decoded
// escapes, pad bytes on each side.
func (v *view) changedWindows(pad int) [][2]int {
	var wins [][2]int
	for _, r := range v.esc {
		a, b := max(r.dst()-pad, 0), min(r.dst()+r.dlen()+pad, len(v.text))
		if n := len(wins); n > 0 && a <= wins[n-1][1] {
			wins[n-1][1] = max(wins[n-1][1], b)
			continue
		}
		wins = append(wins, [2]int{a, b})
	}
	return wins
}

// mergeFound sorts spans and merges those that overlap. A merged span
// takes the rule of its longest part, preferring a specific rule over a
// generic one and then the smaller id, so that results are deterministic.
func mergeFound(fs []found) []found {
	if len(fs) == 0 {
		return nil
	}
	slices.SortFunc(fs, func(x, y found) int {
		if x.start != y.start {
			return x.start - y.start
		}
		return y.end - x.end
	})
	out := make([]found, 0, len(fs))
	cur, best := fs[0], fs[0]
	for _, f := range fs[1:] {
		if f.start < cur.end {
			cur.end = max(cur.end, f.end)
			if better(f, best) {
				best = f
			}
			continue
		}
		cur.rule = best.rule
		out = append(out, cur)
		cur, best = f, f
	}
	cur.rule = best.rule
	return append(out, cur)
}

func better(f, g found) bool {
	fl, gl := f.end-f.start, g.end-g.start
	if fl != gl {
		return fl > gl
	}
	fg, gg := strings.Contains(f.rule, "generic"), strings.Contains(g.rule, "generic")
	if fg != gg {
		return gg
	}
	return f.rule < g.rule
}

// maxTrieSecret is the longest secret sweep looks for with a trie.
const maxTrieSecret = 256

// sweep returns a span for every occurrence in text of a secret already
// found, so that a secret matched once in context is also removed where it
// appears bare. Secrets shorter than minSweep are not swept: they are too
// likely to occur by chance.
func sweep(text string, fs []found) []found {
	const minSweep = 8
	rules := map[string]string{}
	var secrets []string
	for _, f := range fs {
		if len(f.secret) < minSweep {
			continue
		}
		if _, ok := rules[f.secret]; !ok {
			rules[f.secret] = f.rule
			secrets = append(secrets, f.secret)
		}
	}
	if len(secrets) == 0 {
		return nil
	}
	var out []found
	// Long secrets (keys, JWTs of kilobytes) are looked for one by one: an
	// Aho-Corasick trie of them costs more to build than it saves.
	var short, long []string
	for _, s := range secrets {
		if len(s) > maxTrieSecret {
			long = append(long, s)
		} else {
			short = append(short, s)
		}
	}
	if len(short) <= 4 {
		long, short = append(long, short...), nil
	}
	for _, s := range long {
		for i := 0; ; {
			j := strings.Index(text[i:], s)
			if j < 0 {
				break
			}
			out = append(out, found{start: i + j, end: i + j + len(s), rule: rules[s]})
			i += j + len(s)
		}
	}
	if len(short) == 0 {
		return out
	}
	secrets = short
	newKwMatcher(secrets).walk(text, func(end, n, pattern int) bool {
		s := secrets[pattern]
		out = append(out, found{start: end - n + 1, end: end + 1, rule: rules[s]})
		return true
	})
	return out
}

// marker is the text a secret found by rule is replaced with. The rule id
// is reduced to characters that need no escaping in JSON or markdown.
func marker(rule string) string {
	b := make([]byte, 0, len(rule)+11)
	b = append(b, "[REDACTED:"...)
	for i := 0; i < len(rule); i++ {
		c := rule[i]
		if isWordByte(c) || c == '-' || c == '.' {
			b = append(b, c)
		} else {
			b = append(b, '_')
		}
	}
	return string(append(b, ']'))
}

// redact replaces the merged spans of text by markers and counts them by
// rule.
func redact(text string, spans []found) (string, map[string]int) {
	if len(spans) == 0 {
		return text, nil
	}
	counts := make(map[string]int)
	var b strings.Builder
	b.Grow(len(text))
	last := 0
	for _, f := range spans {
		b.WriteString(text[last:f.start])
		b.WriteString(marker(f.rule))
		counts[f.rule]++
		last = f.end
	}
	b.WriteString(text[last:])
	return b.String(), counts
}

// Small byte helpers.

func isWordByte(c byte) bool {
	return c == '_' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func isHexString(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isHex(s[i]) {
			return false
		}
	}
	return s != ""
}

// isB64Byte reports whether c is in gitleaks' base64 segment class
// [\w/+-].
func isB64Byte(c byte) bool { return isWordByte(c) || c == '/' || c == '+' || c == '-' }

// likelyB64 mirrors gitleaks' test that a segment is worth decoding: it
// holds a digit or one of +/-_.
func likelyB64(c byte) bool {
	return '0' <= c && c <= '9' || c == '+' || c == '/' || c == '-' || c == '_'
}

// printableASCII mirrors gitleaks' check on decoded segments.
func printableASCII(b []byte) bool {
	for _, c := range b {
		if c <= '\x08' || c >= '\x7f' {
			return false
		}
	}
	return true
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// asciiLower returns a copy of s with ASCII letters lowered, byte for
// byte, so that offsets into it are offsets into s (strings.ToLower may
// change lengths).
func asciiLower(s string) []byte {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return b
}

// newlines appends the offsets of the newlines in s to buf, which it
// allocates once, to size, when nil.
func newlines(s string, buf []int) []int {
	if buf == nil {
		n := strings.Count(s, "\n")
		if n == 0 {
			return nil
		}
		buf = make([]int, 0, n)
	}
	for i := 0; ; {
		j := strings.IndexByte(s[i:], '\n')
		if j < 0 {
			return buf
		}
		buf = append(buf, i+j)
		i += j + 1
	}
}

// lineStart returns the offset where line li starts (lines counted from 0).
func lineStart(nls []int, li int) int {
	if li <= 0 || len(nls) == 0 {
		return 0
	}
	return nls[min(li, len(nls))-1] + 1
}

// lineEnd returns the offset just past line li, its newline included.
func lineEnd(nls []int, li, n int) int {
	if li < 0 {
		li = 0
	}
	if li >= len(nls) {
		return n
	}
	return nls[li] + 1
}

// Decoded is a JSON text with its strings decoded, as the scrubber
// scanned it: the count of a result the scan left as it was reads its
// texts here instead of decoding them again (intercept/tokens reads it
// through its Decoded interface; the Tokens interceptor hands it on).
type Decoded struct {
	raw []byte // the JSON text
	// v is raw with one level of escaping undone (v.parent.text is raw,
	// or the scan's copy of it), or raw itself (v.parent is nil) when raw
	// holds no escape.
	v *view
	// own holds the scan's copy of raw, when it made one (a text scanned
	// on a goroutine of its own, see Scrubber.scanJSON).
	own *viewBufs
}

// Release gives back the buffers of d's decoded view (view.release): for
// the count to call once it has read d. Nothing may use d afterwards.
func (d *Decoded) Release() {
	if d != nil {
		d.v.release()
		d.own.put()
		d.v, d.raw, d.own = nil, nil, nil
	}
}

// Of reports whether d decodes raw: the same bytes at the same address, as
// the scrubber handed them on.
func (d *Decoded) Of(raw []byte) bool {
	return d != nil && len(raw) > 0 && len(d.raw) == len(raw) && unsafe.SliceData(d.raw) == unsafe.SliceData(raw)
}

// at maps offset p of raw, which must not fall inside an escape sequence,
// to its offset in d.v.text.
func (d *Decoded) at(p int) int {
	esc := d.v.esc
	// k is the number of escapes that start before p.
	k, _ := slices.BinarySearchFunc(esc, p, func(r escRec, p int) int {
		if r.src() < p {
			return -1
		}
		if r.src() > p {
			return 1
		}
		return 0
	})
	if k == 0 {
		return p
	}
	r := esc[k-1]
	return r.dst() + r.dlen() + p - (r.src() + r.slen())
}

// Text returns the decoded value of the JSON string whose literal, quotes
// included, is raw[start:end], and whether it is the value a JSON decoder
// gives: false when the decoded bytes are not valid UTF-8 (a decoder
// replaces them by U+FFFD).
func (d *Decoded) Text(start, end int) (string, bool) {
	if start < 0 || end > len(d.raw) || end-start < 2 || d.raw[start] != '"' || d.raw[end-1] != '"' {
		return "", false
	}
	t := d.v.text[d.at(start+1):d.at(end-1)]
	return t, utf8.ValidString(t)
}
