package policy

import (
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// Proxy configures the forward proxy of transparent mode (serve
// --proxy-listen, or ProxyListen): an HTTP proxy with CONNECT that
// intercepts the hosts named here and tunnels every other one untouched.
type Proxy struct {
	// InterceptHosts are the model API hosts whose TLS foldproxy terminates
	// with its local CA, to run their requests through the model front's
	// context manager. An entry is a host name or IP address, optionally
	// with a port ("localhost:8443"; without one it matches every allowed
	// port) or a leading "*." for every subdomain. Default
	// api.anthropic.com and api.openai.com.
	InterceptHosts []string `json:"interceptHosts,omitempty"`
	// AllowPorts are the ports CONNECT may reach; any other is refused.
	// Default [443].
	AllowPorts []int `json:"allowPorts,omitempty"`
	// ExtraRootsFile is a PEM file of root certificates trusted for
	// intercepted hosts besides the system's (a company's TLS inspection
	// CA, a test CA). Relative paths are relative to the config file.
	ExtraRootsFile string `json:"extraRootsFile,omitempty"`
	// MCP are the remote MCP servers whose traffic foldproxy intercepts:
	// their results go through the same intercept chain as the upstreams
	// of the MCP front (scrub, tokens, budget, audit, metrics), while the
	// client keeps its own MCP session and OAuth tokens.
	MCP []RemoteMCP `json:"mcp,omitempty"`
}

// RemoteMCP is one remote MCP server intercepted in transparent mode.
type RemoteMCP struct {
	// URL is the server's endpoint as the client is configured with it:
	// the streamable HTTP endpoint ("https://mcp.example.com/mcp") or the
	// legacy SSE stream ("https://mcp.example.com/sse"), https only. Its
	// host and port are intercepted; requests to other paths of that host
	// (OAuth metadata, authorization, token) are relayed untouched.
	URL string `json:"url"`
	// Name names the server in the audit log, the metrics and recall
	// handles, as an mcpServers entry name does. Default: the URL's host.
	Name string `json:"name,omitempty"`
	// FoldTools adds foldproxy's fold tools (branch_create, branch_return,
	// branch_status, branch_recall) to this server's tools/list and answers
	// them itself. Default true; with several servers, keep it on one.
	FoldTools *bool `json:"foldTools,omitempty"`
}

// Folds reports whether the server carries the fold tools.
func (r RemoteMCP) Folds() bool { return r.FoldTools == nil || *r.FoldTools }

// ParseRemoteURL checks a RemoteMCP URL and returns it parsed, with the
// host lower case and the port explicit.
func ParseRemoteURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("is not a URL: %v", err)
	}
	if u.Scheme != "https" {
		return nil, fmt.Errorf("must be an https:// URL (transparent mode intercepts TLS)")
	}
	if u.Hostname() == "" || u.User != nil || u.Fragment != "" {
		return nil, fmt.Errorf("must be https://host[:port]/path, without user or fragment")
	}
	if _, _, err := ParseHostPattern(u.Hostname()); err != nil || strings.HasPrefix(u.Hostname(), "*.") {
		return nil, fmt.Errorf("has a host that is not valid")
	}
	port := u.Port()
	if port == "" {
		port = "443"
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return nil, fmt.Errorf("has a bad port %q", port)
	}
	if u.Path == "" {
		u.Path = "/"
	}
	u.Host = net.JoinHostPort(strings.ToLower(u.Hostname()), port)
	return u, nil
}

// Proxy defaults.
var (
	DefaultInterceptHosts = []string{"api.anthropic.com", "api.openai.com"}
	DefaultAllowPorts     = []int{443}
)

func (p *Proxy) fill() {
	if p.InterceptHosts == nil {
		p.InterceptHosts = append([]string(nil), DefaultInterceptHosts...)
	}
	if len(p.AllowPorts) == 0 {
		p.AllowPorts = append([]int(nil), DefaultAllowPorts...)
	}
}

func (p Proxy) validate() []error {
	var errs []error
	for i, h := range p.InterceptHosts {
		if _, _, err := ParseHostPattern(h); err != nil {
			errs = append(errs, invalid(fmt.Sprintf("proxy.interceptHosts[%d]", i), "%q %v", h, err))
		}
	}
	for i, port := range p.AllowPorts {
		if port < 1 || port > 65535 {
			errs = append(errs, invalid(fmt.Sprintf("proxy.allowPorts[%d]", i), "%d is not a TCP port (1-65535)", port))
		}
	}
	names := map[string]int{}
	for i, m := range p.MCP {
		field := fmt.Sprintf("proxy.mcp[%d]", i)
		u, err := ParseRemoteURL(m.URL)
		if err != nil {
			errs = append(errs, invalid(field+".url", "%q %v", m.URL, err))
			continue
		}
		if n, _ := strconv.Atoi(u.Port()); !slices.Contains(p.AllowPorts, n) {
			errs = append(errs, invalid(field+".url", "port %d is not in proxy.allowPorts %v: CONNECT to it would be refused", n, p.AllowPorts))
		}
		name := m.Name
		if name == "" {
			name = u.Hostname()
		}
		if strings.ContainsAny(name, " \t\r\n\"") || len(name) > 64 {
			errs = append(errs, invalid(field+".name", "%q must be at most 64 characters, without spaces or quotes", name))
		}
		if j, dup := names[name]; dup {
			errs = append(errs, invalid(field+".name", "%q is already the name of proxy.mcp[%d] (set name to tell them apart)", name, j))
		}
		names[name] = i
	}
	return errs
}

// ParseHostPattern splits an InterceptHosts entry into its lower-case host
// pattern and its port (0: any allowed port), or says what is wrong with it.
func ParseHostPattern(s string) (host string, port int, err error) {
	if s == "" || strings.TrimSpace(s) != s {
		return "", 0, fmt.Errorf("must be a host name, without spaces")
	}
	if strings.Contains(s, "://") || strings.ContainsAny(s, "/?#@") {
		return "", 0, fmt.Errorf("must be a host name (and port), not a URL")
	}
	host = s
	if h, p, err := net.SplitHostPort(s); err == nil {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return "", 0, fmt.Errorf("has a bad port %q", p)
		}
		host, port = h, n
	} else if strings.Count(s, ":") == 1 {
		return "", 0, fmt.Errorf("has a bad port")
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	name := strings.TrimPrefix(host, "*.")
	if name == "" || strings.Contains(name, "*") {
		return "", 0, fmt.Errorf("may use * only as a whole first label (\"*.example.com\")")
	}
	if net.ParseIP(name) == nil {
		for _, label := range strings.Split(name, ".") {
			if label == "" || len(label) > 63 || strings.Trim(label, "abcdefghijklmnopqrstuvwxyz0123456789-_") != "" {
				return "", 0, fmt.Errorf("is not a valid host name")
			}
		}
	} else if name != host {
		return "", 0, fmt.Errorf("may not put *. before an IP address")
	}
	return host, port, nil
}
