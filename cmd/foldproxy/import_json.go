package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/foldproxy/foldproxy/policy/jsonscan"
)

// impMember is one member of a JSON object, located in the document.
type impMember struct {
	key              string
	valStart, valEnd int
}

// impObject is a JSON object's members in document order. A key that
// occurs twice keeps its first position and its last value, as in
// JavaScript's JSON.parse, which Claude Code uses.
type impObject struct{ members []impMember }

func (o impObject) get(key string) (impMember, bool) {
	for _, m := range o.members {
		if m.key == key {
			return m, true
		}
	}
	return impMember{}, false
}

// impTopObject checks that data is valid JSON whose top level is an object
// and returns its members. Syntax errors name path, line and column.
func impTopObject(path string, data []byte) (impObject, error) {
	prefix := ""
	if path != "" {
		prefix = path + ": "
	}
	var raw json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			// Offset counts the bytes read, the bad one included.
			bad := max(int(se.Offset)-1, 0)
			line, col := impLineCol(data, bad)
			return impObject{}, fmt.Errorf("%smalformed JSON at line %d, column %d (byte offset %d): %v", prefix, line, col, bad, se)
		}
		return impObject{}, fmt.Errorf("%smalformed JSON: %v", prefix, err)
	}
	i := jsonscan.SkipSpace(data, 0)
	if data[i] != '{' {
		return impObject{}, fmt.Errorf("%stop level is %s, want an object", prefix, jsonscan.Kind(data[i:]))
	}
	o, err := impObjectMembers(data, i)
	if err != nil {
		return impObject{}, fmt.Errorf("%s%w", prefix, err)
	}
	return o, nil
}

// impLineCol converts a byte offset to a 1-based line and column.
func impLineCol(data []byte, off int) (line, col int) {
	off = min(max(off, 0), len(data))
	line = 1 + bytes.Count(data[:off], []byte("\n"))
	col = off - bytes.LastIndexByte(data[:off], '\n')
	return line, col
}

// impObjectMembers scans the object starting at data[i]. data must be valid
// JSON (see impTopObject); the scanner still refuses to run off the end.
func impObjectMembers(data []byte, i int) (impObject, error) {
	ms, _, err := jsonscan.ObjectAt(data, i)
	if err != nil {
		return impObject{}, err
	}
	var o impObject
	at := make(map[string]int, len(ms))
	for _, m := range ms {
		if j, dup := at[m.Key]; dup {
			o.members[j].valStart, o.members[j].valEnd = m.Value.Start, m.Value.End
			continue
		}
		at[m.Key] = len(o.members)
		o.members = append(o.members, impMember{key: m.Key, valStart: m.Value.Start, valEnd: m.Value.End})
	}
	return o, nil
}

// impArrayElems scans the array starting at data[i], which must be valid.
func impArrayElems(data []byte, i int) ([]jsonscan.Span, error) {
	es, _, err := jsonscan.ArrayAt(data, i)
	return es, err
}

// impSameJSON reports whether a and b are the same JSON apart from
// insignificant whitespace.
func impSameJSON(a, b []byte) bool {
	var ca, cb bytes.Buffer
	if json.Compact(&ca, a) != nil || json.Compact(&cb, b) != nil {
		return bytes.Equal(a, b)
	}
	return bytes.Equal(ca.Bytes(), cb.Bytes())
}

var impIdentRE = regexp.MustCompile(`^[A-Za-z_$][A-Za-z0-9_$-]*$`)

// impJSONPath renders keys as a JSON path: mcpServers.github or
// projects["/home/me/p"].mcpServers.
func impJSONPath(keys ...string) string {
	var b strings.Builder
	for i, k := range keys {
		if impIdentRE.MatchString(k) {
			if i > 0 {
				b.WriteByte('.')
			}
			b.WriteString(k)
		} else {
			b.WriteString("[" + strconv.Quote(k) + "]")
		}
	}
	return b.String()
}

// impSetMember sets key to val (raw JSON) in the object obj holds: in place
// when the key is there, else appended after the last member, on a line of
// its own with the first member's indentation when the object spans lines.
// Every other byte is kept. relative says val spans lines indented from
// column 0 (an object impSetMember filled from empty): its lines are
// indented as the member's.
func impSetMember(obj []byte, key string, val []byte, relative bool) ([]byte, error) {
	ms, err := jsonscan.Object(obj)
	if err != nil {
		return nil, err
	}
	indentAt := func(i int) string {
		nl := bytes.LastIndexByte(obj[:i], '\n')
		if nl < 0 {
			return ""
		}
		ind := obj[nl+1 : i]
		if len(bytes.TrimLeft(ind, " \t")) != 0 {
			return ""
		}
		return string(ind)
	}
	reindent := func(ind string) []byte {
		if !relative {
			return val
		}
		return bytes.ReplaceAll(val, []byte("\n"), []byte("\n"+ind))
	}
	for _, m := range ms {
		if m.Key == key {
			return jsonscan.SetField(obj, key, reindent(indentAt(m.KeyAt.Start)))
		}
	}
	var b bytes.Buffer
	if len(ms) == 0 {
		open := bytes.IndexByte(obj, '{')
		closing := bytes.LastIndexByte(obj, '}')
		b.Write(obj[:open+1])
		b.WriteString("\n  ")
		b.Write(jsonscan.Quote(key))
		b.WriteString(": ")
		b.Write(reindent("  "))
		b.WriteString("\n")
		b.Write(obj[closing:])
		return b.Bytes(), nil
	}
	sep, ind := ", ", ""
	if bytes.IndexByte(obj[:ms[0].KeyAt.Start], '\n') >= 0 {
		ind = indentAt(ms[0].KeyAt.Start)
		sep = ",\n" + ind
	}
	last := ms[len(ms)-1].Value.End
	b.Write(obj[:last])
	b.WriteString(sep)
	b.Write(jsonscan.Quote(key))
	b.WriteString(": ")
	b.Write(reindent(ind))
	b.Write(obj[last:])
	return b.Bytes(), nil
}

// impEmptyObject reports whether raw is an object without members.
func impEmptyObject(raw []byte) bool {
	ms, err := jsonscan.Object(raw)
	return err == nil && len(ms) == 0
}
