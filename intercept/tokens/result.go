package tokens

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"
	"unsafe"

	"github.com/foldproxy/foldproxy/policy/jsonscan"
)

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
