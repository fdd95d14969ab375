package guard

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// Origins is the set of extra Origin values a front accepts, normalized
// by NormalizeOrigin.
type Origins map[string]bool

// NewOrigins normalizes a front's configured origins into a set. The
// error names the entry that is not an origin.
func NewOrigins(origins []string) (Origins, error) {
	set := make(Origins, len(origins))
	for _, o := range origins {
		norm, err := NormalizeOrigin(o)
		if err != nil {
			return nil, fmt.Errorf("AllowedOrigins entry %q: %w", o, err)
		}
		set[norm] = true
	}
	return set, nil
}

// Refusal says why r is refused against DNS rebinding, "" when it is
// not. With loopback the Host header must name a loopback host. An Origin
// header, when present, must be one of allowed, or a loopback origin
// (with loopback), or the request's own host (without loopback). Every
// front on the HTTP listener applies it.
func Refusal(r *http.Request, loopback bool, allowed Origins) string {
	if loopback && !LoopbackHost(HostOnly(r.Host)) {
		return fmt.Sprintf("forbidden: Host %q is not a loopback host", r.Host)
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return ""
	}
	norm, err := NormalizeOrigin(origin)
	if err == nil && (allowed[norm] || originMatches(norm, r.Host, loopback)) {
		return ""
	}
	return fmt.Sprintf("forbidden: Origin %q is not allowed", origin)
}

func originMatches(norm, host string, loopback bool) bool {
	u, err := url.Parse(norm)
	if err != nil {
		return false
	}
	if loopback {
		return LoopbackHost(u.Hostname())
	}
	return strings.EqualFold(u.Host, host)
}

// IsLoopback reports whether addr, a listen address such as
// "127.0.0.1:8080", "[::1]:0" or "localhost:9", names a loopback host.
func IsLoopback(addr string) bool {
	host := HostOnly(addr)
	return host != "" && LoopbackHost(host)
}

// HostOnly returns the host of "host:port", "[v6]:port" or a bare host.
func HostOnly(hostport string) string {
	if host, _, err := net.SplitHostPort(hostport); err == nil {
		return host
	}
	return strings.TrimSuffix(strings.TrimPrefix(hostport, "["), "]")
}

// LoopbackHost reports whether host (no port) is localhost or a loopback
// IP (127.0.0.0/8, ::1).
func LoopbackHost(host string) bool {
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// NormalizeOrigin checks that o is an origin (scheme://host[:port], no
// path) and returns it lower-cased.
func NormalizeOrigin(o string) (string, error) {
	u, err := url.Parse(strings.TrimSuffix(o, "/"))
	if err != nil {
		return "", fmt.Errorf("not a URL: %w", err)
	}
	if u.Scheme == "" || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return "", errors.New("an origin is scheme://host[:port] with nothing after it")
	}
	return strings.ToLower(u.Scheme + "://" + u.Host), nil
}
