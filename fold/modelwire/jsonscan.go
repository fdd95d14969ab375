package modelwire

import (
	"encoding/json"
	"errors"
	"fmt"
)

// The request is edited in place: these helpers find the byte spans of
// values, so that everything Apply does not change keeps its original bytes
// (key order, number spelling, escapes). The body is checked with
// json.Valid first, so they only need to skip, not to validate.

// span is a half-open byte range [s, e) of the body.
type span struct{ s, e int }

func (p span) ok() bool { return p.e > p.s }

// member is one key of an object and its value's span.
type member struct {
	key string
	val span
}

var errShape = errors.New("unexpected JSON shape")

func isWS(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func skipWS(b []byte, i int) int {
	for i < len(b) && isWS(b[i]) {
		i++
	}
	return i
}

// skipString returns the index after the string starting at b[i] == '"'.
func skipString(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return len(b)
}

// skipValue returns the index after the value starting at b[i].
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return i
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for ; i < len(b); i++ {
			switch b[i] {
			case '"':
				i = skipString(b, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
		}
		return len(b)
	default:
		for i < len(b) && !isWS(b[i]) && b[i] != ',' && b[i] != '}' && b[i] != ']' {
			i++
		}
		return i
	}
}

// members lists the members of the object at v.
func members(b []byte, v span) ([]member, error) {
	i := skipWS(b, v.s)
	if i >= v.e || b[i] != '{' {
		return nil, errShape
	}
	var out []member
	i = skipWS(b, i+1)
	if i < v.e && b[i] == '}' {
		return out, nil
	}
	for i < v.e {
		if b[i] != '"' {
			return nil, errShape
		}
		ke := skipString(b, i)
		key, err := unquote(b[i:ke])
		if err != nil {
			return nil, err
		}
		i = skipWS(b, ke)
		if i >= v.e || b[i] != ':' {
			return nil, errShape
		}
		i = skipWS(b, i+1)
		ve := skipValue(b, i)
		out = append(out, member{key, span{i, ve}})
		i = skipWS(b, ve)
		if i < v.e && b[i] == ',' {
			i = skipWS(b, i+1)
			continue
		}
		break
	}
	return out, nil
}

// elements lists the spans of the elements of the array at v.
func elements(b []byte, v span) ([]span, error) {
	i := skipWS(b, v.s)
	if i >= v.e || b[i] != '[' {
		return nil, errShape
	}
	var out []span
	i = skipWS(b, i+1)
	if i < v.e && b[i] == ']' {
		return out, nil
	}
	for i < v.e {
		ve := skipValue(b, i)
		out = append(out, span{i, ve})
		i = skipWS(b, ve)
		if i < v.e && b[i] == ',' {
			i = skipWS(b, i+1)
			continue
		}
		break
	}
	return out, nil
}

func unquote(raw []byte) (string, error) {
	if len(raw) > 0 && raw[0] == '"' {
		// Fast path: no escapes.
		plain := true
		for _, c := range raw[1 : len(raw)-1] {
			if c == '\\' || c < 0x20 {
				plain = false
				break
			}
		}
		if plain && len(raw) >= 2 {
			return string(raw[1 : len(raw)-1]), nil
		}
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", fmt.Errorf("%w: %v", errShape, err)
	}
	return s, nil
}

// obj is an object's members by key (first occurrence wins, as most
// decoders keep the last; a request with duplicate keys is unusual and is
// only read, never rewritten, through this).
type obj struct {
	b   []byte
	sp  span
	mem []member
}

func parseObj(b []byte, v span) (obj, error) {
	m, err := members(b, v)
	return obj{b, v, m}, err
}

func (o obj) get(key string) (span, bool) {
	for _, m := range o.mem {
		if m.key == key {
			return m.val, true
		}
	}
	return span{}, false
}

// str returns the string value of key, "" when absent or not a string.
func (o obj) str(key string) string {
	v, ok := o.get(key)
	if !ok || o.b[v.s] != '"' {
		return ""
	}
	s, _ := unquote(o.b[v.s:v.e])
	return s
}

func (o obj) isTrue(key string) bool {
	v, ok := o.get(key)
	return ok && string(o.b[v.s:v.e]) == "true"
}

// quote returns s as a JSON string, escaping as encoding/json does but
// without HTML escaping.
func quote(s string) []byte {
	var buf []byte
	buf = append(buf, '"')
	const hex = "0123456789abcdef"
	for i := 0; i < len(s); {
		c := s[i]
		if c < 0x80 {
			switch {
			case c == '"' || c == '\\':
				buf = append(buf, '\\', c)
			case c == '\n':
				buf = append(buf, '\\', 'n')
			case c == '\r':
				buf = append(buf, '\\', 'r')
			case c == '\t':
				buf = append(buf, '\\', 't')
			case c < 0x20:
				buf = append(buf, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			default:
				buf = append(buf, c)
			}
			i++
			continue
		}
		r, size := decodeRune(s[i:])
		if r == 0xFFFD && size == 1 {
			buf = append(buf, `\ufffd`...)
		} else if r == 0x2028 || r == 0x2029 {
			buf = append(buf, '\\', 'u', '2', '0', '2', hex[r&0xf])
		} else {
			buf = append(buf, s[i:i+size]...)
		}
		i += size
	}
	return append(buf, '"')
}
