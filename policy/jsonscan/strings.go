package jsonscan

import (
	"bytes"
	"fmt"
	"math/bits"
	"slices"
	"unicode/utf8"
)

// Unquote decodes the JSON string raw (with its quotes) as encoding/json
// decodes it: invalid UTF-8 and lone surrogates become U+FFFD.
func Unquote(raw []byte) (string, error) {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return "", fmt.Errorf("%w: want a string", ErrSyntax)
	}
	s := raw[1 : len(raw)-1]
	if bytes.IndexByte(s, '\\') < 0 && utf8.Valid(s) {
		return string(s), nil
	}
	b, _, err := AppendUnquoted(make([]byte, 0, len(s)), s, -1)
	return string(b), err
}

// AppendUnquoted decodes body, the inside of a JSON string, appending it
// to dst. With limit >= 0 it stops, at a character boundary, once at least
// limit bytes have been appended. It returns dst and how many bytes of body
// it decoded.
func AppendUnquoted(dst, body []byte, limit int) ([]byte, int, error) {
	start := len(dst)
	// Checking UTF-8 once for the whole body is much cheaper than once per
	// run between escapes; a prefix is checked run by run.
	valid := limit < 0 && utf8.Valid(body)
	i := 0
	for i < len(body) {
		if limit >= 0 && len(dst)-start >= limit {
			break
		}
		end := len(body)
		if j := bytes.IndexByte(body[i:], '\\'); j >= 0 {
			end = i + j
		}
		if limit >= 0 {
			if want := limit - (len(dst) - start); end-i > want {
				e := i + want
				for e < end && !utf8.RuneStart(body[e]) {
					e++
				}
				end = e
			}
		}
		if valid {
			dst = append(dst, body[i:end]...)
		} else {
			dst = appendValidUTF8(dst, body[i:end])
		}
		i = end
		if i >= len(body) || body[i] != '\\' {
			continue
		}
		if len(body)-i < 2 {
			return dst, i, fmt.Errorf("%w: bad escape at the end of a string", ErrSyntax)
		}
		if c := shortEscapes[body[i+1]]; c != 0 {
			dst, i = append(dst, c), i+2
			continue
		}
		var n int
		var ok bool
		if dst, n, ok = AppendEscape(dst, body[i:]); !ok {
			if body[i+1] == 'u' {
				return dst, i, fmt.Errorf("%w: bad \\u escape", ErrSyntax)
			}
			return dst, i, fmt.Errorf("%w: bad escape \\%c", ErrSyntax, body[i+1])
		}
		i += n
	}
	return dst, i, nil
}

// shortEscapes maps the byte after a backslash to the character a
// one-character JSON escape stands for; 0 for the others (\u, and what is
// no escape).
var shortEscapes = [256]byte{'"': '"', '\\': '\\', '/': '/', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t'}

// ShortEscape returns the byte the one-character JSON escape \c stands
// for (\", \\, \/, \b, \f, \n, \r, \t), or 0 when \c is none: a \u
// escape, or no escape at all. It is a table lookup, small enough to be
// inlined in a loop that decodes text; AppendEscape decodes every escape.
func ShortEscape(c byte) byte { return shortEscapes[c] }

// AppendEscape decodes the JSON escape sequence s starts with (s[0] is a
// backslash), appending the character it stands for to dst as UTF-8, and
// returns dst and the length of the escape in s. As encoding/json decodes
// it, a \u escape of a lone surrogate stands for U+FFFD, and a surrogate
// pair (12 bytes) for one character. ok is false, and dst is returned as
// it was, when s does not start with a JSON escape.
//
// It is the one decoder of JSON escapes in the module: AppendUnquoted
// decodes strings with it, and the secret scanner the escapes of whole
// JSON texts, keeping its own map from the decoded text to the raw one.
func AppendEscape[T ~string | ~[]byte](dst []byte, s T) (out []byte, n int, ok bool) {
	if len(s) < 2 || s[0] != '\\' {
		return dst, 0, false
	}
	if c := shortEscapes[s[1]]; c != 0 {
		return append(dst, c), 2, true
	}
	if s[1] != 'u' {
		return dst, 0, false
	}
	r, ok := hex4(s[2:])
	if !ok {
		return dst, 0, false
	}
	n = 6
	if r >= 0xD800 && r < 0xE000 {
		r2 := rune(-1)
		if len(s) >= 12 && s[6] == '\\' && s[7] == 'u' {
			r2, _ = hex4(s[8:])
		}
		if r < 0xDC00 && r2 >= 0xDC00 && r2 < 0xE000 {
			r, n = (r-0xD800)<<10|(r2-0xDC00)+0x10000, 12
		} else {
			r = utf8.RuneError
		}
	}
	return utf8.AppendRune(dst, r), n, true
}

// hex4 decodes four hex digits.
func hex4[T ~string | ~[]byte](b T) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for i := range 4 {
		c := b[i]
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// appendValidUTF8 appends s, each invalid byte replaced by U+FFFD as
// encoding/json does.
func appendValidUTF8(dst, s []byte) []byte {
	if utf8.Valid(s) {
		return append(dst, s...)
	}
	for len(s) > 0 {
		r, n := utf8.DecodeRune(s)
		if r == utf8.RuneError && n == 1 {
			dst = utf8.AppendRune(dst, utf8.RuneError)
		} else {
			dst = append(dst, s[:n]...)
		}
		s = s[n:]
	}
	return dst
}

// Quote returns s as a JSON string, as AppendQuote writes it.
func Quote(s string) []byte { return AppendQuote(make([]byte, 0, len(s)+2), s) }

// AppendQuote appends s as a JSON string, exactly as encoding/json's
// Encoder with SetEscapeHTML(false) writes it: '<', '>' and '&' are kept
// so that text reads as the agent expects, U+2028 and U+2029 are escaped,
// and each invalid UTF-8 byte becomes \ufffd.
func AppendQuote(dst []byte, s string) []byte { return appendQuote(dst, s, false) }

// AppendQuoteHTML appends s as a JSON string exactly as json.Marshal
// writes it: as AppendQuote, and '<', '>' and '&' as \u003c, \u003e and
// \u0026.
func AppendQuoteHTML(dst []byte, s string) []byte { return appendQuote(dst, s, true) }

// quoteMask returns a word with the high bit set of each byte of b (eight
// bytes, the first lowest) that appendQuote must look at: specialBytes'
// quote, backslash and control bytes, a byte of a multi-byte character
// and, with html, <, > and &. A byte above one that is set may be set too
// (a borrow), never a byte that needs looking at left clear: the lowest
// set byte is the first to look at.
func quoteMask(b string, html bool) uint64 {
	const ones, high = 0x0101010101010101, 0x8080808080808080
	w := uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
		uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
	m := specialBytes(w) | w&high
	if html {
		m |= hasZero(w^'<'*ones) | hasZero(w^'>'*ones) | hasZero(w^'&'*ones)
	}
	return m
}

// hasZero sets the high bit of each zero byte of x (and, by a borrow, maybe
// of bytes above one that is zero).
func hasZero(x uint64) uint64 {
	const ones, high = 0x0101010101010101, 0x8080808080808080
	return (x - ones) & ^x & high
}

func appendQuote(dst []byte, s string, html bool) []byte {
	const hexd = "0123456789abcdef"
	dst = slices.Grow(dst, len(s)+2)
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if i+8 <= len(s) {
			// Eight bytes at a time through the runs that need no
			// escape (most of a text): skip to the first byte that may.
			m := quoteMask(s[i:i+8], html)
			if m == 0 {
				i += 8
				continue
			}
			i += bits.TrailingZeros64(m) / 8
		}
		c := s[i]
		if c >= utf8.RuneSelf {
			r, n := utf8.DecodeRuneInString(s[i:])
			switch {
			case r == utf8.RuneError && n == 1:
				dst = append(dst, s[start:i]...)
				dst = append(dst, `\ufffd`...)
			case r == '\u2028' || r == '\u2029':
				dst = append(dst, s[start:i]...)
				dst = append(dst, '\\', 'u', '2', '0', '2', hexd[r&0xf])
			default:
				i += n
				continue
			}
			i += n
			start = i
			continue
		}
		if c >= 0x20 && c != '"' && c != '\\' && (!html || (c != '<' && c != '>' && c != '&')) {
			i++
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
		case '"', '\\':
			dst = append(dst, '\\', c)
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\r':
			dst = append(dst, '\\', 'r')
		case '\t':
			dst = append(dst, '\\', 't')
		case '\b':
			dst = append(dst, '\\', 'b')
		case '\f':
			dst = append(dst, '\\', 'f')
		default:
			dst = append(dst, '\\', 'u', '0', '0', hexd[c>>4], hexd[c&0xf])
		}
		i++
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
