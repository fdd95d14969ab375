package jsonscan

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
)

// Errors the scanner returns, wrapped with the offset where they occurred.
var (
	// ErrSyntax is any malformed JSON but an unterminated string.
	ErrSyntax = errors.New("invalid JSON")
	// ErrDepth is nesting deeper than MaxDepth.
	ErrDepth = errors.New("JSON nested too deeply")
	// ErrUnterminated is a string without its closing quote.
	ErrUnterminated = errors.New("unterminated JSON string")
	// ErrNotObject is returned by the field helpers for anything but an object.
	ErrNotObject = errors.New("not a JSON object")
)

// MaxDepth bounds nesting as encoding/json bounds it: 10000 levels of
// objects and arrays are accepted, 10001 are not.
const MaxDepth = 10000

// Span is the half-open byte range [Start, End) of a value in its input.
type Span struct{ Start, End int }

// Of returns the bytes of b that s covers.
func (s Span) Of(b []byte) []byte { return b[s.Start:s.End] }

// Member is one member of an object: its decoded key and the spans, in the
// scanned input, of the key (with its quotes) and of the value.
type Member struct {
	Key   string
	KeyAt Span
	Value Span
}

// IsSpace reports whether c is JSON white space.
func IsSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// SkipSpace returns the offset of the first byte at or after i that is not
// white space (len(b) when there is none).
func SkipSpace(b []byte, i int) int {
	for i < len(b) && IsSpace(b[i]) {
		i++
	}
	return i
}

// TrimSpace returns b without leading and trailing white space.
func TrimSpace(b []byte) []byte {
	i, j := 0, len(b)
	for i < j && IsSpace(b[i]) {
		i++
	}
	for j > i && IsSpace(b[j-1]) {
		j--
	}
	return b[i:j]
}

// Kind names the JSON type of the value raw starts with (after white
// space), for error messages: "an object", "an array", "a string",
// "a boolean", "null", "a number", or "nothing" when raw is blank. It does
// not check that raw is valid.
func Kind(raw []byte) string {
	raw = TrimSpace(raw)
	if len(raw) == 0 {
		return "nothing"
	}
	switch raw[0] {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	default:
		return "a number"
	}
}

// A Scanner walks one input and remembers where its long strings end, so
// that an input walked level by level (a result, its content array, one
// block) scans each long string once. The zero value is ready to use; a nil
// *Scanner caches nothing, which is what the package-level functions use.
// A Scanner is for one input that does not change while it is used, and
// for one goroutine at a time.
type Scanner struct {
	ends map[*byte]int
}

// longString is the length from which a Scanner caches a string's end.
const longString = 4096

// SkipString returns the offset just past the string that starts at b[i].
func (s *Scanner) SkipString(b []byte, i int) (int, error) {
	if i >= len(b) || b[i] != '"' {
		return 0, fmt.Errorf("%w: want a string at offset %d", ErrSyntax, i)
	}
	long := s != nil && len(b)-i > longString
	if long {
		if n, ok := s.ends[&b[i]]; ok {
			return i + n, nil
		}
	}
	end, err := scanString(b, i)
	if err == nil && long && end-i > longString {
		if s.ends == nil {
			s.ends = make(map[*byte]int)
		}
		s.ends[&b[i]] = end - i
	}
	return end, err
}

// SkipValue returns the offset just past the value that starts at b[i]
// (white space before it is not skipped).
func (s *Scanner) SkipValue(b []byte, i int) (int, error) {
	return s.skipValue(b, i, 0, false)
}

// SkipString is (*Scanner)(nil).SkipString.
func SkipString(b []byte, i int) (int, error) { return (*Scanner)(nil).SkipString(b, i) }

// SkipValue is (*Scanner)(nil).SkipValue.
func SkipValue(b []byte, i int) (int, error) { return (*Scanner)(nil).SkipValue(b, i) }

// Check reports whether b holds exactly one value, with only white space
// around it, as the walkers check it (strings are not checked inside; Valid
// is the strict form). The error names what is wrong and where.
func Check(b []byte) error {
	i := SkipSpace(b, 0)
	end, err := SkipValue(b, i)
	if err != nil {
		return err
	}
	if j := SkipSpace(b, end); j != len(b) {
		return fmt.Errorf("%w: data after the value at offset %d", ErrSyntax, j)
	}
	return nil
}

// Valid reports whether b is valid JSON exactly as encoding/json.Valid
// does: one value, white space around it, strings free of raw control
// characters and bad escapes (but not checked for UTF-8, as encoding/json
// does not check it).
func Valid(b []byte) bool {
	i := SkipSpace(b, 0)
	end, err := (*Scanner)(nil).skipValue(b, i, 0, true)
	return err == nil && SkipSpace(b, end) == len(b)
}

// scanString returns the offset just past the string that starts at b[i],
// looking only for the closing quote.
func scanString(b []byte, i int) (int, error) {
	j := i + 1
	for {
		k := -1
		if j < len(b) {
			if n := bytes.IndexByte(b[j:], '"'); n >= 0 {
				k = j + n
			}
		}
		if k < 0 {
			return 0, fmt.Errorf("%w at offset %d", ErrUnterminated, i)
		}
		n := 0
		for m := k - 1; m > i && b[m] == '\\'; m-- {
			n++
		}
		if n%2 == 0 {
			return k + 1, nil
		}
		j = k + 1
	}
}

// strictString is scanString checking what encoding/json checks: no raw
// control characters and only the escapes JSON defines.
//
// Eight bytes at a time are tested at once for a quote, a backslash or a
// control character (specialByte), and skipped whole when they hold none:
// the bytes of most strings are ordinary, and a test a byte was most of
// the cost of Valid.
func strictString(b []byte, i int) (int, error) {
	for j := i + 1; j < len(b); {
		if j+8 <= len(b) {
			if m := specialBytes(binary.LittleEndian.Uint64(b[j:])); m == 0 {
				j += 8
				continue
			} else {
				j += bits.TrailingZeros64(m) / 8 // the first special byte
			}
		}
		c := b[j]
		switch {
		case c == '"':
			return j + 1, nil
		case c == '\\':
			if j+1 >= len(b) {
				return 0, fmt.Errorf("%w at offset %d", ErrUnterminated, i)
			}
			switch b[j+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				j += 2
			case 'u':
				if _, ok := hex4(b[j+2:]); !ok {
					return 0, fmt.Errorf("%w: bad \\u escape at offset %d", ErrSyntax, j)
				}
				j += 6
			default:
				return 0, fmt.Errorf("%w: bad escape at offset %d", ErrSyntax, j)
			}
		case c < 0x20:
			return 0, fmt.Errorf("%w: control character in a string at offset %d", ErrSyntax, j)
		default:
			j++
		}
	}
	return 0, fmt.Errorf("%w at offset %d", ErrUnterminated, i)
}

// specialBytes returns a word with the high bit set of the lowest byte of
// w (its first, read little-endian) that is a quote, a backslash or below
// 0x20, or zero when no byte is one. Bits of later bytes may be set too
// (a borrow runs upwards), but never of earlier ones, so that the lowest
// set bit marks the first special byte exactly.
func specialBytes(w uint64) uint64 {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	q := w ^ ('"' * ones)
	bs := w ^ ('\\' * ones)
	return ((q-ones)&^q | (bs-ones)&^bs | (w-0x20*ones)&^w) & highs
}

// skipNumber returns the offset just past the number that starts at b[i],
// checking JSON's number grammar.
func skipNumber(b []byte, i int) (int, error) {
	j := i
	if j < len(b) && b[j] == '-' {
		j++
	}
	digits := func() bool {
		k := j
		for j < len(b) && b[j] >= '0' && b[j] <= '9' {
			j++
		}
		return j > k
	}
	switch {
	case j < len(b) && b[j] == '0':
		j++
	case !digits():
		return 0, fmt.Errorf("%w: bad number at offset %d", ErrSyntax, i)
	}
	if j < len(b) && b[j] == '.' {
		j++
		if !digits() {
			return 0, fmt.Errorf("%w: bad number at offset %d", ErrSyntax, i)
		}
	}
	if j < len(b) && (b[j] == 'e' || b[j] == 'E') {
		j++
		if j < len(b) && (b[j] == '+' || b[j] == '-') {
			j++
		}
		if !digits() {
			return 0, fmt.Errorf("%w: bad number at offset %d", ErrSyntax, i)
		}
	}
	return j, nil
}

// skipValue returns the offset just past the value at b[i], which is
// inside depth objects and arrays.
func (s *Scanner) skipValue(b []byte, i, depth int, strict bool) (int, error) {
	if i >= len(b) {
		return 0, fmt.Errorf("%w: want a value at offset %d", ErrSyntax, i)
	}
	switch c := b[i]; {
	case c == '"':
		if strict {
			return strictString(b, i)
		}
		return s.SkipString(b, i)
	case c == '{' || c == '[':
		if depth >= MaxDepth {
			return 0, fmt.Errorf("%w at offset %d", ErrDepth, i)
		}
		closer := byte('}')
		if c == '[' {
			closer = ']'
		}
		j := SkipSpace(b, i+1)
		if j < len(b) && b[j] == closer {
			return j + 1, nil
		}
		for {
			if c == '{' {
				if j >= len(b) || b[j] != '"' {
					return 0, fmt.Errorf("%w: want a member name at offset %d", ErrSyntax, j)
				}
				var ke int
				var err error
				if strict {
					ke, err = strictString(b, j)
				} else {
					ke, err = s.SkipString(b, j)
				}
				if err != nil {
					return 0, err
				}
				j = SkipSpace(b, ke)
				if j >= len(b) || b[j] != ':' {
					return 0, fmt.Errorf("%w: want ':' at offset %d", ErrSyntax, j)
				}
				j = SkipSpace(b, j+1)
			}
			ve, err := s.skipValue(b, j, depth+1, strict)
			if err != nil {
				return 0, err
			}
			j = SkipSpace(b, ve)
			if j < len(b) && b[j] == ',' {
				j = SkipSpace(b, j+1)
				continue
			}
			if j < len(b) && b[j] == closer {
				return j + 1, nil
			}
			return 0, fmt.Errorf("%w: want ',' or '%c' at offset %d", ErrSyntax, closer, j)
		}
	case c == '-' || (c >= '0' && c <= '9'):
		return skipNumber(b, i)
	default:
		for _, lit := range [...]string{"true", "false", "null"} {
			if len(b)-i >= len(lit) && string(b[i:i+len(lit)]) == lit {
				return i + len(lit), nil
			}
		}
		return 0, fmt.Errorf("%w: unexpected %q at offset %d", ErrSyntax, c, i)
	}
}
