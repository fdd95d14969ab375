package upstreams

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/foldproxy/foldproxy/policy/jsonscan"
	"github.com/foldproxy/foldproxy/policy/redact"
)

// ErrConfig is wrapped by every error ParseServers returns; the message names
// the entry and the field that was wrong.
var ErrConfig = errors.New("invalid mcpServers configuration")

// Transport types of an Entry after parsing. "streamable-http" in a
// configuration file is read as TypeHTTP.
const (
	TypeStdio = "stdio"
	TypeHTTP  = "http"
	TypeSSE   = "sse"
)

// Entry is one upstream MCP server as configured in an mcpServers object.
// Variables are already expanded. Type is always one of TypeStdio, TypeHTTP
// and TypeSSE; only the fields of its transport are filled: Command, Args,
// Env and Cwd for stdio, URL and Headers for http and sse.
type Entry struct {
	Name    string
	Type    string
	Command string
	Args    []string
	Env     map[string]string
	Cwd     string
	URL     string
	Headers map[string]string
}

// Credentials are the values of e that are credentials and must never be
// written anywhere foldproxy writes (policy/redact): its URL's userinfo and
// query parameters named like keys or tokens, headers named like
// credentials, environment variables and arguments named like credentials
// and the credentials of URLs among them.
func (e Entry) Credentials() []string {
	out := redact.FromURL(e.URL)
	out = append(out, redact.FromHeaders(e.Headers)...)
	out = append(out, redact.FromEnv(e.Env)...)
	return append(out, redact.FromArgs(e.Args)...)
}

// ParseServers reads a Claude Code mcpServers object, so that an existing
// .mcp.json works unchanged, and returns its entries sorted by name.
//
// type is "stdio" when absent, else "http", "streamable-http" (the same as
// "http") or "sse". stdio entries need a command; http and sse entries need an
// absolute http or https url. ${VAR} and ${VAR:-default} are expanded through
// lookup in command, args, env values, cwd, url and header values, as Claude
// Code does; a variable that is not set and has no default is an error.
// Fields foldproxy does not know are ignored, as Claude Code adds some, but a
// known field of the wrong JSON type is an error. A nil lookup sees no
// variables at all. An empty or null raw means no servers.
func ParseServers(raw json.RawMessage, lookup func(string) (string, bool)) ([]Entry, error) {
	if lookup == nil {
		lookup = func(string) (string, bool) { return "", false }
	}
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 || string(trimmed) == "null" {
		return nil, nil
	}
	if trimmed[0] != '{' {
		return nil, fmt.Errorf("%w: mcpServers: want an object mapping names to servers, got %s", ErrConfig, jsonscan.Kind(trimmed))
	}
	var servers map[string]json.RawMessage
	if err := json.Unmarshal(trimmed, &servers); err != nil {
		return nil, fmt.Errorf("%w: mcpServers: %v", ErrConfig, err)
	}
	names := make([]string, 0, len(servers))
	for name := range servers {
		names = append(names, name)
	}
	slices.Sort(names)
	entries := make([]Entry, 0, len(names))
	var errs []error
	for _, name := range names {
		e, err := parseEntry(name, servers[name], lookup)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		entries = append(entries, e)
	}
	if len(errs) > 0 {
		// Every bad entry at once, one per line, so that a user fixes them
		// in one go.
		return nil, errors.Join(errs...)
	}
	return entries, nil
}

// validName reports whether s may name an upstream: [A-Za-z0-9_-]+.
func validName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// entryParser collects what parsing one entry needs, so that each error can
// name its field.
type entryParser struct {
	name   string
	fields map[string]json.RawMessage
	lookup func(string) (string, bool)
}

func (p *entryParser) errorf(field, format string, args ...any) error {
	return fmt.Errorf("%w: mcpServers.%s.%s: %s", ErrConfig, p.name, field, fmt.Sprintf(format, args...))
}

func parseEntry(name string, raw json.RawMessage, lookup func(string) (string, bool)) (Entry, error) {
	if !validName(name) {
		return Entry{}, fmt.Errorf("%w: mcpServers[%q]: a server name must match [A-Za-z0-9_-]+", ErrConfig, name)
	}
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return Entry{}, fmt.Errorf("%w: mcpServers.%s: want an object, got %s", ErrConfig, name, jsonscan.Kind(raw))
	}
	p := &entryParser{name: name, lookup: lookup}
	if err := json.Unmarshal(raw, &p.fields); err != nil {
		return Entry{}, fmt.Errorf("%w: mcpServers.%s: %v", ErrConfig, name, err)
	}
	e := Entry{Name: name}
	typ, _, err := p.str("type", false)
	if err != nil {
		return Entry{}, err
	}
	switch typ {
	case "", TypeStdio:
		e.Type = TypeStdio
	case TypeHTTP, "streamable-http":
		e.Type = TypeHTTP
	case TypeSSE:
		e.Type = TypeSSE
	default:
		return Entry{}, p.errorf("type", "%q is not one of stdio, http, streamable-http, sse", typ)
	}
	if e.Type == TypeStdio {
		var ok bool
		if e.Command, ok, err = p.str("command", true); err != nil {
			return Entry{}, err
		}
		if !ok || e.Command == "" {
			return Entry{}, p.errorf("command", "a stdio server needs a command")
		}
		if e.Args, err = p.strList("args"); err != nil {
			return Entry{}, err
		}
		if e.Env, err = p.strMap("env", func(k string) string {
			if k == "" || strings.ContainsAny(k, "=\x00") {
				return "not a valid environment variable name"
			}
			return ""
		}); err != nil {
			return Entry{}, err
		}
		for k, v := range e.Env {
			if strings.ContainsRune(v, 0) {
				return Entry{}, p.errorf("env."+k, "the value contains a NUL byte")
			}
		}
		if e.Cwd, _, err = p.str("cwd", true); err != nil {
			return Entry{}, err
		}
		return e, nil
	}
	var ok bool
	if e.URL, ok, err = p.str("url", true); err != nil {
		return Entry{}, err
	}
	if !ok || e.URL == "" {
		return Entry{}, p.errorf("url", "an %s server needs a url", e.Type)
	}
	u, perr := url.Parse(e.URL)
	if perr != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return Entry{}, p.errorf("url", "%q is not an absolute http or https URL", e.URL)
	}
	if e.Headers, err = p.strMap("headers", func(k string) string {
		if !validHeaderName(k) {
			return "not a valid HTTP header name"
		}
		return ""
	}); err != nil {
		return Entry{}, err
	}
	for k, v := range e.Headers {
		if strings.ContainsAny(v, "\r\n\x00") {
			return Entry{}, p.errorf(fmt.Sprintf("headers[%q]", k), "the value contains a line break or NUL byte")
		}
	}
	return e, nil
}

// str reads a string field. ok is false when it is absent or null. With
// expand, variables are expanded.
func (p *entryParser) str(field string, expand bool) (s string, ok bool, err error) {
	raw, present := p.fields[field]
	if !present || isNull(raw) {
		return "", false, nil
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", false, p.errorf(field, "want a string, got %s", jsonscan.Kind(raw))
	}
	if expand {
		if s, err = p.expand(field, s); err != nil {
			return "", false, err
		}
	}
	return s, true, nil
}

// strList reads an array of strings and expands each.
func (p *entryParser) strList(field string) ([]string, error) {
	raw, present := p.fields[field]
	if !present || isNull(raw) {
		return nil, nil
	}
	var items []json.RawMessage
	if t := bytes.TrimSpace(raw); len(t) == 0 || t[0] != '[' || json.Unmarshal(t, &items) != nil {
		return nil, p.errorf(field, "want an array of strings, got %s", jsonscan.Kind(raw))
	}
	out := make([]string, 0, len(items))
	for i, item := range items {
		f := field + "[" + strconv.Itoa(i) + "]"
		var s string
		if err := json.Unmarshal(item, &s); err != nil {
			return nil, p.errorf(f, "want a string, got %s", jsonscan.Kind(item))
		}
		s, err := p.expand(f, s)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// strMap reads an object of strings, checks its keys with badKey (which
// returns why a key is refused, or "") and expands each value.
func (p *entryParser) strMap(field string, badKey func(string) string) (map[string]string, error) {
	raw, present := p.fields[field]
	if !present || isNull(raw) {
		return nil, nil
	}
	var items map[string]json.RawMessage
	if t := bytes.TrimSpace(raw); len(t) == 0 || t[0] != '{' || json.Unmarshal(t, &items) != nil {
		return nil, p.errorf(field, "want an object of strings, got %s", jsonscan.Kind(raw))
	}
	keys := make([]string, 0, len(items))
	for k := range items {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make(map[string]string, len(items))
	for _, k := range keys {
		f := field + "." + k
		if !validName(k) {
			f = fmt.Sprintf("%s[%q]", field, k)
		}
		if why := badKey(k); why != "" {
			return nil, p.errorf(f, "%q is %s", k, why)
		}
		var s string
		if err := json.Unmarshal(items[k], &s); err != nil {
			return nil, p.errorf(f, "want a string, got %s", jsonscan.Kind(items[k]))
		}
		s, err := p.expand(f, s)
		if err != nil {
			return nil, err
		}
		out[k] = s
	}
	return out, nil
}

func (p *entryParser) expand(field, s string) (string, error) {
	out, missing := Expand(s, p.lookup)
	if missing != "" {
		return "", p.errorf(field, "${%s} is not set and has no default", missing)
	}
	return out, nil
}

// Expand replaces ${VAR} and ${VAR:-default} in s the way Claude Code does:
// the text between "${" and the next "}" is a variable name, optionally
// followed by ":-" and a default used when lookup does not find the
// variable. A set but empty variable is used as it is. Anything else,
// "$VAR" or an unterminated "${", is left alone. missing names the first
// variable that is not set and has no default; out is then incomplete.
func Expand(s string, lookup func(string) (string, bool)) (out, missing string) {
	if !strings.Contains(s, "${") {
		return s, ""
	}
	var b strings.Builder
	rest := s
	for {
		i := strings.Index(rest, "${")
		if i < 0 {
			b.WriteString(rest)
			break
		}
		j := strings.IndexByte(rest[i+2:], '}')
		if j <= 0 {
			// No closing brace, or "${}": Claude Code's pattern needs at
			// least one character inside, so this is literal text.
			if j < 0 {
				b.WriteString(rest)
				break
			}
			b.WriteString(rest[:i+3])
			rest = rest[i+3:]
			continue
		}
		b.WriteString(rest[:i])
		content := rest[i+2 : i+2+j]
		rest = rest[i+3+j:]
		name, def, hasDef := strings.Cut(content, ":-")
		if v, ok := lookup(name); ok {
			b.WriteString(v)
		} else if hasDef {
			b.WriteString(def)
		} else {
			if missing == "" {
				missing = name
			}
			b.WriteString("${" + content + "}")
		}
	}
	return b.String(), missing
}

func isNull(raw json.RawMessage) bool {
	return string(bytes.TrimSpace(raw)) == "null"
}

// validHeaderName reports whether k is an RFC 9110 token.
func validHeaderName(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
			continue
		}
		if !strings.ContainsRune("!#$%&'*+-.^_`|~", rune(c)) {
			return false
		}
	}
	return true
}
