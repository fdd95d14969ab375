// Package redact keeps the credentials of foldproxy's configuration out of
// every message it writes: logs (stderr, foldproxy.log), the errors and
// instructions the agent reads, the audit log.
//
// The credentials are values from the configuration that foldproxy must
// send on (an upstream URL's userinfo and its query parameters named like
// keys or tokens, credential headers, credential environment variables and
// arguments, foldproxy's own token and API keys): gitleaks' rules do not
// know their shape, but foldproxy knows the values themselves. A Redactor
// replaces each of them, wherever it occurs, by Marker.
//
// It lives under policy/ because policy is at the bottom of the dependency
// table (upstreams, proxy and cmd import it); it imports nothing of
// foldproxy's.
package redact

import (
	"context"
	"errors"
	"log/slog"
	"net/url"
	"slices"
	"strings"
)

// Marker replaces a credential.
const Marker = "[REDACTED:credential]"

// minLen is the shortest value redacted: shorter ones occur by chance in
// too many messages, and are no secret worth the name.
const minLen = 4

// Redactor replaces known credential values in text. The zero value and
// nil redact nothing. It is safe for concurrent use.
type Redactor struct {
	r *strings.Replacer
}

// New returns a Redactor of the given values; empty and short ones are
// left out, and the longer of two overlapping values is replaced whole.
func New(values ...string) *Redactor {
	var keep []string
	for _, v := range values {
		if len(v) >= minLen {
			keep = append(keep, v)
		}
	}
	if len(keep) == 0 {
		return &Redactor{}
	}
	// The replacer tries its old strings in argument order: longest first.
	slices.SortFunc(keep, func(a, b string) int { return len(b) - len(a) })
	keep = slices.Compact(keep)
	pairs := make([]string, 0, 2*len(keep))
	for _, v := range keep {
		pairs = append(pairs, v, Marker)
	}
	return &Redactor{r: strings.NewReplacer(pairs...)}
}

// Empty reports whether r redacts nothing.
func (r *Redactor) Empty() bool { return r == nil || r.r == nil }

// String returns s with every credential replaced by Marker.
func (r *Redactor) String(s string) string {
	if r.Empty() {
		return s
	}
	return r.r.Replace(s)
}

// Error returns err itself when its text holds no credential, else an
// error with the text redacted that still matches what err matched
// (errors.Is), but whose original (and its text) is not reachable.
func (r *Redactor) Error(err error) error {
	if err == nil || r.Empty() {
		return err
	}
	msg := err.Error()
	clean := r.r.Replace(msg)
	if clean == msg {
		return err
	}
	return &redactedError{msg: clean, orig: err}
}

type redactedError struct {
	msg  string
	orig error
}

func (e *redactedError) Error() string        { return e.msg }
func (e *redactedError) Is(target error) bool { return errors.Is(e.orig, target) }

// Handler returns a slog.Handler that redacts every record's message and
// attributes (strings, errors, and the values of anything else as it
// would be printed) before h handles it. With nothing to redact it is h.
func (r *Redactor) Handler(h slog.Handler) slog.Handler {
	if r.Empty() {
		return h
	}
	return &handler{h: h, r: r}
}

type handler struct {
	h slog.Handler
	r *Redactor
}

func (h *handler) Enabled(ctx context.Context, l slog.Level) bool { return h.h.Enabled(ctx, l) }

func (h *handler) Handle(ctx context.Context, rec slog.Record) error {
	out := slog.NewRecord(rec.Time, rec.Level, h.r.String(rec.Message), rec.PC)
	rec.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(h.attr(a))
		return true
	})
	return h.h.Handle(ctx, out)
}

func (h *handler) WithAttrs(as []slog.Attr) slog.Handler {
	clean := make([]slog.Attr, len(as))
	for i, a := range as {
		clean[i] = h.attr(a)
	}
	return &handler{h: h.h.WithAttrs(clean), r: h.r}
}

func (h *handler) WithGroup(name string) slog.Handler {
	return &handler{h: h.h.WithGroup(name), r: h.r}
}

// attr redacts one attribute's value.
func (h *handler) attr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, h.r.String(v.String()))
	case slog.KindGroup:
		g := v.Group()
		clean := make([]any, len(g))
		for i, x := range g {
			clean[i] = h.attr(x)
		}
		return slog.Group(a.Key, clean...)
	case slog.KindAny:
		if err, ok := v.Any().(error); ok {
			return slog.String(a.Key, h.r.String(err.Error()))
		}
		s := v.String()
		if c := h.r.String(s); c != s {
			return slog.String(a.Key, c)
		}
	}
	return slog.Attr{Key: a.Key, Value: v}
}

// credentialWords are the parts of a name (of a query parameter, a header,
// an environment variable, an argument) that make its value a credential.
var credentialWords = []string{"key", "token", "secret", "passw", "pwd", "auth", "credential", "cookie", "session", "signature", "private", "bearer", "jwt"}

// CredentialName reports whether a name (api_key, X-Api-Key, GITHUB_TOKEN,
// --client-secret, Authorization, an Azure SAS "sig") says its value is a
// credential.
func CredentialName(name string) bool {
	n := strings.ToLower(strings.TrimLeft(name, "-"))
	if n == "sig" || strings.HasSuffix(n, "_sig") {
		return true
	}
	for _, w := range credentialWords {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}

// FromURL returns the credentials of a URL: its password, its user when
// there is no password (a token as the user, https://TOKEN@host), and the
// values of query parameters named like credentials. Anything that does
// not parse as a URL gives nothing.
func FromURL(raw string) []string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return nil
	}
	var out []string
	if u.User != nil {
		if p, ok := u.User.Password(); ok {
			out = append(out, p, url.QueryEscape(p), url.PathEscape(p))
		} else if n := u.User.Username(); n != "" {
			out = append(out, n, url.QueryEscape(n))
		}
	}
	for k, vs := range u.Query() {
		if !CredentialName(k) {
			continue
		}
		for _, v := range vs {
			out = append(out, v, url.QueryEscape(v))
		}
	}
	return out
}

// FromHeaders returns the values of headers named like credentials
// (Authorization, X-Api-Key, Cookie...), and for "Scheme value" the value
// alone too (Bearer tokens).
func FromHeaders(h map[string]string) []string {
	var out []string
	for k, v := range h {
		if !CredentialName(k) {
			continue
		}
		out = append(out, v)
		if _, tok, ok := strings.Cut(strings.TrimSpace(v), " "); ok {
			out = append(out, strings.TrimSpace(tok))
		}
	}
	return out
}

// FromEnv returns the values of environment variables named like
// credentials, and the credentials of URLs in any value
// (DATABASE_URL=postgres://user:pass@host/db).
func FromEnv(env map[string]string) []string {
	var out []string
	for k, v := range env {
		if CredentialName(k) {
			out = append(out, v)
		}
		out = append(out, FromURL(v)...)
	}
	return out
}

// FromArgs returns the credentials of a command line: the value of an
// argument named like a credential (--api-key=V, or --token V), and those
// of URLs among the arguments.
func FromArgs(args []string) []string {
	var out []string
	for i, a := range args {
		out = append(out, FromURL(a)...)
		if !strings.HasPrefix(a, "-") {
			continue
		}
		name, val, eq := strings.Cut(a, "=")
		if !CredentialName(name) {
			continue
		}
		switch {
		case eq:
			out = append(out, val)
		case i+1 < len(args) && !strings.HasPrefix(args[i+1], "-"):
			out = append(out, args[i+1])
		}
	}
	return out
}
