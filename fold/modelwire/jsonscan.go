package modelwire

import (
	"errors"
	"fmt"

	"github.com/foldproxy/foldproxy/policy/jsonscan"
)

// The request is edited in place: these views, built on the one JSON
// scanner (policy/jsonscan), find the byte spans of values, so that
// everything Apply does not change keeps its original bytes (key order,
// number spelling, escapes). The body is checked with jsonscan.Valid first.

// span is a half-open byte range [s, e) of the body.
type span struct{ s, e int }

func (p span) ok() bool { return p.e > p.s }

// member is one key of an object and its value's span.
type member struct {
	key string
	val span
}

var errShape = errors.New("unexpected JSON shape")

// members lists the members of the object at v.
func members(b []byte, v span) ([]member, error) {
	ms, _, err := jsonscan.ObjectAt(b[:v.e], jsonscan.SkipSpace(b[:v.e], v.s))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errShape, err)
	}
	out := make([]member, len(ms))
	for i, m := range ms {
		out[i] = member{m.Key, span{m.Value.Start, m.Value.End}}
	}
	return out, nil
}

// elements lists the spans of the elements of the array at v.
func elements(b []byte, v span) ([]span, error) {
	es, _, err := jsonscan.ArrayAt(b[:v.e], jsonscan.SkipSpace(b[:v.e], v.s))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errShape, err)
	}
	out := make([]span, len(es))
	for i, e := range es {
		out[i] = span{e.Start, e.End}
	}
	return out, nil
}

// unquote decodes the JSON string raw (with its quotes).
func unquote(raw []byte) (string, error) {
	s, err := jsonscan.Unquote(raw)
	if err != nil {
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
