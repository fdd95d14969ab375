package jsonscan

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// seeds are inputs every fuzz target starts from: the shapes foldproxy
// scans (results, requests, configs) and the corners of the grammar.
var seeds = []string{
	`{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"hi"}]}}`,
	`{"a":1,"a":2}`,
	` { "k" : [ 1 , -2.5e+3 , true , false , null , "s" ] } `,
	`{"big":9007199254740993,"html":"<&>","esc":"\u2028\"\\\/\b\f\n\r\t\u00e9\ud83d\ude00\ud800x"}`,
	`[]`, `{}`, `""`, `0`, `-0`, `1e5`, `01`, `1.`, `.5`, `-`, `1e`, `tru`, `nul`, `[1,]`, `{"a"}`, `{"a":}`,
	`{"a":1,}`, `[1 2]`, `"\x"`, `"\u12"`, "\"a\x01b\"", "\"\xff\xfe\"", `"unterminated`, `[[[[[[]]]]]]`,
	`{"a":{"b":{"c":[{"d":"e"}]}}}`, "\t\r\n 42 \n", `{"\u0061":1,"a":2}`, `"\\"`, `"\\\""`,
}

func FuzzValid(f *testing.F) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Add([]byte(strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth)))
	f.Add([]byte(strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1)))
	f.Fuzz(func(t *testing.T, b []byte) {
		valid := json.Valid(b)
		if got := Valid(b); got != valid {
			t.Fatalf("Valid(%q) = %v, encoding/json says %v", b, got, valid)
		}
		err := Check(b)
		if valid && err != nil {
			t.Fatalf("Check(%q) = %v for valid JSON", b, err)
		}
		if !valid || len(b) > 4096 {
			return // decode below walks each level again: quadratic in depth
		}
		var want any
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.UseNumber()
		if err := dec.Decode(&want); err != nil {
			t.Fatalf("encoding/json cannot decode valid %q: %v", b, err)
		}
		got, err := decode(b, 0)
		if err != nil {
			t.Fatalf("decode(%q): %v", b, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("decode(%q) = %#v, encoding/json decodes %#v", b, got, want)
		}
	})
}

// decode builds the value b holds from the scanner's spans alone, so that
// FuzzValid compares every span and every decoded string with encoding/json.
func decode(b []byte, depth int) (any, error) {
	b = TrimSpace(b)
	switch b[0] {
	case '{':
		ms, err := Object(b)
		if err != nil {
			return nil, err
		}
		m := map[string]any{}
		for _, mem := range ms {
			if k, err := Unquote(mem.KeyAt.Of(b)); err != nil || k != mem.Key {
				return nil, err
			}
			v, err := decode(mem.Value.Of(b), depth+1)
			if err != nil {
				return nil, err
			}
			m[mem.Key] = v // the last of a repeated key wins, as in encoding/json
		}
		return m, nil
	case '[':
		es, err := Array(b)
		if err != nil {
			return nil, err
		}
		a := []any{}
		for _, e := range es {
			v, err := decode(e.Of(b), depth+1)
			if err != nil {
				return nil, err
			}
			a = append(a, v)
		}
		return a, nil
	case '"':
		return Unquote(b)
	case 't':
		return true, nil
	case 'f':
		return false, nil
	case 'n':
		return nil, nil
	}
	return json.Number(b), nil
}

// FuzzWalk runs the walkers on any input: they must not panic, and every
// span they return must lie inside the input, in order.
func FuzzWalk(f *testing.F) {
	for _, s := range seeds {
		f.Add([]byte(s), "a")
	}
	f.Fuzz(func(t *testing.T, b []byte, key string) {
		var sc Scanner
		if end, err := sc.SkipValue(b, SkipSpace(b, 0)); err == nil && (end < 0 || end > len(b)) {
			t.Fatalf("SkipValue end %d outside [0,%d]", end, len(b))
		}
		prev := 0
		ms, err := sc.Object(b)
		for _, m := range ms {
			if m.KeyAt.Start < prev || m.KeyAt.End > m.Value.Start || m.Value.End > len(b) || m.Value.Start >= m.Value.End {
				t.Fatalf("bad member spans %+v in %q", m, b)
			}
			prev = m.Value.End
		}
		if err == nil {
			if _, ok := Field(b, key); !ok {
				for _, m := range ms {
					if m.Key == key {
						t.Fatalf("Field(%q) missed a member Object lists", key)
					}
				}
			}
		}
		prev = 0
		es, _ := sc.Array(b)
		for _, e := range es {
			if e.Start < prev || e.End > len(b) || e.Start >= e.End {
				t.Fatalf("bad element span %+v in %q", e, b)
			}
			prev = e.End
		}
		_, _ = Unquote(b)
		_ = StringField(b, key)
		_, _ = SetField(b, key, []byte("1"))
		_, _ = DeleteField(b, key)
		_ = Kind(b)
	})
}

// FuzzQuote compares Quote with encoding/json's Encoder (HTML escaping off)
// and AppendQuoteHTML with json.Marshal, and checks that Unquote reverses
// Quote.
func FuzzQuote(f *testing.F) {
	for _, s := range []string{"", "plain", "<&>", "\u2028\u2029", "\x00\x1f\b\f\n\r\t\"\\/", "é😀", "\xff\xfe", "a\xc3"} {
		f.Add(s)
	}
	// Longer than a word, so that appendQuote's eight-byte steps run, with
	// the bytes to escape at every place in a word and next to each other.
	for _, s := range []string{
		"a plain line of text, long enough", "twelve bytes<", "0123456\"89abcdef\\x", "0123456789abcde\x7f\x1f\x20!",
		"\x00\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f\x10\x11\x12\x13\x14\x15\x16\x17\x18\x19\x1a\x1b\x1c\x1d\x1e\x1f",
		"abcdefg\u2028hijklmn\xe2\x80opqrstuvwxyz&&<<>>", "{\"content\":[{\"type\":\"text\",\"text\":\"line\\nline\"}]}",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(s); err != nil {
			t.Fatal(err)
		}
		got := Quote(s)
		if !bytes.Equal(got, bytes.TrimSuffix(want.Bytes(), []byte("\n"))) {
			t.Fatalf("Quote(%q) = %s, encoding/json writes %s", s, got, want.Bytes())
		}
		wantHTML, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if gotHTML := AppendQuoteHTML(nil, s); !bytes.Equal(gotHTML, wantHTML) {
			t.Fatalf("AppendQuoteHTML(%q) = %s, json.Marshal writes %s", s, gotHTML, wantHTML)
		}
		back, err := Unquote(got)
		if err != nil {
			t.Fatalf("Unquote(Quote(%q)): %v", s, err)
		}
		if back != fffdEach(s) {
			t.Fatalf("Unquote(Quote(%q)) = %q", s, back)
		}
	})
}

// fffdEach replaces each invalid byte of s by U+FFFD, as encoding/json does
// (strings.ToValidUTF8 would replace a run of them by one).
func fffdEach(s string) string {
	var b []byte
	return string(appendValidUTF8(b, []byte(s)))
}

// FuzzUnquote compares Unquote with encoding/json on every string literal
// encoding/json accepts.
func FuzzUnquote(f *testing.F) {
	for _, s := range []string{`""`, `"a"`, `"\ud83d\ude00"`, `"\ud800"`, `"\udc00\ud800"`, "\"\xff\"", `"\u00e9\n"`, `"\/"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var want string
		if json.Unmarshal(b, &want) != nil {
			return
		}
		got, err := Unquote(TrimSpace(b))
		if err != nil || got != want {
			t.Fatalf("Unquote(%q) = %q, %v; encoding/json gives %q", b, got, err, want)
		}
	})
}

// FuzzFields edits valid objects and checks the result with encoding/json:
// the edited member has its new value (or is gone) and the others are kept.
func FuzzFields(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":1}`, ` { "a" : 1 , "b" : [2] } `, `{"a":1,"a":2,"c":{"a":3}}`, `{"\u0061":"x"}`} {
		f.Add([]byte(s), "a", []byte(`"v"`))
		f.Add([]byte(s), "z<&>", []byte(`{"n":null}`))
	}
	f.Fuzz(func(t *testing.T, b []byte, key string, val []byte) {
		var before map[string]json.RawMessage
		if !utf8.ValidString(key) || json.Unmarshal(b, &before) != nil || before == nil || !json.Valid(val) {
			return
		}
		count := 0
		ms, err := Object(b)
		if err != nil {
			t.Fatalf("Object(%q): %v", b, err)
		}
		for _, m := range ms {
			if m.Key == key {
				count++
			}
		}
		set, err := SetField(b, key, val)
		if err != nil {
			t.Fatalf("SetField(%q, %q): %v", b, key, err)
		}
		if !json.Valid(set) {
			t.Fatalf("SetField(%q, %q, %s) = %q, not valid JSON", b, key, val, set)
		}
		if got, ok := Field(set, key); !ok || !bytes.Equal(got, val) {
			t.Fatalf("after SetField, Field(%q) = %s, %v", key, got, ok)
		}
		del, err := DeleteField(b, key)
		if err != nil {
			t.Fatalf("DeleteField(%q, %q): %v", b, key, err)
		}
		var after map[string]json.RawMessage
		if err := json.Unmarshal(del, &after); err != nil {
			t.Fatalf("DeleteField(%q, %q) = %q: %v", b, key, del, err)
		}
		if _, ok := after[key]; ok {
			t.Fatalf("DeleteField(%q, %q) = %q still has the key", b, key, del)
		}
		delete(before, key)
		if len(after) != len(before) {
			t.Fatalf("DeleteField(%q, %q) = %q: other members changed", b, key, del)
		}
		for k, v := range before {
			if !bytes.Equal(after[k], v) {
				t.Fatalf("DeleteField(%q, %q) = %q: member %q changed", b, key, del, k)
			}
		}
		if count == 0 && !bytes.Equal(del, b) {
			t.Fatalf("DeleteField of an absent key changed %q to %q", b, del)
		}
	})
}
