package tokens

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/tiktoken-go/tokenizer"

	"github.com/foldproxy/foldproxy/policy"
)

// ErrNotCuttable is wrapped by CutResult when a result over its limit has a
// shape that cannot be cut (completion/complete, or a result whose shape the
// method does not define).
var ErrNotCuttable = errors.New("result cannot be cut")

// Counter counts tokens in the configured encoding and cuts text and results
// to a token limit. It is safe for concurrent use: the codec it wraps keeps
// no per-call state, and its piece cache takes no lock (fast.go).
//
// Counts are exactly the codec's, but most of the work is done without it:
// ASCII text is split into the encoding's pieces by hand and the count of
// each piece is cached (fast.go), which is an order of magnitude
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
	// fast splits and caches (fast.go); with lib set, every count
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
// The count is the codec's, computed by the fast path of fast.go.
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

// WithWorkHook returns a copy of c that calls hook with the length of
// every text it hands to the codec or merges at once: for tests of its
// callers to see, slow down or block the work of a count. c itself is left
// as it is.
func (c *Counter) WithWorkHook(hook func(n int)) *Counter {
	d := *c
	d.libHook = hook
	return &d
}
