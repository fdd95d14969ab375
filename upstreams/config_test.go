package upstreams

import (
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func lookupFrom(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}

func TestParseServers(t *testing.T) {
	env := lookupFrom(map[string]string{"HOME": "/home/me", "TOKEN": "s3cret", "EMPTY": "", "PORT": "8080"})
	tests := []struct {
		name string
		raw  string
		want []Entry
	}{
		{"empty", ``, nil},
		{"null", `null`, nil},
		{"no servers", `{}`, []Entry{}},
		{
			"stdio without type, sorted by name, unknown fields ignored",
			`{"zeta":{"command":"z"},"alpha":{"command":"npx","args":["-y","@x/server","${HOME}/data"],"env":{"API_KEY":"${TOKEN}","MODE":"${MODE:-dev}"},"cwd":"${HOME}","description":"added by a tool","timeout":5}}`,
			[]Entry{
				{Name: "alpha", Type: TypeStdio, Command: "npx", Args: []string{"-y", "@x/server", "/home/me/data"}, Env: map[string]string{"API_KEY": "s3cret", "MODE": "dev"}, Cwd: "/home/me"},
				{Name: "zeta", Type: TypeStdio, Command: "z"},
			},
		},
		{
			"explicit stdio with nulls",
			`{"s":{"type":"stdio","command":"run","args":null,"env":null,"cwd":null}}`,
			[]Entry{{Name: "s", Type: TypeStdio, Command: "run"}},
		},
		{
			"http, streamable-http and sse",
			`{"a":{"type":"http","url":"https://example.com/mcp","headers":{"Authorization":"Bearer ${TOKEN}"}},"b":{"type":"streamable-http","url":"http://localhost:${PORT}/mcp"},"c":{"type":"sse","url":"http://127.0.0.1:${PORT:-1}/sse","command":"ignored"}}`,
			[]Entry{
				{Name: "a", Type: TypeHTTP, URL: "https://example.com/mcp", Headers: map[string]string{"Authorization": "Bearer s3cret"}},
				{Name: "b", Type: TypeHTTP, URL: "http://localhost:8080/mcp"},
				{Name: "c", Type: TypeSSE, URL: "http://127.0.0.1:8080/sse"},
			},
		},
		{
			"a set but empty variable wins over the default",
			`{"e":{"command":"x${EMPTY:-fallback}y"}}`,
			[]Entry{{Name: "e", Type: TypeStdio, Command: "xy"}},
		},
		{
			"names with dashes and underscores",
			`{"my-server_2":{"command":"c"}}`,
			[]Entry{{Name: "my-server_2", Type: TypeStdio, Command: "c"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseServers(json.RawMessage(tt.raw), env)
			if err != nil {
				t.Fatalf("ParseServers: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %#v\nwant %#v", got, tt.want)
			}
		})
	}
}

func TestParseServersErrors(t *testing.T) {
	env := lookupFrom(map[string]string{"HOME": "/home/me"})
	tests := []struct {
		name string
		raw  string
		want string // the error message after the ErrConfig prefix
	}{
		{"not an object", `[1]`, `mcpServers: want an object mapping names to servers, got an array`},
		{"invalid JSON", `{"a":`, `mcpServers: unexpected end of JSON input`},
		{"entry not an object", `{"fs":"npx"}`, `mcpServers.fs: want an object, got a string`},
		{"bad name", `{"my server":{"command":"x"}}`, `mcpServers["my server"]: a server name must match [A-Za-z0-9_-]+`},
		{"empty name", `{"":{"command":"x"}}`, `mcpServers[""]: a server name must match [A-Za-z0-9_-]+`},
		{"unknown type", `{"web":{"type":"websocket","url":"ws://x"}}`, `mcpServers.web.type: "websocket" is not one of stdio, http, streamable-http, sse`},
		{"type not a string", `{"web":{"type":1}}`, `mcpServers.web.type: want a string, got a number`},
		{"no command", `{"fs":{"args":["a"]}}`, `mcpServers.fs.command: a stdio server needs a command`},
		{"empty command", `{"fs":{"command":"${NOPE:-}"}}`, `mcpServers.fs.command: a stdio server needs a command`},
		{"command not a string", `{"fs":{"command":["npx"]}}`, `mcpServers.fs.command: want a string, got an array`},
		{"args not an array", `{"fs":{"command":"x","args":"a b"}}`, `mcpServers.fs.args: want an array of strings, got a string`},
		{"arg not a string", `{"fs":{"command":"x","args":["a","b",3]}}`, `mcpServers.fs.args[2]: want a string, got a number`},
		{"unset variable in args", `{"fs":{"command":"x","args":["a","b","${FOO}"]}}`, `mcpServers.fs.args[2]: ${FOO} is not set and has no default`},
		{"unset variable in command", `{"fs":{"command":"${BIN}/x"}}`, `mcpServers.fs.command: ${BIN} is not set and has no default`},
		{"env not an object", `{"fs":{"command":"x","env":["A=1"]}}`, `mcpServers.fs.env: want an object of strings, got an array`},
		{"env value not a string", `{"fs":{"command":"x","env":{"PORT":8080}}}`, `mcpServers.fs.env.PORT: want a string, got a number`},
		{"unset variable in env", `{"fs":{"command":"x","env":{"KEY":"${SECRET}"}}}`, `mcpServers.fs.env.KEY: ${SECRET} is not set and has no default`},
		{"bad env name", `{"fs":{"command":"x","env":{"A=B":"1"}}}`, `mcpServers.fs.env["A=B"]: "A=B" is not a valid environment variable name`},
		{"cwd not a string", `{"fs":{"command":"x","cwd":true}}`, `mcpServers.fs.cwd: want a string, got a boolean`},
		{"unset variable in cwd", `{"fs":{"command":"x","cwd":"${WORK}"}}`, `mcpServers.fs.cwd: ${WORK} is not set and has no default`},
		{"http without url", `{"web":{"type":"http"}}`, `mcpServers.web.url: an http server needs a url`},
		{"sse without url", `{"web":{"type":"sse"}}`, `mcpServers.web.url: an sse server needs a url`},
		{"relative url", `{"web":{"type":"http","url":"/mcp"}}`, `mcpServers.web.url: "/mcp" is not an absolute http or https URL`},
		{"websocket url", `{"web":{"type":"http","url":"ws://host/mcp"}}`, `mcpServers.web.url: "ws://host/mcp" is not an absolute http or https URL`},
		{"unset variable in url", `{"web":{"type":"http","url":"https://${HOST}/mcp"}}`, `mcpServers.web.url: ${HOST} is not set and has no default`},
		{"url not a string", `{"web":{"type":"http","url":{}}}`, `mcpServers.web.url: want a string, got an object`},
		{"headers not an object", `{"web":{"type":"http","url":"https://h","headers":"x"}}`, `mcpServers.web.headers: want an object of strings, got a string`},
		{"header value not a string", `{"web":{"type":"http","url":"https://h","headers":{"X-N":1}}}`, `mcpServers.web.headers.X-N: want a string, got a number`},
		{"unset variable in header", `{"web":{"type":"http","url":"https://h","headers":{"Authorization":"Bearer ${TOKEN}"}}}`, `mcpServers.web.headers.Authorization: ${TOKEN} is not set and has no default`},
		{"bad header name", `{"web":{"type":"http","url":"https://h","headers":{"Bad Header":"x"}}}`, `mcpServers.web.headers["Bad Header"]: "Bad Header" is not a valid HTTP header name`},
		{"header value with newline", `{"web":{"type":"http","url":"https://h","headers":{"X":"a\nb"}}}`, `mcpServers.web.headers["X"]: the value contains a line break or NUL byte`},
		{"every bad entry, by name", `{"b":{"type":"nope"},"a":{}}`, "mcpServers.a.command: a stdio server needs a command\n" + ErrConfig.Error() + `: mcpServers.b.type: "nope" is not one of stdio, http, streamable-http, sse`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseServers(json.RawMessage(tt.raw), env)
			if err == nil {
				t.Fatalf("ParseServers succeeded, want error %q", tt.want)
			}
			if !errors.Is(err, ErrConfig) {
				t.Errorf("error %v does not wrap ErrConfig", err)
			}
			got := strings.TrimPrefix(err.Error(), ErrConfig.Error()+": ")
			if got != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
}

func TestParseServersNilLookup(t *testing.T) {
	_, err := ParseServers(json.RawMessage(`{"a":{"command":"${X}"}}`), nil)
	if !errors.Is(err, ErrConfig) {
		t.Fatalf("got %v, want an ErrConfig error", err)
	}
	got, err := ParseServers(json.RawMessage(`{"a":{"command":"${X:-run}"}}`), nil)
	if err != nil || len(got) != 1 || got[0].Command != "run" {
		t.Fatalf("got %v, %v; want command run", got, err)
	}
}

func TestExpand(t *testing.T) {
	env := lookupFrom(map[string]string{"A": "1", "B": "two", "EMPTY": "", "REC": "${A}"})
	tests := []struct {
		in, want, missing string
	}{
		{"plain", "plain", ""},
		{"${A}", "1", ""},
		{"x${A}y${B}z", "x1ytwoz", ""},
		{"${C:-three}", "three", ""},
		{"${C:-}", "", ""},
		{"${EMPTY:-default}", "", ""},
		{"${A:-default}", "1", ""},
		{"${C:-a:-b}", "a:-b", ""},
		{"${REC}", "${A}", ""}, // values are not expanded again
		{"$A and $", "$A and $", ""},
		{"${}", "${}", ""},
		{"${A", "${A", ""},
		{"${A}${", "1${", ""},
		{"${${A}}", "${${A}}", "${A"},
		{"${MISSING}", "${MISSING}", "MISSING"},
		{"a${M1}b${M2}", "a${M1}b${M2}", "M1"},
		{"${ A }", "${ A }", " A "},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, missing := Expand(tt.in, env)
			if got != tt.want || missing != tt.missing {
				t.Errorf("Expand(%q) = %q, %q; want %q, %q", tt.in, got, missing, tt.want, tt.missing)
			}
		})
	}
}

func FuzzExpand(f *testing.F) {
	for _, s := range []string{"", "plain", "${A}", "${A:-b}", "${", "${}", "x${A}y${B:-c}z", "${${A}}", "$${A}}"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		none := func(string) (string, bool) { return "", false }
		all := func(string) (string, bool) { return "v", true }
		out, missing := Expand(s, none)
		if !strings.Contains(s, "${") && (out != s || missing != "") {
			t.Fatalf("Expand(%q) changed text without variables: %q, %q", s, out, missing)
		}
		if !strings.Contains(s, ":-") && out != s {
			t.Fatalf("Expand(%q) with nothing set and no defaults = %q, want it unchanged", s, out)
		}
		if _, missing := Expand(s, all); missing != "" {
			t.Fatalf("Expand(%q) with everything set reports %q missing", s, missing)
		}
		if missing != "" && !strings.Contains(s, "${"+missing) {
			t.Fatalf("Expand(%q) reports %q missing, which is not in the input", s, missing)
		}
	})
}

func FuzzParseServers(f *testing.F) {
	seeds := []string{
		`{}`, `null`, `[]`, `{"a":{"command":"x"}}`,
		`{"a":{"command":"x","args":["${A:-1}"],"env":{"K":"${B}"},"cwd":"/"}}`,
		`{"w":{"type":"http","url":"https://h/${P:-x}","headers":{"A":"b"}}}`,
		`{"s":{"type":"sse","url":"http://h"}}`, `{"b":{"type":"x"}}`, `{"a b":{}}`,
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	lookup := lookupFrom(map[string]string{"A": "1", "B": "2"})
	f.Fuzz(func(t *testing.T, raw []byte) {
		entries, err := ParseServers(raw, lookup)
		if err != nil {
			if !errors.Is(err, ErrConfig) {
				t.Fatalf("error %v does not wrap ErrConfig", err)
			}
			return
		}
		if !slices.IsSortedFunc(entries, func(a, b Entry) int { return strings.Compare(a.Name, b.Name) }) {
			t.Fatalf("entries not sorted: %v", entries)
		}
		for _, e := range entries {
			if !validName(e.Name) {
				t.Fatalf("invalid name %q accepted", e.Name)
			}
			switch e.Type {
			case TypeStdio:
				if e.Command == "" || e.URL != "" || e.Headers != nil {
					t.Fatalf("bad stdio entry %#v", e)
				}
			case TypeHTTP, TypeSSE:
				if e.URL == "" || e.Command != "" || e.Args != nil || e.Env != nil {
					t.Fatalf("bad %s entry %#v", e.Type, e)
				}
			default:
				t.Fatalf("type %q accepted", e.Type)
			}
		}
		again, err := ParseServers(raw, lookup)
		if err != nil || !reflect.DeepEqual(again, entries) {
			t.Fatalf("parsing again gave %v, %v", again, err)
		}
	})
}
