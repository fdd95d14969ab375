package proxy

import (
	"encoding/json"
	"errors"
	"fmt"
)

// The helpers in this file edit one field of a JSON object in place and keep
// every other byte as it was: key order, spacing and unknown fields of
// upstream schemas and results pass through untouched. They expect valid
// JSON (callers check with json.Valid where the input is untrusted).

var errNotObject = errors.New("not a JSON object")

type span struct {
	key                        string
	keyStart, valStart, valEnd int
}

// fields lists the top-level fields of a JSON object with their byte spans.
func fields(obj []byte) ([]span, error) {
	i := skipWS(obj, 0)
	if i >= len(obj) || obj[i] != '{' {
		return nil, errNotObject
	}
	i++
	var out []span
	for {
		i = skipWS(obj, i)
		if i >= len(obj) {
			return nil, errors.New("unterminated object")
		}
		if obj[i] == '}' {
			return out, nil
		}
		if obj[i] == ',' {
			i++
			continue
		}
		if obj[i] != '"' {
			return nil, fmt.Errorf("want a key at offset %d", i)
		}
		ks := i
		ke, err := skipString(obj, i)
		if err != nil {
			return nil, err
		}
		var key string
		if err := json.Unmarshal(obj[ks:ke], &key); err != nil {
			return nil, err
		}
		i = skipWS(obj, ke)
		if i >= len(obj) || obj[i] != ':' {
			return nil, fmt.Errorf("want ':' at offset %d", i)
		}
		i = skipWS(obj, i+1)
		vs := i
		ve, err := skipValue(obj, i)
		if err != nil {
			return nil, err
		}
		out = append(out, span{key: key, keyStart: ks, valStart: vs, valEnd: ve})
		i = ve
	}
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

func skipString(b []byte, i int) (int, error) {
	// b[i] == '"'
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1, nil
		}
	}
	return 0, errors.New("unterminated string")
}

func skipValue(b []byte, i int) (int, error) {
	if i >= len(b) {
		return 0, errors.New("missing value")
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				e, err := skipString(b, j)
				if err != nil {
					return 0, err
				}
				j = e - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1, nil
				}
			}
		}
		return 0, errors.New("unterminated value")
	default:
		j := i
		for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' && b[j] != ' ' && b[j] != '\n' && b[j] != '\r' && b[j] != '\t' {
			j++
		}
		if j == i {
			return 0, fmt.Errorf("unexpected %q at offset %d", b[i], i)
		}
		return j, nil
	}
}

// getField returns the raw value of key in obj.
func getField(obj []byte, key string) (json.RawMessage, bool) {
	fs, err := fields(obj)
	if err != nil {
		return nil, false
	}
	for _, f := range fs {
		if f.key == key {
			return json.RawMessage(obj[f.valStart:f.valEnd]), true
		}
	}
	return nil, false
}

// setField returns obj with key set to val: replaced in place when present,
// appended at the end otherwise.
func setField(obj []byte, key string, val []byte) ([]byte, error) {
	fs, err := fields(obj)
	if err != nil {
		return nil, err
	}
	for _, f := range fs {
		if f.key == key {
			out := make([]byte, 0, len(obj)-(f.valEnd-f.valStart)+len(val))
			out = append(out, obj[:f.valStart]...)
			out = append(out, val...)
			return append(out, obj[f.valEnd:]...), nil
		}
	}
	end := len(obj) - 1
	for end >= 0 && obj[end] != '}' {
		end--
	}
	if end < 0 {
		return nil, errNotObject
	}
	k, _ := json.Marshal(key)
	out := make([]byte, 0, len(obj)+len(k)+len(val)+2)
	out = append(out, obj[:end]...)
	if len(fs) > 0 {
		out = append(out, ',')
	}
	out = append(out, k...)
	out = append(out, ':')
	out = append(out, val...)
	return append(out, obj[end:]...), nil
}

// deleteField returns obj without key (and the comma that separated it).
func deleteField(obj []byte, key string) ([]byte, error) {
	fs, err := fields(obj)
	if err != nil {
		return nil, err
	}
	for n, f := range fs {
		if f.key != key {
			continue
		}
		start, end := f.keyStart, f.valEnd
		if n+1 < len(fs) {
			end = fs[n+1].keyStart // drop the trailing comma and spacing
		} else if n > 0 {
			start = fs[n-1].valEnd // last field: drop the preceding comma
		}
		out := make([]byte, 0, len(obj)-(end-start))
		out = append(out, obj[:start]...)
		return append(out, obj[end:]...), nil
	}
	return obj, nil
}

// stringField returns the string value of key, "" when absent or not a string.
func stringField(obj []byte, key string) string {
	v, ok := getField(obj, key)
	if !ok || len(v) == 0 || v[0] != '"' {
		return ""
	}
	var s string
	if json.Unmarshal(v, &s) != nil {
		return ""
	}
	return s
}

func quote(s string) []byte {
	b, _ := json.Marshal(s)
	return b
}
