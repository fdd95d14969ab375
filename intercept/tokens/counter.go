package tokens

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
	"unsafe"

	"github.com/tiktoken-go/tokenizer"

	"github.com/foldproxy/foldproxy/policy"
	"github.com/foldproxy/foldproxy/policy/jsonscan"
)

// ErrNotCuttable is wrapped by CutResult when a result over its limit has a
// shape that cannot be cut (completion/complete, or a result whose shape the
// method does not define).
var ErrNotCuttable = errors.New("result cannot be cut")

// Counter counts tokens in the configured encoding and cuts text and results
// to a token limit. It is safe for concurrent use: the codec it wraps keeps
// no per-call state, and its piece cache takes no lock (tokens_fast.go).
//
// Counts are exactly the codec's, but most of the work is done without it:
// ASCII text is split into the encoding's pieces by hand and the count of
// each piece is cached (tokens_fast.go), which is an order of magnitude
// faster than the codec (a few MB/s). Counting a long text is still the
// expensive part of the proxy's path, so everything that takes a limit does
// work in proportion to the limit, not to the length of the text: text is
// counted in chunks that end at split points, places where the encoding's
// pre-tokenizer always splits, so that the count of a text is exactly the sum
// of the counts of its chunks.
type Counter struct {
	codec tokenizer.Codec
	image int
	audio int
	// fast splits and caches (tokens_fast.go); with lib set, every count
	// goes to the codec, as a reference for tests and benchmarks.
	fast *fastCounter
	lib  bool
	// libHook, when set (tests only), is called with the length of every
	// text handed to the codec or merged at once (countPiece): the work of
	// a count is checked through it.
	libHook func(n int)
}

// NewCounter returns a Counter for t.Encoding ("o200k_base" when empty, or
// "cl100k_base"). ImageTokens and AudioTokens are the flat estimates charged
// for an image or audio block (policy defaults when zero).
func NewCounter(t policy.Tokens) (*Counter, error) {
	def := policy.Default().Tokens
	enc := t.Encoding
	if enc == "" {
		enc = def.Encoding
	}
	var name tokenizer.Encoding
	switch enc {
	case "o200k_base":
		name = tokenizer.O200kBase
	case "cl100k_base":
		name = tokenizer.Cl100kBase
	default:
		return nil, fmt.Errorf("%w: %s.tokens.encoding: %q is not one of %s",
			policy.ErrInvalid, policy.Key, enc, strings.Join(policy.Encodings, ", "))
	}
	codec, err := tokenizer.Get(name)
	if err != nil {
		return nil, fmt.Errorf("tokens.encoding %q: %w", enc, err)
	}
	c := &Counter{
		codec: codec,
		image: t.ImageTokens,
		audio: t.AudioTokens,
		fast:  newFastCounter(name == tokenizer.O200kBase),
	}
	if c.image <= 0 {
		c.image = def.ImageTokens
	}
	if c.audio <= 0 {
		c.audio = def.AudioTokens
	}
	return c, nil
}

// Encoding returns the name of the counter's encoding.
func (c *Counter) Encoding() string { return c.codec.GetName() }

// CountText returns the number of tokens of s. It satisfies fold.Counter.
// The count is the codec's, computed by the fast path of tokens_fast.go.
func (c *Counter) CountText(s string) int {
	if s == "" {
		return 0
	}
	if c.lib {
		return c.countLib(s)
	}
	return c.countFast(s)
}

// encode returns the tokens of s as strings, as the codec's Encode does.
func (c *Counter) encode(s string) ([]string, error) {
	if c.lib {
		_, toks, err := c.codec.Encode(s)
		return toks, err
	}
	return c.encodeFast(s)
}

// CountArgs returns the tokens of a call's arguments: their JSON text.
func (c *Counter) CountArgs(args json.RawMessage) int {
	return c.CountText(string(args))
}

// Chunk sizing. A chunk is sized from the tokens still wanted and the bytes
// per token seen so far, starting from firstBytesPerToken, which is about
// the ratio of code and English prose in both encodings. minChunk keeps the
// per-call overhead of the codec small.
const (
	firstBytesPerToken = 4
	minChunk           = 512
	// splitSearch bounds how far back from a chunk's target end a split
	// point is looked for before looking forward.
	splitSearch = 4096
)

// CountUpTo counts the tokens of s, stopping early once the count passes
// limit. When the text has at most limit tokens, n is its exact count and
// over is false; otherwise over is true and n is the count of a prefix of s,
// which is more than limit and at most the full count. The cost grows with
// limit, not with len(s), except for text that has no split point (no line
// break, no space before a word, no letter followed by a digit) for long
// stretches, which must be counted whole. A negative limit counts all of s.
func (c *Counter) CountUpTo(s string, limit int) (n int, over bool) {
	if limit < 0 {
		return c.CountText(s), false
	}
	start := 0
	for start < len(s) {
		want := c.chunkBytes(limit-n+1, n, start)
		end := c.chunkEnd(s, start, want)
		n += c.CountText(s[start:end])
		start = end
		if n > limit {
			return n, true
		}
	}
	return n, false
}

// chunkBytes sizes the next chunk: enough bytes for tokens more tokens at
// the ratio of bytes to tokens seen so far (done tokens in doneBytes).
func (c *Counter) chunkBytes(tokens, done, doneBytes int) int {
	per := float64(firstBytesPerToken)
	if done > 0 && doneBytes > 0 {
		per = float64(doneBytes) / float64(done)
	}
	want := int(float64(tokens)*per*1.1) + 64
	return max(want, minChunk)
}

// chunkEnd returns the end of the chunk of s that starts at start and is
// about want bytes long: len(s), or a split point.
func (c *Counter) chunkEnd(s string, start, want int) int {
	target := start + want
	if target >= len(s) {
		return len(s)
	}
	low := max(start+1, target-splitSearch, start+want/2)
	for p := target; p >= low; p-- {
		if splitsAt(s, p) {
			return p
		}
	}
	for p := target + 1; p < len(s); p++ {
		if splitsAt(s, p) {
			return p
		}
	}
	return len(s)
}

// splitsAt reports whether p is a split point of s: a byte offset at which
// both supported encodings' pre-tokenizers always end a piece, whatever
// precedes and follows, so that the tokens of s are the tokens of s[:p]
// followed by the tokens of s[p:]. These are
//
//   - just after a line break that is followed by a character other than
//     white space or '/' (a run of white space that ends with a line break
//     is one piece, as is punctuation followed by line breaks and slashes);
//   - just before a space that follows a character other than white space
//     (a space can only begin a piece that is not all white space);
//   - between an ASCII letter and an ASCII digit.
//
// The property is tested on real tool output and fuzzed.
func splitsAt(s string, p int) bool {
	if p <= 0 || p >= len(s) {
		return false
	}
	prev, b := s[p-1], s[p]
	switch {
	case prev == '\n':
		if b < utf8.RuneSelf {
			return !isASCIISpace(b) && b != '/'
		}
		r, _ := utf8.DecodeRuneInString(s[p:])
		return r != utf8.RuneError && !unicode.IsSpace(r)
	case b == ' ':
		if prev < utf8.RuneSelf {
			return !isASCIISpace(prev)
		}
		r, _ := utf8.DecodeLastRuneInString(s[:p])
		return r != utf8.RuneError && !unicode.IsSpace(r)
	case b >= '0' && b <= '9':
		return isASCIILetter(prev)
	}
	return false
}

func isASCIISpace(b byte) bool {
	switch b {
	case ' ', '\t', '\n', '\v', '\f', '\r':
		return true
	}
	return false
}

func isASCIILetter(b byte) bool { return b|0x20 >= 'a' && b|0x20 <= 'z' }

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

// What is counted for a result: the tokens of what the agent receives.
//
//   - tools/call: each content block (text: its text; image and audio: the
//     flat estimates; resource_link: its uri, name and description; an
//     embedded resource: its text, or the blob estimate); when the result
//     also has structuredContent, it costs the larger of the two counts
//     (content, or structuredContent as JSON text): the spec has tools send
//     their structured result again as text for older clients, and a client
//     shows the model one of the two, so charging both would charge the same
//     output twice.
//   - resources/read: each of contents: its text, or the blob estimate.
//   - prompts/get: the description, then each message's content block as
//     for tools/call.
//   - completion/complete: the completion values joined by line breaks.
//   - anything else, or a result without the fields its method defines: the
//     raw JSON text.
//
// The blob estimate is the image estimate for an image/* MIME type, the
// audio estimate for audio/*, and otherwise one token per four base64
// characters, about what the blob would cost as text. Blocks of an unknown
// type are counted as their JSON text.

// CountResult returns the tokens of a result of the given method, stopping
// early, as CountUpTo does, once the count passes limit (no limit when
// negative). It fails only when the result is not valid JSON where it
// matters.
func (c *Counter) CountResult(method string, result json.RawMessage, limit int) (n int, over bool, err error) {
	return c.countResult(method, result, limit, nil, nil)
}

// countResult is CountResult that takes the texts of the result's items
// from dec, when dec decodes result, instead of decoding them, and that
// sets *isErr (when isErr is not nil) to what the result's top-level
// members say of "isError", as isErrorResult would read it, once they are
// parsed: the budget interceptor then need not parse the result again.
func (c *Counter) countResult(method string, result json.RawMessage, limit int, dec Decoded, isErr *IsError) (n int, over bool, err error) {
	sh, err := c.parseResult(method, result)
	if err != nil {
		return 0, false, err
	}
	if isErr != nil {
		*isErr = sh.isError()
	}
	if dec != nil && dec.Of(result) {
		for i := range sh.items {
			sh.items[i].useDecoded(result, dec)
		}
	}
	switch sh.kind {
	case shapeRaw:
		n, over = c.CountUpTo(string(result), limit)
		return n, over, nil
	case shapeCompletion:
		n, over = c.CountUpTo(strings.Join(sh.values, "\n"), limit)
		return n, over, nil
	}
	for i := range sh.items {
		k, o, err := c.itemTokens(&sh.items[i], sub(limit, n))
		if err != nil {
			return 0, false, fmt.Errorf("%s result: %w", method, err)
		}
		n += k
		if o || (limit >= 0 && n > limit) {
			return n, true, nil
		}
	}
	if sh.sc >= 0 {
		k, o := c.CountUpTo(string(sh.value(sh.sc)), limit)
		n = max(n, k)
		if o {
			return n, true, nil
		}
	}
	return n, false, nil
}

// sub returns what is left of limit after n tokens, keeping -1 (no limit).
func sub(limit, n int) int {
	if limit < 0 {
		return -1
	}
	return max(limit-n, 0)
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
	// Walk the items until one does not fit.
	n, k, keep := 0, len(sh.items), 0
	var w textWork // the cut item's text, when it is text
	for i := range sh.items {
		it := &sh.items[i]
		if it.isText {
			var err error
			var kt int
			if w, keep, kt, err = c.cutWork(it, limit-n); err != nil {
				return nil, nil, 0, fmt.Errorf("%s result: %w", method, err)
			}
			n += kt
			if !w.over {
				continue
			}
			k = i
			break
		}
		t, over, err := c.itemTokens(it, limit-n)
		if err != nil {
			return nil, nil, 0, fmt.Errorf("%s result: %w", method, err)
		}
		if !over && n+t <= limit {
			n += t
			continue
		}
		k = i
		break
	}
	if k == len(sh.items) {
		if sh.sc < 0 {
			return result, nil, n, nil
		}
		t, over := c.CountUpTo(string(sh.value(sh.sc)), limit)
		if !over && t <= limit {
			return result, nil, max(n, t), nil
		}
	}
	dropSC := sh.sc >= 0

	// The rest, as documented.
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
	// The structured content is in the rest only when the content was
	// delivered whole: when the text was cut, structuredContent is its
	// copy (the spec has tools send both), and the rest is the rest of the
	// text once, not followed by the whole of it again.
	scInRest := dropSC && k == len(sh.items)
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
				return nil, nil, 0, fmt.Errorf("%s result: %w", method, err)
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
				return nil, nil, 0, fmt.Errorf("%s result: %w", method, err)
			}
			add(nil, t)
		}
	}
	if scInRest {
		add(sh.value(sh.sc), "")
	}

	// The cut result: items before k whole, item k cut when something of it
	// is kept.
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
	out := make([]byte, 0, 64+len(b)/1024)
	out = append(out, '{')
	firstMember := true
	for i, m := range sh.members {
		var v []byte
		switch i {
		case sh.sc:
			if dropSC {
				continue
			}
			v = sh.value(i)
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
	out = append(out, '}')
	return out, b, n, nil
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

// shapeKind tells how a result is counted and cut.
type shapeKind int

const (
	shapeRaw        shapeKind = iota // counted as raw JSON text, not cut
	shapeItems                       // an array of items, cut inside
	shapeCompletion                  // completion values, not cut
)

// shape is a parsed result: its top-level members and its countable items.
type shape struct {
	kind    shapeKind
	raw     []byte
	members []jsonscan.Member
	arr     int // index of the member holding the item array; -1 when absent
	desc    int // index of a prompt's description member; -1 when absent
	sc      int // index of tools/call structuredContent; -1 when absent
	items   []item
	values  []string         // completion values
	ends    jsonscan.Scanner // long strings already scanned
}

// value returns the raw value of member i.
func (sh *shape) value(i int) []byte {
	m := sh.members[i]
	return sh.raw[m.Value.Start:m.Value.End]
}

// item is one countable part of a result: a content block, a resource's
// contents, a prompt message, or a prompt's description.
type item struct {
	raw     []byte // the item's JSON
	isText  bool   // the item is cut inside its text
	isDesc  bool   // the item is a prompt's description (a string value)
	ts, te  int    // the span in raw of the text's JSON string, when isText
	text    string // the decoded text, once decoded is set
	decoded bool
	est     int // a flat estimate (images, audio, blobs)
	texts   []string
}

// useDecoded takes a text item's text from dec, which decodes result, the
// JSON text the item was parsed from: the item's JSON is a slice of result,
// found by its capacity (everything is sliced from result with two-index
// slices) and checked by address.
func (it *item) useDecoded(result []byte, dec Decoded) {
	if !it.isText || it.decoded || len(it.raw) == 0 {
		return
	}
	off := cap(result) - cap(it.raw)
	if off < 0 || off+len(it.raw) > len(result) || &result[off] != &it.raw[0] {
		return
	}
	if t, ok := dec.Text(off+it.ts, off+it.te); ok {
		it.text, it.decoded = t, true
	}
}

// body returns the text's JSON string without its quotes.
func (it *item) body() []byte { return it.raw[it.ts+1 : it.te-1] }

// fullText decodes the whole text.
func (it *item) fullText() (string, error) {
	if !it.decoded && bytes.IndexByte(it.body(), '\\') < 0 && utf8.Valid(it.body()) {
		// Nothing to decode: one copy.
		it.text, it.decoded = string(it.body()), true
	}
	if !it.decoded {
		b, _, err := jsonscan.AppendUnquoted(make([]byte, 0, len(it.body())), it.body(), -1)
		if err != nil {
			return "", err
		}
		// b is this text's own and is never written again: a view of it,
		// not a second copy.
		it.text, it.decoded = unsafe.String(unsafe.SliceData(b), len(b)), true
	}
	return it.text, nil
}

// textWork is a text item's text decoded as far as a limit needs: either
// all of it (head), or a prefix (head) that ends at a split point and has
// more than the limit's tokens, followed by decoded text (tail) and the
// part of the JSON string not decoded yet (raw).
type textWork struct {
	head, tail string
	raw        []byte
	n          int
	over       bool
}

// prefixBytes is how much of a long text is decoded to count it against
// limit: far more than limit tokens of any real text take.
func prefixBytes(limit int) int { return 16*(limit+1) + 8192 }

// work counts the text of a text item against limit, decoding only a
// prefix of a long text when that prefix is already over the limit.
func (c *Counter) work(it *item, limit int) (textWork, error) {
	if body := it.body(); !it.decoded && limit >= 0 && len(body) > prefixBytes(limit) {
		pre, used, err := jsonscan.AppendUnquoted(nil, body, prefixBytes(limit))
		if err != nil {
			return textWork{}, err
		}
		ps := string(pre)
		if p := lastSplit(ps); p > 0 {
			if n, over := c.CountUpTo(ps[:p], limit); over {
				return textWork{head: ps[:p], tail: ps[p:], raw: body[used:], n: n, over: true}, nil
			}
		}
	}
	t, err := it.fullText()
	if err != nil {
		return textWork{}, err
	}
	n, over := c.CountUpTo(t, limit)
	return textWork{head: t, n: n, over: over}, nil
}

// cutWork cuts the text of a text item to limit, decoding only a prefix of
// a long text when the cut falls inside it. w.over reports whether the text
// was cut; keep is then the length of the kept prefix of w.head, and
// tokens its count (the whole text's count when not cut).
func (c *Counter) cutWork(it *item, limit int) (w textWork, keep, tokens int, err error) {
	if body := it.body(); !it.decoded && len(body) > prefixBytes(limit) {
		pre, used, err := jsonscan.AppendUnquoted(nil, body, prefixBytes(limit))
		if err != nil {
			return textWork{}, 0, 0, err
		}
		ps := string(pre)
		if p := lastSplit(ps); p > 0 {
			// cutText stops short of the end only when the text is over
			// the limit, so the cut is the one of the whole text.
			if q, k := c.cutText(ps[:p], limit); q < p {
				return textWork{head: ps[:p], tail: ps[p:], raw: body[used:], over: true}, q, k, nil
			}
		}
	}
	t, err := it.fullText()
	if err != nil {
		return textWork{}, 0, 0, err
	}
	q, k := c.cutText(t, limit)
	return textWork{head: t, over: q < len(t)}, q, k, nil
}

// lastSplit returns the last split point of s within splitSearch bytes of
// its end, or -1.
func lastSplit(s string) int {
	for p := len(s) - 1; p > 0 && len(s)-p <= splitSearch; p-- {
		if splitsAt(s, p) {
			return p
		}
	}
	return -1
}

// itemTokens counts an item against limit (no limit when negative).
func (c *Counter) itemTokens(it *item, limit int) (int, bool, error) {
	if it.isText {
		w, err := c.work(it, limit)
		return w.n, w.over, err
	}
	n := it.est
	if limit >= 0 && n > limit {
		return n, true, nil
	}
	for _, t := range it.texts {
		k, over := c.CountUpTo(t, sub(limit, n))
		n += k
		if over {
			return n, true, nil
		}
	}
	return n, false, nil
}

// parseResult parses a result of method into its shape.
func (c *Counter) parseResult(method string, result []byte) (*shape, error) {
	raw := jsonscan.TrimSpace(result)
	sh := &shape{kind: shapeRaw, raw: raw, arr: -1, desc: -1, sc: -1}
	if len(raw) == 0 || raw[0] != '{' {
		if err := jsonscan.Check(raw); err != nil {
			return nil, fmt.Errorf("%s result: %w", method, err)
		}
		return sh, nil
	}
	members, err := sh.ends.Object(raw)
	if err != nil {
		return nil, fmt.Errorf("%s result: %w", method, err)
	}
	sh.members = members
	find := func(key string) int {
		for i, m := range members {
			if m.Key == key {
				return i
			}
		}
		return -1
	}
	switch method {
	case "tools/call":
		i := find("content")
		if i < 0 || !isArray(sh.value(i)) {
			return sh, nil
		}
		sh.arr = i
		if j := find("structuredContent"); j >= 0 && string(sh.value(j)) != "null" {
			sh.sc = j
		}
		err = sh.parseItems(func(b []byte) (item, error) { return c.parseBlock(b, &sh.ends) })
	case "resources/read":
		i := find("contents")
		if i < 0 || !isArray(sh.value(i)) {
			return sh, nil
		}
		sh.arr = i
		err = sh.parseItems(func(b []byte) (item, error) { return c.parseContents(b, &sh.ends) })
	case "prompts/get":
		i := find("messages")
		if i < 0 || !isArray(sh.value(i)) {
			return sh, nil
		}
		sh.arr = i
		if j := find("description"); j >= 0 && len(sh.value(j)) > 0 && sh.value(j)[0] == '"' {
			v := sh.value(j)
			sh.desc = j
			sh.items = append(sh.items, item{raw: v, isText: true, isDesc: true, ts: 0, te: len(v)})
		}
		err = sh.parseItems(func(b []byte) (item, error) { return c.parseMessage(b, &sh.ends) })
	case "completion/complete":
		i := find("completion")
		if i < 0 {
			return sh, nil
		}
		cm, err := jsonscan.Object(sh.value(i))
		if err != nil {
			return sh, nil
		}
		for _, m := range cm {
			if m.Key != "values" {
				continue
			}
			var values []string
			if json.Unmarshal(sh.value(i)[m.Value.Start:m.Value.End], &values) == nil {
				sh.kind, sh.values = shapeCompletion, values
			}
		}
		return sh, nil
	default:
		return sh, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%s result: %w", method, err)
	}
	return sh, nil
}

// parseItems parses the elements of the item array with parse.
func (sh *shape) parseItems(parse func([]byte) (item, error)) error {
	v := sh.value(sh.arr)
	elems, err := sh.ends.Array(v)
	if err != nil {
		return fmt.Errorf("%s: %w", sh.members[sh.arr].Key, err)
	}
	for i, e := range elems {
		it, err := parse(e.Of(v))
		if err != nil {
			return fmt.Errorf("%s[%d]: %w", sh.members[sh.arr].Key, i, err)
		}
		sh.items = append(sh.items, it)
	}
	sh.kind = shapeItems
	return nil
}

// objFields are the members of an object, looked up by key: the few
// members of a block are searched faster than a map is built.
type objFields []jsonscan.Member

// fields returns the members of an object; ok is false when b is not an
// object.
func fields(b []byte, e *jsonscan.Scanner) (objFields, bool, error) {
	if len(b) == 0 || b[0] != '{' {
		return nil, false, nil
	}
	ms, err := e.Object(b)
	if err != nil {
		return nil, false, err
	}
	return ms, true, nil
}

// get returns the span of the value of key, the first when it repeats.
func (f objFields) get(key string) ([2]int, bool) {
	for _, m := range f {
		if m.Key == key {
			return [2]int{m.Value.Start, m.Value.End}, true
		}
	}
	return [2]int{}, false
}

// str returns the string value of key in f, "" when absent or not a string.
func str(b []byte, f objFields, key string) string {
	sp, ok := f.get(key)
	if !ok || b[sp[0]] != '"' {
		return ""
	}
	s, err := jsonscan.Unquote(b[sp[0]:sp[1]])
	if err != nil {
		return ""
	}
	return s
}

// blockTypes are the content block types parseBlock tells apart.
var blockTypes = [...]string{"text", "image", "audio", "resource_link", "resource"}

// blockType returns str(b, f, "type"), without decoding a copy when the
// value is one of blockTypes written without escapes.
func blockType(b []byte, f objFields) string {
	sp, ok := f.get("type")
	if !ok || b[sp[0]] != '"' {
		return ""
	}
	if body := b[sp[0]+1 : sp[1]-1]; bytes.IndexByte(body, '\\') < 0 {
		for _, t := range blockTypes {
			if string(body) == t {
				return t
			}
		}
	}
	return str(b, f, "type")
}

// textItem returns the item of b whose text is the string value of key in f,
// offset by off within the item's raw JSON. The text is decoded lazily.
func textItem(raw, b []byte, f objFields, key string, off int) (item, bool, error) {
	sp, ok := f.get(key)
	if !ok || b[sp[0]] != '"' {
		return item{}, false, nil
	}
	return item{raw: raw, isText: true, ts: off + sp[0], te: off + sp[1]}, true, nil
}

// parseBlock parses a content block (tools/call content, a prompt message's
// content).
func (c *Counter) parseBlock(b []byte, e *jsonscan.Scanner) (item, error) {
	f, ok, err := fields(b, e)
	if err != nil {
		return item{}, err
	}
	if !ok {
		return item{raw: b, texts: []string{string(b)}}, nil
	}
	switch blockType(b, f) {
	case "text":
		if it, ok, err := textItem(b, b, f, "text", 0); ok || err != nil {
			return it, err
		}
	case "image":
		return item{raw: b, est: c.image}, nil
	case "audio":
		return item{raw: b, est: c.audio}, nil
	case "resource_link":
		return item{raw: b, texts: []string{str(b, f, "uri"), str(b, f, "name"), str(b, f, "description")}}, nil
	case "resource":
		if sp, ok := f.get("resource"); ok {
			rb := b[sp[0]:sp[1]]
			rf, ok, err := fields(rb, e)
			if err != nil {
				return item{}, fmt.Errorf("resource: %w", err)
			}
			if ok {
				if it, ok, err := textItem(b, rb, rf, "text", sp[0]); ok || err != nil {
					return it, err
				}
				if bs, ok := rf.get("blob"); ok {
					return item{raw: b, est: c.blobTokens(str(rb, rf, "mimeType"), bs[1]-bs[0]-2)}, nil
				}
			}
		}
	}
	return item{raw: b, texts: []string{string(b)}}, nil
}

// parseContents parses one of a resources/read result's contents.
func (c *Counter) parseContents(b []byte, e *jsonscan.Scanner) (item, error) {
	f, ok, err := fields(b, e)
	if err != nil {
		return item{}, err
	}
	if ok {
		if it, ok, err := textItem(b, b, f, "text", 0); ok || err != nil {
			return it, err
		}
		if bs, ok := f.get("blob"); ok {
			return item{raw: b, est: c.blobTokens(str(b, f, "mimeType"), bs[1]-bs[0]-2)}, nil
		}
	}
	return item{raw: b, texts: []string{string(b)}}, nil
}

// parseMessage parses a prompts/get message: its content block, with the
// text's span offset into the message.
func (c *Counter) parseMessage(b []byte, e *jsonscan.Scanner) (item, error) {
	f, ok, err := fields(b, e)
	if err != nil {
		return item{}, err
	}
	if ok {
		if sp, ok := f.get("content"); ok && b[sp[0]] == '{' {
			it, err := c.parseBlock(b[sp[0]:sp[1]], e)
			if err != nil {
				return item{}, fmt.Errorf("content: %w", err)
			}
			it.raw = b
			if it.isText {
				it.ts += sp[0]
				it.te += sp[0]
			}
			return it, nil
		}
	}
	return item{raw: b, texts: []string{string(b)}}, nil
}

// blobTokens estimates a blob of n base64 characters.
func (c *Counter) blobTokens(mime string, n int) int {
	switch {
	case strings.HasPrefix(mime, "image/"):
		return c.image
	case strings.HasPrefix(mime, "audio/"):
		return c.audio
	}
	return (max(n, 0) + 3) / 4
}

func isArray(b []byte) bool { return len(b) > 0 && b[0] == '[' }

// WithWorkHook returns a copy of c that calls hook with the length of
// every text it hands to the codec or merges at once: for tests of its
// callers to see, slow down or block the work of a count. c itself is left
// as it is.
func (c *Counter) WithWorkHook(hook func(n int)) *Counter {
	d := *c
	d.libHook = hook
	return &d
}
