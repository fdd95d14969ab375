package tokens

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/foldproxy/foldproxy/policy/jsonscan"
)

// CutText returns the byte length of the longest prefix of s that has at
// most limit tokens and ends at a clean boundary: the end of a line, else
// the end of a word, else a rune boundary (never inside a UTF-8 sequence).
// A line end is preferred when it keeps at least half of the bytes that
// would fit, a word end when it keeps all but a few dozen bytes; otherwise
// the cut falls on the last rune boundary that fits. The cost grows with
// limit, not with len(s).
func (c *Counter) CutText(s string, limit int) (prefix int) {
	p, _ := c.cutText(s, limit)
	return p
}

// cutText is CutText that also returns the tokens of s[:prefix].
func (c *Counter) cutText(s string, limit int) (prefix, tokens int) {
	if s == "" {
		return 0, 0
	}
	// A zero limit still keeps a prefix of characters the encoding drops
	// (it gives some control characters no token).
	limit = max(limit, 0)
	start, n := 0, 0
	for start < len(s) {
		want := c.chunkBytes(limit-n+1, n, start)
		end := c.chunkEnd(s, start, want)
		chunk := s[start:end]
		// Counting is cheaper than encoding: encode only the chunk that
		// does not fit.
		if k := c.CountText(chunk); n+k <= limit {
			n += k
			start = end
			continue
		}
		toks, err := c.encode(chunk)
		if err != nil || !spans(toks, len(chunk)) {
			// The tokens do not map onto the bytes (invalid UTF-8, or
			// characters the encoding drops): cut this chunk by counting
			// prefixes instead.
			q, k := c.cutSearch(s, start, end, limit-n)
			return q, n + k
		}
		q, k := c.cutChunk(s, start, end, toks, limit-n)
		return q, n + k
	}
	return len(s), n
}

// spans reports whether the token strings add up to n bytes.
func spans(toks []string, n int) bool {
	total := 0
	for _, t := range toks {
		total += len(t)
	}
	return total == n
}

// cutChunk cuts s inside the chunk s[start:end], whose tokens are toks and
// which holds more than r tokens; s[:start] ends at a split point. It returns
// the cut offset and the tokens of s[start:cut].
func (c *Counter) cutChunk(s string, start, end int, toks []string, r int) (int, int) {
	// offs[i] is the offset just past the first i tokens.
	offs := make([]int, len(toks)+1)
	offs[0] = start
	for i, t := range toks {
		offs[i+1] = offs[i] + len(t)
	}
	take := r
	for take >= 0 {
		fit := offs[take]
		q := cleanCut(s, start, fit)
		// Count s[start:q] exactly, reusing the chunk's tokens up to the
		// last split point before q.
		sp := q
		for sp > start && q-sp < splitSearch && !splitsAt(s, sp) {
			sp--
		}
		if sp < start || !splitsAt(s, sp) {
			sp = start
		}
		k := tokensBefore(offs, sp) + c.CountText(s[sp:q])
		if k <= r {
			return q, k
		}
		// Re-tokenizing the cut end added tokens: give them back.
		take -= k - r
		if take > r {
			take = r
		}
	}
	return start, 0
}

// tokensBefore returns how many tokens end at or before offset sp.
func tokensBefore(offs []int, sp int) int {
	lo, hi := 0, len(offs)-1
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if offs[mid] <= sp {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}

// cutSearch finds by binary search over rune boundaries the longest prefix
// of s[start:end] with at most r tokens, then moves it back to a clean
// boundary. It is the fallback for text the codec does not map byte for byte.
func (c *Counter) cutSearch(s string, start, end, r int) (int, int) {
	lo, hi := start, end // count(s[start:lo]) <= r, and the answer is in [lo, hi]
	for lo < hi {
		mid := lo + (hi-lo+1)/2
		for mid < hi && !utf8.RuneStart(s[mid]) {
			mid++
		}
		if c.CountText(s[start:mid]) <= r {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	q := cleanCut(s, start, lo)
	k := c.CountText(s[start:q])
	for k > r && q > start {
		q = cleanCut(s, start, q-1)
		k = c.CountText(s[start:q])
	}
	return q, k
}

// wordSearch bounds how far back a word end is looked for.
const wordSearch = 64

// cleanCut returns the cut offset at or before fit, and not before lo: the
// end of the last line if that keeps at least half of s[:fit], else the end
// of the last word if one lies within wordSearch bytes, else the last rune
// boundary.
func cleanCut(s string, lo, fit int) int {
	if fit >= len(s) {
		return len(s)
	}
	if fit <= lo {
		return lo
	}
	if i := strings.LastIndexByte(s[max(lo-1, 0):fit], '\n'); i >= 0 {
		q := max(lo-1, 0) + i + 1
		if q >= lo && q >= fit/2 && q > 0 {
			return q
		}
	}
	for q := fit; q > lo && fit-q <= wordSearch; q-- {
		if isASCIISpace(s[q]) && !isASCIISpace(s[q-1]) {
			return q
		}
	}
	q := fit
	for q > lo && !utf8.RuneStart(s[q]) {
		q--
	}
	return q
}

// CutResult cuts a result so that its tokens, counted as CountResult counts
// them, are at most limit (no limit when negative), and returns the cut
// result, the remainder and the tokens of the cut result. A result within
// the limit is returned as it is, with a nil rest.
//
// The cut falls at a clean boundary (see CutText) inside the text of the
// first item that does not fit whole (a text block, an embedded resource's
// text, a resource's text, a prompt's description or message text); items
// after it are dropped, and so is an item that is not text and does not fit.
// A cut tools/call result loses its structuredContent, which cannot be cut
// cleanly. Everything else (other fields of the result and of the items
// kept: annotations, _meta, mimeType, uri, isError...) is kept byte for byte;
// only the cut text is re-encoded, and the arrays and the result object are
// rebuilt from their members.
//
// rest is defined so that branch_recall can return it byte for byte: the
// text of the cut item after the cut point (or, for an item that is dropped
// whole and is not text, its raw JSON); then, for each later item, "\n" and
// its text (text items) or its raw JSON (other items). structuredContent,
// which a cut result loses, is in the rest only when the content was kept
// whole (rest is then its raw JSON): when the content was cut, the
// structured content is the same output again, and the rest holds what the
// model would have read, once. For a
// result with a single text item, the kept text followed by rest is exactly
// the original text.
//
// Results that cannot be cut (see ErrNotCuttable) fail when they are over
// the limit.
func (c *Counter) CutResult(method string, result json.RawMessage, limit int) (cut json.RawMessage, rest []byte, tokens int, err error) {
	if limit < 0 {
		n, _, err := c.CountResult(method, result, -1)
		if err != nil {
			return nil, nil, 0, err
		}
		return result, nil, n, nil
	}
	sh, err := c.parseResult(method, result)
	if err != nil {
		return nil, nil, 0, err
	}
	if sh.kind != shapeItems {
		n, over, err := c.CountResult(method, result, limit)
		if err != nil {
			return nil, nil, 0, err
		}
		if !over {
			return result, nil, n, nil
		}
		return nil, nil, 0, fmt.Errorf("%w: a %s result of this shape is over the limit of %d tokens", ErrNotCuttable, method, limit)
	}
	n, at, err := c.cutPoint(method, sh, limit)
	if err != nil {
		return nil, nil, 0, err
	}
	if at.k == len(sh.items) {
		if sh.sc < 0 {
			return result, nil, n, nil
		}
		t, over := c.CountUpTo(string(sh.value(sh.sc)), limit)
		if !over && t <= limit {
			return result, nil, max(n, t), nil
		}
	}
	// The structured content is in the rest only when the content was
	// delivered whole: when the text was cut, structuredContent is its
	// copy (the spec has tools send both), and the rest is the rest of the
	// text once, not followed by the whole of it again.
	scInRest := sh.sc >= 0 && at.k == len(sh.items)
	if rest, err = cutRest(method, sh, at, scInRest); err != nil {
		return nil, nil, 0, err
	}
	return cutShape(sh, at, len(rest)), rest, n, nil
}

// cutAt is where CutResult cuts a result's items: item k is the first
// that does not fit whole (len(items) when all do); when it is text, w is
// its text and keep the bytes of w.head kept.
type cutAt struct {
	k, keep int
	w       textWork
}

// cutPoint walks sh's items until one does not fit in limit, and returns
// the tokens of what is kept and where the cut falls.
func (c *Counter) cutPoint(method string, sh *shape, limit int) (n int, at cutAt, err error) {
	at.k = len(sh.items)
	for i := range sh.items {
		it := &sh.items[i]
		if it.isText {
			var kt int
			if at.w, at.keep, kt, err = c.cutWork(it, limit-n); err != nil {
				return 0, at, fmt.Errorf("%s result: %w", method, err)
			}
			n += kt
			if !at.w.over {
				continue
			}
			at.k = i
			break
		}
		t, over, err := c.itemTokens(it, limit-n)
		if err != nil {
			return 0, at, fmt.Errorf("%s result: %w", method, err)
		}
		if !over && n+t <= limit {
			n += t
			continue
		}
		at.k = i
		break
	}
	return n, at, nil
}

// cutRest returns the rest of a result cut at at, as CutResult documents
// it; with scInRest, the structured content ends it.
func cutRest(method string, sh *shape, at cutAt, scInRest bool) ([]byte, error) {
	k, keep, w := at.k, at.keep, at.w
	size := 0
	if k < len(sh.items) {
		size = len(w.head) - keep + len(w.tail) + len(w.raw)
		if !sh.items[k].isText {
			size += len(sh.items[k].raw)
		}
		for i := k + 1; i < len(sh.items); i++ {
			size += len(sh.items[i].raw) + 1
		}
	}
	if scInRest {
		size += len(sh.value(sh.sc)) + 1
	}
	b := make([]byte, 0, size)
	first := true
	add := func(s []byte, text string) {
		if !first {
			b = append(b, '\n')
		}
		b = append(b, s...)
		b = append(b, text...)
		first = false
	}
	if k < len(sh.items) {
		if it := &sh.items[k]; it.isText {
			b = append(b, w.head[keep:]...)
			b = append(b, w.tail...)
			var err error
			if b, _, err = jsonscan.AppendUnquoted(b, w.raw, -1); err != nil {
				return nil, fmt.Errorf("%s result: %w", method, err)
			}
			first = false
		} else {
			add(it.raw, "")
		}
		for i := k + 1; i < len(sh.items); i++ {
			it := &sh.items[i]
			if !it.isText {
				add(it.raw, "")
				continue
			}
			t, err := it.fullText()
			if err != nil {
				return nil, fmt.Errorf("%s result: %w", method, err)
			}
			add(nil, t)
		}
	}
	if scInRest {
		add(sh.value(sh.sc), "")
	}
	return b, nil
}

// cutShape returns the result sh cut at at: the items before at.k whole,
// item at.k cut when something of it is kept, the structured content
// dropped, every other member as it was. restLen sizes its buffer.
func cutShape(sh *shape, at cutAt, restLen int) []byte {
	k, keep, w := at.k, at.keep, at.w
	var desc []byte // the description value kept, nil to drop it
	var elems [][]byte
	for i := 0; i < len(sh.items) && i <= k; i++ {
		it := &sh.items[i]
		raw := it.raw
		if i == k {
			if !it.isText || keep == 0 {
				break
			}
			raw = splice(it.raw, it.ts, it.te, jsonscan.AppendQuote(nil, w.head[:keep]))
		}
		if it.isDesc {
			desc = raw
		} else {
			elems = append(elems, raw)
		}
	}
	out := make([]byte, 0, 64+restLen/1024)
	out = append(out, '{')
	firstMember := true
	for i, m := range sh.members {
		var v []byte
		switch i {
		case sh.sc:
			continue // a cut result loses its structured content
		case sh.desc:
			if desc == nil {
				continue
			}
			v = desc
		case sh.arr:
			v = appendArray(nil, elems)
		default:
			v = sh.value(i)
		}
		if !firstMember {
			out = append(out, ',')
		}
		firstMember = false
		out = append(out, m.KeyAt.Of(sh.raw)...)
		out = append(out, ':')
		out = append(out, v...)
	}
	return append(out, '}')
}

// appendArray appends a JSON array of the given raw elements.
func appendArray(dst []byte, elems [][]byte) []byte {
	dst = append(dst, '[')
	for i, e := range elems {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, e...)
	}
	return append(dst, ']')
}

// splice returns b with b[i:j] replaced by v, in a new slice.
func splice(b []byte, i, j int, v []byte) []byte {
	out := make([]byte, 0, len(b)-(j-i)+len(v))
	out = append(out, b[:i]...)
	out = append(out, v...)
	return append(out, b[j:]...)
}
