package jsonscan

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"math/bits"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestKind(t *testing.T) {
	tests := []struct{ raw, want string }{
		{``, "nothing"}, {`  `, "nothing"}, {` {"a":1}`, "an object"}, {`[1]`, "an array"},
		{`"s"`, "a string"}, {`true`, "a boolean"}, {`false`, "a boolean"}, {`null`, "null"},
		{`-1`, "a number"}, {`3.5`, "a number"},
	}
	for _, tt := range tests {
		if got := Kind([]byte(tt.raw)); got != tt.want {
			t.Errorf("Kind(%q) = %q, want %q", tt.raw, got, tt.want)
		}
	}
}

func TestCheckErrors(t *testing.T) {
	tests := []struct {
		in      string
		want    error
		message string
	}{
		{`{"a":1} x`, ErrSyntax, "data after the value at offset 8"},
		{`{"a" 1}`, ErrSyntax, "want ':' at offset 5"},
		{`{"a":1 "b":2}`, ErrSyntax, "want ',' or '}' at offset 7"},
		{`[1,]`, ErrSyntax, "unexpected ']' at offset 3"},
		{`{1:2}`, ErrSyntax, "want a member name at offset 1"},
		{`"abc`, ErrUnterminated, "at offset 0"},
		{`01`, ErrSyntax, "data after the value at offset 1"},
		{`-`, ErrSyntax, "bad number at offset 0"},
		{`1.e3`, ErrSyntax, "bad number"},
		{`nul`, ErrSyntax, "unexpected 'n'"},
		{``, ErrSyntax, "want a value at offset 0"},
		{strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1), ErrDepth, "at offset 10000"},
	}
	for _, tt := range tests {
		err := Check([]byte(tt.in))
		if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.message) {
			t.Errorf("Check(%.40q) = %v, want %v naming %q", tt.in, err, tt.want, tt.message)
		}
	}
	if err := Check([]byte(strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth))); err != nil {
		t.Errorf("Check refuses %d levels: %v", MaxDepth, err)
	}
}

// TestValidStrings: the walkers skip string contents; Valid checks them.
func TestValidStrings(t *testing.T) {
	for _, in := range []string{"\"a\x01\"", `"\x"`, `"\u12g4"`, `"\`} {
		if Valid([]byte(in)) {
			t.Errorf("Valid(%q) = true", in)
		}
		if json.Valid([]byte(in)) {
			t.Fatalf("encoding/json accepts %q: the test is wrong", in)
		}
	}
	if err := Check([]byte("\"a\x01\"")); err != nil {
		t.Errorf("Check of a raw control character: %v, want it accepted by the walker", err)
	}
}

func TestObjectSpans(t *testing.T) {
	b := []byte(` { "a" : [1, {"x":"}"}] , "b\u0022":"v", "a":null } `)
	ms, err := Object(b)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range ms {
		got = append(got, m.Key+"="+string(m.Value.Of(b))+" "+string(m.KeyAt.Of(b)))
	}
	want := []string{`a=[1, {"x":"}"}] "a"`, `b"="v" "b\u0022"`, `a=null "a"`}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("got %q, want %q", got, want)
	}
	es, err := Array([]byte(`[ 1 ,"two", [3] ]`))
	if err != nil || len(es) != 3 || es[0] != (Span{2, 3}) || es[1] != (Span{5, 10}) || es[2] != (Span{12, 15}) {
		t.Errorf("Array = %v, %v", es, err)
	}
	if _, err := Object([]byte(`[1]`)); err == nil {
		t.Error("Object of an array: no error")
	}
}

// TestScannerCache: a Scanner remembers long strings, so a second walk of
// the same input gives the same spans.
func TestScannerCache(t *testing.T) {
	long := strings.Repeat(`x\"`, 3000)
	b := []byte(`{"text":"` + long + `","n":1}`)
	var sc Scanner
	for i := 0; i < 2; i++ {
		ms, err := sc.Object(b)
		if err != nil || len(ms) != 2 || ms[1].Key != "n" || string(ms[1].Value.Of(b)) != "1" {
			t.Fatalf("walk %d: %v, %v", i, ms, err)
		}
	}
	if len(sc.ends) != 1 {
		t.Errorf("cached %d strings, want 1", len(sc.ends))
	}
}

func TestField(t *testing.T) {
	obj := []byte(`{"name":"a\"b","n":2,"name":"second","esc\u0061ped":true}`)
	if v, ok := Field(obj, "n"); !ok || string(v) != "2" {
		t.Errorf("Field n = %s, %v", v, ok)
	}
	if got := StringField(obj, "name"); got != `a"b` {
		t.Errorf("StringField name = %q (the first of a repeated key is used)", got)
	}
	if v, ok := Field(obj, "escaped"); !ok || string(v) != "true" {
		t.Errorf("Field escaped = %s, %v", v, ok)
	}
	if got := StringField(obj, "n"); got != "" {
		t.Errorf("StringField of a number = %q", got)
	}
	if _, ok := Field([]byte(`[1]`), "n"); ok {
		t.Error("Field of an array found something")
	}
}

func TestSetField(t *testing.T) {
	tests := []struct {
		name, obj, key, val, want string
	}{
		{"replace keeps order", `{"b":1, "name":"x","a":{"k":[1,2]}}`, "name", `"y"`, `{"b":1, "name":"y","a":{"k":[1,2]}}`},
		{"append", `{"b":1}`, "c", `true`, `{"b":1,"c":true}`},
		{"append to empty", `{ }`, "c", `"v"`, `{ "c":"v"}`},
		{"append keeps trailing space", "{\"b\":1}\n", "c", `2`, "{\"b\":1,\"c\":2}\n"},
		{"escaped key and braces in strings", `{"x":"}\"{","y":2}`, "y", `3`, `{"x":"}\"{","y":3}`},
		{"new key is quoted", `{}`, `<"k">`, `1`, `{"<\"k\">":1}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := SetField([]byte(tt.obj), tt.key, []byte(tt.val))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("got %s, want %s", got, tt.want)
			}
		})
	}
	if _, err := SetField([]byte(`"s"`), "k", []byte("1")); !errors.Is(err, ErrNotObject) {
		t.Errorf("SetField on a string: %v, want ErrNotObject", err)
	}
}

func TestDeleteField(t *testing.T) {
	tests := []struct{ obj, key, want string }{
		{`{"a":1,"branch_id":"b","c":3}`, "branch_id", `{"a":1,"c":3}`},
		{`{"a":1,"branch_id":"b"}`, "branch_id", `{"a":1}`},
		{`{"branch_id":"b"}`, "branch_id", `{}`},
		{`{"branch_id":"b", "a":1}`, "branch_id", `{"a":1}`},
		{`{"a":1}`, "branch_id", `{"a":1}`},
		{`{"branch_id":"b","a":1,"branch_id":"c"}`, "branch_id", `{"a":1}`},
	}
	for _, tt := range tests {
		got, err := DeleteField([]byte(tt.obj), tt.key)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != tt.want {
			t.Errorf("DeleteField(%s) = %s, want %s", tt.obj, got, tt.want)
		}
	}
}

func TestQuote(t *testing.T) {
	tests := []struct{ in, want string }{
		{"plain", `"plain"`},
		{"<&>", `"<&>"`},
		{"a\"b\\c\n\t\r\b\f\x01", `"a\"b\\c\n\t\r\b\f\u0001"`},
		{"\u2028\u2029é", `"\u2028\u2029é"`},
		{"x\xffy", `"x\ufffdy"`},
	}
	for _, tt := range tests {
		if got := string(Quote(tt.in)); got != tt.want {
			t.Errorf("Quote(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

func TestUnquote(t *testing.T) {
	tests := []struct{ in, want string }{
		{`"plain"`, "plain"},
		{`"\ud83d\ude00 \u00e9 \/"`, "😀 é /"},
		{`"\ud800x"`, "\uFFFDx"},
		{"\"\xff\"", "\uFFFD"},
	}
	for _, tt := range tests {
		if got, err := Unquote([]byte(tt.in)); err != nil || got != tt.want {
			t.Errorf("Unquote(%s) = %q, %v, want %q", tt.in, got, err, tt.want)
		}
	}
	for _, in := range []string{`"\q"`, `"\u12"`, `abc`, `"`} {
		if _, err := Unquote([]byte(in)); !errors.Is(err, ErrSyntax) {
			t.Errorf("Unquote(%s) = %v, want ErrSyntax", in, err)
		}
	}
	got, used, err := AppendUnquoted(nil, []byte(`héllo\nworld`), 3)
	if err != nil || string(got) != "hé" || used != 3 {
		t.Errorf("AppendUnquoted with limit 3 = %q, %d, %v", got, used, err)
	}
}

// TestSpecialBytes checks the word test of strictString against a test a
// byte at a time: every byte value at every place of a word, among random
// bytes after it and ordinary ones before.
func TestSpecialBytes(t *testing.T) {
	special := func(c byte) bool { return c == '"' || c == '\\' || c < 0x20 }
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		for pos := range 8 {
			for v := range 256 {
				var b [8]byte
				for k := range b {
					switch {
					case k < pos:
						b[k] = byte(0x20 + rng.IntN(0x100-0x20))
						for special(b[k]) {
							b[k] = byte(0x20 + rng.IntN(0x100-0x20))
						}
					case k == pos:
						b[k] = byte(v)
					default:
						b[k] = byte(rng.IntN(256))
					}
				}
				want := -1
				for k, c := range b {
					if special(c) {
						want = k
						break
					}
				}
				m := specialBytes(binary.LittleEndian.Uint64(b[:]))
				got := -1
				if m != 0 {
					got = bits.TrailingZeros64(m) / 8
				}
				if got != want {
					t.Fatalf("round %d: specialBytes(% x): first special at %d, want %d", round, b, got, want)
				}
			}
		}
	}
}
