package policy

import (
	"fmt"
	"net"
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
