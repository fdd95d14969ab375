package jsonrpc

import (
	"bytes"
	"encoding/json"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The package imports nothing of foldproxy's (doc.go).
func TestImportsNothingOfOurs(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		af, err := parser.ParseFile(token.NewFileSet(), f, src, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range af.Imports {
			if strings.Contains(imp.Path.Value, "foldproxy/") {
				t.Errorf("%s imports %s", f, imp.Path.Value)
			}
		}
	}
}

func TestCheck(t *testing.T) {
	tests := []struct {
		in   string
		want string // the error's message prefix, "" when valid
	}{
		{`{"jsonrpc":"2.0","id":1,"method":"ping"}`, ""},
		{`{"jsonrpc":"2.0","method":"notifications/initialized"}`, ""},
		{`{"jsonrpc":"2.0","id":"a","result":{}}`, ""},
		{`{"jsonrpc":"2.0","id":null,"error":{"code":1,"message":"m"}}`, ""},
		{`{"jsonrpc":"1.0","id":1,"method":"ping"}`, `invalid request: "jsonrpc" must be "2.0"`},
		{`{"jsonrpc":"2.0","id":true,"method":"ping"}`, "invalid request: id must be a string or a number"},
		{`{"jsonrpc":"2.0","id":null,"method":"ping"}`, "invalid request: id must be a string or a number"},
		{`{"jsonrpc":"2.0"}`, "invalid request: a message needs a method or an id"},
		{`{"jsonrpc":"2.0","id":1}`, "invalid request: a response needs a result or an error"},
		{`{"jsonrpc":"2.0","id":1,"method":"m","params":3}`, "invalid request: params must be an object or an array"},
		{`{"jsonrpc":"2.0","id":1,"method":`, "parse error:"},
		{`{"jsonrpc":"2.0","id":1,"method":5}`, "invalid request:"},
	}
	for _, tt := range tests {
		m, e := Decode([]byte(tt.in))
		switch {
		case tt.want == "" && e != nil:
			t.Errorf("Decode(%s) = %v, want valid", tt.in, e)
		case tt.want != "" && (e == nil || !strings.HasPrefix(e.Message, tt.want)):
			t.Errorf("Decode(%s) = %v, %v; want error %q", tt.in, m, e, tt.want)
		}
	}
	// Invalid UTF-8 inside a string becomes U+FFFD; in the id it is refused.
	m, e := Decode([]byte("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"m\",\"params\":{\"a\":\"x\xffy\"}}"))
	if e != nil || string(m.Params) != "{\"a\":\"x\uFFFDy\"}" {
		t.Errorf("invalid UTF-8 in params: %s, %v", m.Params, e)
	}
	if _, e := Decode([]byte("{\"jsonrpc\":\"2.0\",\"id\":\"\xff\",\"method\":\"m\"}")); e == nil || e.Code != CodeInvalidRequest {
		t.Errorf("invalid UTF-8 in the id: %v, want invalid request", e)
	}
}

func TestIDKey(t *testing.T) {
	if IDKey(json.RawMessage(`1`)) == IDKey(json.RawMessage(`"1"`)) {
		t.Error(`1 and "1" are one key`)
	}
	if IDKey(json.RawMessage(`"&"`)) != IDKey(json.RawMessage(`"\u0026"`)) {
		t.Error(`"&" and "\u0026" are two keys`)
	}
	if IDKey(json.RawMessage(` 7 `)) != IDKey(json.RawMessage(`7`)) {
		t.Error("space around an id changes its key")
	}
}

// An error read from a message goes out byte for byte; one built here is
// encoded as encoding/json would, without HTML escaping.
func TestErrorEnvelopes(t *testing.T) {
	raw := `{"message":"m <&>", "code":-32002,"data":{"n":9007199254740993}}`
	e, err := ParseError(json.RawMessage(raw))
	if err != nil {
		t.Fatal(err)
	}
	if e.Code != -32002 || e.Message != "m <&>" || string(e.Data) != `{"n":9007199254740993}` {
		t.Errorf("ParseError = %+v", e)
	}
	if got, want := string(Response(json.RawMessage(`"x"`), nil, e)), `{"jsonrpc":"2.0","id":"x","error":`+raw+`}`; got != want {
		t.Errorf("relayed error\n got %s\nwant %s", got, want)
	}
	if _, err := ParseError(json.RawMessage(`{"message":"no code"}`)); err == nil {
		t.Error("an error object without a code was accepted")
	}
	built := Errorf(CodeInternalError, "bad <%s>\n", "é\u2028")
	if got, want := string(Response(nil, nil, built)), `{"jsonrpc":"2.0","id":null,"error":{"code":-32603,"message":"bad <é\u2028>\n"}}`; got != want {
		t.Errorf("built error\n got %s\nwant %s", got, want)
	}
	if got, want := built.Error(), "json-rpc error -32603: bad <é\u2028>\n"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	var m Message
	if err := json.Unmarshal([]byte(`{"jsonrpc":"2.0","id":1,"error":`+raw+`}`), &m); err != nil || string(m.Error.Raw()) != raw {
		t.Errorf("decoded error keeps %s (%v), want %s", m.Error.Raw(), err, raw)
	}
}

func TestEnvelopes(t *testing.T) {
	tests := []struct{ got, want string }{
		{string(Response(json.RawMessage(`1`), json.RawMessage(`{"a": 1}`), nil)), `{"jsonrpc":"2.0","id":1,"result":{"a": 1}}`},
		{string(Response(json.RawMessage(`1`), nil, nil)), `{"jsonrpc":"2.0","id":1,"result":{}}`},
		{string(Notification("notifications/progress", json.RawMessage(`{"p":1}`))), `{"jsonrpc":"2.0","method":"notifications/progress","params":{"p":1}}`},
		{string(Notification("notifications/initialized", nil)), `{"jsonrpc":"2.0","method":"notifications/initialized"}`},
		{string(Request(json.RawMessage(`"fp-1"`), "roots/list", nil)), `{"jsonrpc":"2.0","id":"fp-1","method":"roots/list"}`},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("got  %s\nwant %s", tt.got, tt.want)
		}
	}
}

// AppendString writes what encoding/json writes without HTML escaping.
func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "tools/call", `a"b\c`, "<&>", "\x00\x1f\x7f", "é\u2028\u2029", "\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(s); err != nil {
			t.Fatal(err)
		}
		if got, want := string(AppendString(nil, s)), strings.TrimSuffix(buf.String(), "\n"); got != want {
			t.Errorf("AppendString(%q) = %s, want %s", s, got, want)
		}
	})
}

// Decode never panics, and what it accepts is a message of one shape.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{`{"jsonrpc":"2.0","id":1,"method":"ping"}`, `{"jsonrpc":"2.0","id":1,"error":{"code":1}}`, `[]`, `{`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, e := Decode(b)
		if (m == nil) == (e == nil) {
			t.Fatalf("Decode(%q) = %v, %v: want exactly one", b, m, e)
		}
		if m != nil && !m.IsRequest() && !m.IsNotification() && !m.IsResponse() && string(m.ID) != "null" {
			t.Fatalf("Decode(%q) accepted %+v, of no shape", b, m)
		}
	})
}
