package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"

	"github.com/foldproxy/foldproxy/policy"
	"github.com/foldproxy/foldproxy/upstreams"
)

// Loop guards. A request foldproxy forwards must not come back to it: a
// model URL set to foldproxy's own --listen address, or a CONNECT to its
// own proxy port, would each make every request a new one, without end
// (20,000 descriptors and 448 MB in 9 s before this guard). Where the
// configuration makes the loop certain (a literal address or localhost
// and the port foldproxy listens on) serve refuses to start
// (checkLoops); otherwise every connection foldproxy opens for a
// forwarded request is checked once made, and one that reached its own
// listener is closed before a byte is sent (selfListeners.guard).

// errLoop is wrapped by the errors of a connection foldproxy refused to
// make to itself.
var errLoop = errors.New("foldproxy would send the request to itself")

// dialFunc is net.Dialer.DialContext's shape.
type dialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// selfListeners are the addresses of foldproxy's own forwarding listeners
// (--listen, --proxy-listen), as they listen. Safe for concurrent use; nil
// knows none.
type selfListeners struct {
	mu    sync.Mutex
	addrs []*net.TCPAddr
}

// add records a listener's address.
func (s *selfListeners) add(a net.Addr) {
	if ta, ok := a.(*net.TCPAddr); ok && s != nil {
		s.mu.Lock()
		s.addrs = append(s.addrs, ta)
		s.mu.Unlock()
	}
}

// owns reports whether a connection to remote reaches one of the
// listeners: the same port, and the same address or, for a listener on
// every address, one of this machine's.
func (s *selfListeners) owns(remote net.Addr) bool {
	ra, ok := remote.(*net.TCPAddr)
	if !ok || s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range s.addrs {
		if l.Port != ra.Port {
			continue
		}
		if l.IP.Equal(ra.IP) || l.IP.IsUnspecified() && localIP(ra.IP) {
			return true
		}
	}
	return false
}

// localIP reports whether ip is one of this machine's addresses.
func localIP(ip net.IP) bool {
	if ip.IsLoopback() || ip.IsUnspecified() {
		return true
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
			return true
		}
	}
	return false
}

// guard wraps dial so that a connection that reaches one of the listeners
// is closed at once and refused with an error naming what to change
// (what: the setting or request that led there).
func (s *selfListeners) guard(dial dialFunc, what string) dialFunc {
	if s == nil {
		return dial
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		if s.owns(c.RemoteAddr()) {
			c.Close()
			return nil, fmt.Errorf("%w: %s reaches %s, foldproxy's own listener, so the request would come back to foldproxy again and again; %s",
				errLoop, addr, c.RemoteAddr(), what)
		}
		return c, nil
	}
}

// checkLoops refuses a configuration that certainly sends requests back
// to foldproxy's own --listen address listen (a port of 0 is not known
// yet: the check runs again once it listens): a model URL or an HTTP
// upstream's URL naming it by a literal address, localhost, or, when it
// listens on every address, one of this machine's.
func checkLoops(listen string, st policy.Settings, servers []upstreams.Entry) error {
	if listen == "" {
		return nil
	}
	lhost, lport, err := net.SplitHostPort(listen)
	if err != nil || lport == "0" {
		return nil
	}
	type target struct{ setting, url, fix string }
	targets := []target{
		{"model.anthropicURL", st.Model.AnthropicURL, "set it to the Anthropic API (https://api.anthropic.com, the default)"},
		{"model.openaiURL", st.Model.OpenAIURL, "set it to the OpenAI API (https://api.openai.com, the default)"},
	}
	for _, e := range servers {
		if e.URL != "" {
			targets = append(targets, target{"mcpServers." + e.Name + ".url", e.URL, "foldproxy cannot be its own upstream: remove the entry"})
		}
	}
	for _, t := range targets {
		u, err := url.Parse(t.url)
		if err != nil || u.Host == "" {
			continue
		}
		port := u.Port()
		if port == "" {
			port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
		}
		if port == lport && sameHost(u.Hostname(), lhost) {
			return fmt.Errorf("%s %s is foldproxy's own --listen address %s: every request sent there would come back to foldproxy, without end; %s",
				t.setting, t.url, listen, t.fix)
		}
	}
	return nil
}

// sameHost reports whether host (of a URL) certainly names the listen
// host lhost: equal addresses, localhost and a loopback address, or any
// address of this machine when lhost is every address.
func sameHost(host, lhost string) bool {
	loopback := func(h string) bool {
		if strings.EqualFold(h, "localhost") {
			return true
		}
		ip := net.ParseIP(h)
		return ip != nil && ip.IsLoopback()
	}
	lip := net.ParseIP(lhost)
	if lhost == "" || lip != nil && lip.IsUnspecified() {
		if loopback(host) {
			return true
		}
		ip := net.ParseIP(host)
		return ip != nil && localIP(ip)
	}
	if ip := net.ParseIP(host); ip != nil && lip != nil {
		return ip.Equal(lip)
	}
	return strings.EqualFold(host, lhost) || strings.EqualFold(host, "localhost") && loopback(lhost) ||
		strings.EqualFold(lhost, "localhost") && loopback(host)
}
