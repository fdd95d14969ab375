package jsonscan

import (
	"bytes"
	"fmt"
)

// openObject returns the offset of the first member of the object that
// starts at b[i], or -1 and the offset just past the object when it is
// empty.
func openObject(b []byte, i int) (first, end int, err error) {
	if i >= len(b) || b[i] != '{' {
		return 0, 0, fmt.Errorf("%w: want an object at offset %d", ErrSyntax, i)
	}
	i = SkipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return -1, i + 1, nil
	}
	return i, 0, nil
}

// member reads the member at b[i] and returns the spans of its key (with
// its quotes) and value, and the offset of the next member, or -1 and the
// offset just past the object when this member is the last.
func (s *Scanner) member(b []byte, i int) (key, val Span, next, end int, err error) {
	if i >= len(b) || b[i] != '"' {
		return key, val, 0, 0, fmt.Errorf("%w: want a member name at offset %d", ErrSyntax, i)
	}
	ke, err := s.SkipString(b, i)
	if err != nil {
		return key, val, 0, 0, err
	}
	j := SkipSpace(b, ke)
	if j >= len(b) || b[j] != ':' {
		return key, val, 0, 0, fmt.Errorf("%w: want ':' at offset %d", ErrSyntax, j)
	}
	vs := SkipSpace(b, j+1)
	ve, err := s.skipValue(b, vs, 1, false)
	if err != nil {
		return key, val, 0, 0, err
	}
	key, val = Span{i, ke}, Span{vs, ve}
	j = SkipSpace(b, ve)
	if j < len(b) && b[j] == ',' {
		return key, val, SkipSpace(b, j+1), 0, nil
	}
	if j < len(b) && b[j] == '}' {
		return key, val, -1, j + 1, nil
	}
	return key, val, 0, 0, fmt.Errorf("%w: want ',' or '}' at offset %d", ErrSyntax, j)
}

// ObjectAt lists the members of the object that starts at b[i], in order
// (a repeated key is listed each time), and returns the offset just past
// the object. Spans are offsets into b.
func (s *Scanner) ObjectAt(b []byte, i int) ([]Member, int, error) {
	next, end, err := openObject(b, i)
	if err != nil {
		return nil, 0, err
	}
	var ms []Member
	for next >= 0 {
		var k, v Span
		if k, v, next, end, err = s.member(b, next); err != nil {
			return nil, 0, err
		}
		key, ok := commonKey(b[k.Start+1 : k.End-1])
		if !ok {
			if key, err = Unquote(k.Of(b)); err != nil {
				return nil, 0, err
			}
		}
		if ms == nil {
			ms = make([]Member, 0, 4) // most objects have a few members
		}
		ms = append(ms, Member{Key: key, KeyAt: k, Value: v})
	}
	return ms, end, nil
}

// commonKey returns the member names MCP and JSON-RPC messages use most
// as constants, so that listing their members allocates no string for
// them; ok is false for other names (body is the name between its quotes).
func commonKey(body []byte) (string, bool) {
	switch string(body) { // compared without a conversion
	case "content":
		return "content", true
	case "type":
		return "type", true
	case "text":
		return "text", true
	case "isError":
		return "isError", true
	case "structuredContent":
		return "structuredContent", true
	case "_meta":
		return "_meta", true
	case "uri":
		return "uri", true
	case "mimeType":
		return "mimeType", true
	case "contents":
		return "contents", true
	case "messages":
		return "messages", true
	case "role":
		return "role", true
	case "resource":
		return "resource", true
	case "name":
		return "name", true
	case "description":
		return "description", true
	case "annotations":
		return "annotations", true
	case "data":
		return "data", true
	case "blob":
		return "blob", true
	case "jsonrpc": // the JSON-RPC envelope's, read for every message
		return "jsonrpc", true
	case "id":
		return "id", true
	case "method":
		return "method", true
	case "params":
		return "params", true
	case "result":
		return "result", true
	case "error":
		return "error", true
	}
	return "", false
}

// Object lists the members of the object b holds, with only white space
// around it.
func (s *Scanner) Object(b []byte) ([]Member, error) {
	i := SkipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return nil, fmt.Errorf("%w: want an object", ErrSyntax)
	}
	ms, end, err := s.ObjectAt(b, i)
	if err != nil {
		return nil, err
	}
	if j := SkipSpace(b, end); j != len(b) {
		return nil, fmt.Errorf("%w: data after the object at offset %d", ErrSyntax, j)
	}
	return ms, nil
}

// ArrayAt lists the spans of the elements of the array that starts at
// b[i] and returns the offset just past the array.
func (s *Scanner) ArrayAt(b []byte, i int) ([]Span, int, error) {
	if i >= len(b) || b[i] != '[' {
		return nil, 0, fmt.Errorf("%w: want an array at offset %d", ErrSyntax, i)
	}
	var es []Span
	i = SkipSpace(b, i+1)
	if i < len(b) && b[i] == ']' {
		return es, i + 1, nil
	}
	for {
		ve, err := s.skipValue(b, i, 1, false)
		if err != nil {
			return nil, 0, err
		}
		es = append(es, Span{i, ve})
		i = SkipSpace(b, ve)
		if i < len(b) && b[i] == ',' {
			i = SkipSpace(b, i+1)
			continue
		}
		if i < len(b) && b[i] == ']' {
			return es, i + 1, nil
		}
		return nil, 0, fmt.Errorf("%w: want ',' or ']' at offset %d", ErrSyntax, i)
	}
}

// Array lists the spans of the elements of the array b holds, with only
// white space around it.
func (s *Scanner) Array(b []byte) ([]Span, error) {
	i := SkipSpace(b, 0)
	if i >= len(b) || b[i] != '[' {
		return nil, fmt.Errorf("%w: want an array", ErrSyntax)
	}
	es, end, err := s.ArrayAt(b, i)
	if err != nil {
		return nil, err
	}
	if j := SkipSpace(b, end); j != len(b) {
		return nil, fmt.Errorf("%w: data after the array at offset %d", ErrSyntax, j)
	}
	return es, nil
}

// ObjectAt is (*Scanner)(nil).ObjectAt.
func ObjectAt(b []byte, i int) ([]Member, int, error) { return (*Scanner)(nil).ObjectAt(b, i) }

// Object is (*Scanner)(nil).Object.
func Object(b []byte) ([]Member, error) { return (*Scanner)(nil).Object(b) }

// ArrayAt is (*Scanner)(nil).ArrayAt.
func ArrayAt(b []byte, i int) ([]Span, int, error) { return (*Scanner)(nil).ArrayAt(b, i) }

// Array is (*Scanner)(nil).Array.
func Array(b []byte) ([]Span, error) { return (*Scanner)(nil).Array(b) }

// keyIs reports whether the raw key (with its quotes) decodes to key,
// without allocating when it has no escapes.
func keyIs(raw []byte, key string) bool {
	body := raw[1 : len(raw)-1]
	if bytes.IndexByte(body, '\\') < 0 {
		return string(body) == key
	}
	k, err := Unquote(raw)
	return err == nil && k == key
}

// findField returns the spans of the first member named key of the object
// obj holds; it walks obj no further than that member.
func findField(obj []byte, key string) (k, v Span, ok bool, err error) {
	next, _, err := openObject(obj, SkipSpace(obj, 0))
	if err != nil {
		return k, v, false, ErrNotObject
	}
	for next >= 0 {
		if k, v, next, _, err = (*Scanner)(nil).member(obj, next); err != nil {
			return k, v, false, err
		}
		if keyIs(k.Of(obj), key) {
			return k, v, true, nil
		}
	}
	return k, v, false, nil
}

// Field returns the raw value of the first member named key of the object
// obj holds, and false when there is none or obj is not an object. It walks
// obj no further than that member.
func Field(obj []byte, key string) ([]byte, bool) {
	_, v, ok, err := findField(obj, key)
	if !ok || err != nil {
		return nil, false
	}
	return v.Of(obj), true
}

// StringField returns the string value of key in obj, "" when it is
// absent, not a string, or badly escaped.
func StringField(obj []byte, key string) string {
	v, ok := Field(obj, key)
	if !ok || len(v) == 0 || v[0] != '"' {
		return ""
	}
	s, err := Unquote(v)
	if err != nil {
		return ""
	}
	return s
}

// SetField returns a new copy of obj with key's value set to val (raw JSON,
// not checked): the first member named key is replaced in place, otherwise
// the member is added before the closing brace. Every other byte is kept.
func SetField(obj []byte, key string, val []byte) ([]byte, error) {
	ms, end, err := objectWhole(obj)
	if err != nil {
		return nil, err
	}
	for _, m := range ms {
		if m.Key == key {
			out := make([]byte, 0, len(obj)-(m.Value.End-m.Value.Start)+len(val))
			out = append(out, obj[:m.Value.Start]...)
			out = append(out, val...)
			return append(out, obj[m.Value.End:]...), nil
		}
	}
	closing := end - 1
	out := make([]byte, 0, len(obj)+len(key)+len(val)+4)
	out = append(out, obj[:closing]...)
	if len(ms) > 0 {
		out = append(out, ',')
	}
	out = AppendQuote(out, key)
	out = append(out, ':')
	out = append(out, val...)
	return append(out, obj[closing:]...), nil
}

// DeleteField returns obj without its members named key (each with the
// comma that separated it); obj itself when there is none.
func DeleteField(obj []byte, key string) ([]byte, error) {
	ms, _, err := objectWhole(obj)
	if err != nil {
		return nil, err
	}
	for n, m := range ms {
		if m.Key != key {
			continue
		}
		start, end := m.KeyAt.Start, m.Value.End
		if n+1 < len(ms) {
			end = ms[n+1].KeyAt.Start // drop the trailing comma and spacing
		} else if n > 0 {
			start = ms[n-1].Value.End // last member: drop the preceding comma
		}
		out := make([]byte, 0, len(obj)-(end-start))
		out = append(out, obj[:start]...)
		out = append(out, obj[end:]...)
		return DeleteField(out, key)
	}
	return obj, nil
}

// objectWhole lists the members of the object obj holds, white space
// around it allowed, and returns the offset just past it.
func objectWhole(obj []byte) ([]Member, int, error) {
	i := SkipSpace(obj, 0)
	if i >= len(obj) || obj[i] != '{' {
		return nil, 0, ErrNotObject
	}
	ms, end, err := ObjectAt(obj, i)
	if err != nil {
		return nil, 0, err
	}
	if j := SkipSpace(obj, end); j != len(obj) {
		return nil, 0, fmt.Errorf("%w: data after the object at offset %d", ErrSyntax, j)
	}
	return ms, end, nil
}
