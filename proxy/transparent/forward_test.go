package transparent

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// newTestForward runs a forward proxy whose model front is a recorder of
// the base URL and path it served.
func newTestForward(t *testing.T, opts ForwardOptions) (*ForwardProxy, *httptest.Server, *[]string) {
	t.Helper()
	if opts.CA == nil {
		ca, _, err := LoadOrCreateCA(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		opts.CA = ca
	}
	var served []string
	if opts.Model == nil {
		opts.Model = func(base string) (http.Handler, error) {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				served = append(served, base+r.URL.Path)
				io.WriteString(w, "front "+base)
			}), nil
		}
	}
	if opts.AllowPorts == nil {
		opts.AllowPorts = []int{443}
	}
	fp, err := NewForwardProxy(opts)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(fp)
	t.Cleanup(func() { srv.Close(); fp.Close() })
	return fp, srv, &served
}

// connect sends CONNECT target to the proxy and returns its answer and the
// connection (open when the answer is 200).
func connect(t *testing.T, proxyURL, target, auth string) (*http.Response, net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(proxyURL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	req := "CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\n"
	if auth != "" {
		req += "Proxy-Authorization: " + auth + "\r\n"
	}
	if _, err := io.WriteString(c, req+"\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatal(err)
	}
	return resp, c, br
}

func body(resp *http.Response) string {
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func TestForwardHostMatching(t *testing.T) {
	fp, _, _ := newTestForward(t, ForwardOptions{Loopback: true, InterceptHosts: []string{"api.anthropic.com", "localhost:8443", "*.corp.example", "127.0.0.1"}})
	for host, want := range map[string]bool{
		"api.anthropic.com:443":   true,
		"API.Anthropic.COM.:443":  true,
		"api.anthropic.com:8443":  true, // no port in the pattern: any allowed port
		"xapi.anthropic.com:443":  false,
		"api.anthropic.com.x:443": false,
		"api.openai.com:443":      false,
		"localhost:8443":          true,
		"localhost:443":           false,
		"llm.corp.example:443":    true,
		"a.b.corp.example:443":    true,
		"corp.example:443":        false,
		"evilcorp.example:443":    false,
		"127.0.0.1:443":           true,
		"api.anthropic.com":       false, // no port: not a CONNECT target
	} {
		if got := fp.Intercepted(host); got != want {
			t.Errorf("Intercepted(%q) = %v, want %v", host, got, want)
		}
	}
}

func TestForwardRefusals(t *testing.T) {
	const token = "s3cret-token"
	_, srv, served := newTestForward(t, ForwardOptions{Token: token, Loopback: false, InterceptHosts: []string{"api.anthropic.com"}})
	basic := func(user, pass string) string {
		return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
	}
	tests := []struct {
		name, target, auth string
		status             int
		says               string
	}{
		{"no token", "example.com:443", "", 407, "requires its token"},
		{"wrong bearer", "example.com:443", "Bearer nope", 407, "requires its token"},
		{"wrong basic", "example.com:443", basic("foldproxy", "nope"), 407, "requires its token"},
		{"bad basic", "example.com:443", "Basic !!!", 407, "requires its token"},
		{"other scheme", "example.com:443", "Digest " + token, 407, "requires its token"},
		{"port not allowed", "example.com:22", "Bearer " + token, 403, "port 22 is not allowed (allowed: 443; foldproxy.proxy.allowPorts)"},
		{"intercepted host, port not allowed", "api.anthropic.com:8443", basic("x", token), 403, "port 8443 is not allowed"},
		{"no port", "example.com", "Bearer " + token, 400, "want host:port"},
	}
	for _, tt := range tests {
		resp, _, _ := connect(t, srv.URL, tt.target, tt.auth)
		if got := body(resp); resp.StatusCode != tt.status || !strings.Contains(got, tt.says) {
			t.Errorf("%s: CONNECT %s = %d %q, want %d saying %q", tt.name, tt.target, resp.StatusCode, got, tt.status, tt.says)
		}
		if resp.StatusCode == 407 && len(resp.Header.Values("Proxy-Authenticate")) == 0 {
			t.Errorf("%s: 407 without Proxy-Authenticate", tt.name)
		}
	}

	// Plain HTTP through the proxy: refused, never relayed.
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("the origin was reached through a plain-HTTP proxy request: %s", r.URL)
	}))
	defer origin.Close()
	pu, _ := url.Parse(srv.URL)
	pu.User = url.UserPassword("foldproxy", token)
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu)}}
	resp, err := client.Get(origin.URL + "/x")
	if err != nil {
		t.Fatal(err)
	}
	if got := body(resp); resp.StatusCode != 403 || !strings.Contains(got, "not an open relay") {
		t.Errorf("plain-HTTP proxy request: %d %q, want 403 naming the reason", resp.StatusCode, got)
	}
	// A request to the proxy itself.
	req, _ := http.NewRequest("GET", srv.URL+"/", nil)
	req.Header.Set("Proxy-Authorization", "Bearer "+token)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if got := body(resp); resp.StatusCode != 404 || !strings.Contains(got, "HTTPS_PROXY") {
		t.Errorf("direct request: %d %q", resp.StatusCode, got)
	}
	if len(*served) != 0 {
		t.Errorf("the model front served refused requests: %v", *served)
	}

	// With the token (Bearer or Basic), an allowed CONNECT goes through.
	for _, auth := range []string{"Bearer " + token, basic("foldproxy", token)} {
		resp, _, _ := connect(t, srv.URL, "api.anthropic.com:443", auth)
		if resp.StatusCode != 200 {
			t.Errorf("CONNECT with %s: %d %s", strings.Fields(auth)[0], resp.StatusCode, body(resp))
		}
	}
}

func TestForwardNeedsTokenOffLoopback(t *testing.T) {
	ca, _, err := LoadOrCreateCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	model := func(string) (http.Handler, error) { return http.NotFoundHandler(), nil }
	for _, tt := range []struct {
		opts ForwardOptions
		says string
	}{
		{ForwardOptions{CA: ca, Model: model, AllowPorts: []int{443}}, "token is required"},
		{ForwardOptions{CA: ca, Model: model, Loopback: true}, "AllowPorts is empty"},
		{ForwardOptions{CA: ca, Model: model, Loopback: true, AllowPorts: []int{443}, InterceptHosts: []string{"https://x"}}, "not a URL"},
		{ForwardOptions{Model: model, Loopback: true, AllowPorts: []int{443}}, "required"},
		{ForwardOptions{CA: ca, Model: model, Token: " t", AllowPorts: []int{443}}, "spaces"},
	} {
		if _, err := NewForwardProxy(tt.opts); err == nil || !strings.Contains(err.Error(), tt.says) {
			t.Errorf("NewForwardProxy: err = %v, want it to say %q", err, tt.says)
		}
	}
}

func TestForwardInterceptsWithTheCA(t *testing.T) {
	ca, _, err := LoadOrCreateCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	_, srv, served := newTestForward(t, ForwardOptions{CA: ca, Loopback: true, InterceptHosts: []string{"api.anthropic.com", "localhost"}, AllowPorts: []int{443, 8443}})
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert())
	pu, _ := url.Parse(srv.URL)
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu), TLSClientConfig: &tls.Config{RootCAs: roots}}}
	for _, tt := range []struct{ url, front string }{
		{"https://api.anthropic.com/v1/messages", "front https://api.anthropic.com"},
		{"https://localhost:8443/v1/models", "front https://localhost:8443"},
	} {
		resp, err := client.Get(tt.url)
		if err != nil {
			t.Fatalf("GET %s through the proxy: %v", tt.url, err)
		}
		if got := body(resp); got != tt.front {
			t.Errorf("GET %s: %q, want %q", tt.url, got, tt.front)
		}
		if resp.TLS == nil || resp.TLS.PeerCertificates[0].Issuer.CommonName != ca.Cert().Subject.CommonName {
			t.Errorf("GET %s: not served with a certificate from foldproxy's CA", tt.url)
		}
	}
	// Whatever the Host header says, the request goes to the front of the
	// CONNECT target.
	resp, c, br := connect(t, srv.URL, "api.anthropic.com:443", "")
	if resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
	tc := tls.Client(&bufConn{Conn: c, r: br}, &tls.Config{ServerName: "api.anthropic.com", RootCAs: roots})
	io.WriteString(tc, "GET /v1/x HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n")
	r2, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := body(r2); got != "front https://api.anthropic.com" {
		t.Errorf("Host evil.example on a tunnel to api.anthropic.com: %q", got)
	}
	if want := []string{"https://api.anthropic.com/v1/messages", "https://localhost:8443/v1/models", "https://api.anthropic.com/v1/x"}; strings.Join(*served, " ") != strings.Join(want, " ") {
		t.Errorf("served %v, want %v", *served, want)
	}
}

type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufConn) Read(p []byte) (int, error) { return c.r.Read(p) }

func TestForwardTunnelsOtherHostsUntouched(t *testing.T) {
	origin := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "origin")
	}))
	defer origin.Close()
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(origin.URL, "https://"))
	var p int
	for _, ch := range port {
		p = p*10 + int(ch-'0')
	}
	_, srv, served := newTestForward(t, ForwardOptions{Loopback: true, InterceptHosts: []string{"api.anthropic.com"}, AllowPorts: []int{p}})
	pu, _ := url.Parse(srv.URL)
	var seen [][]byte
	tr := &http.Transport{Proxy: http.ProxyURL(pu), TLSClientConfig: &tls.Config{
		RootCAs: origin.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs,
		VerifyConnection: func(cs tls.ConnectionState) error {
			seen = append(seen, cs.PeerCertificates[0].Raw)
			return nil
		},
	}}
	resp, err := (&http.Client{Transport: tr}).Get(origin.URL)
	if err != nil {
		t.Fatal(err)
	}
	if got := body(resp); got != "origin" {
		t.Errorf("through the tunnel: %q", got)
	}
	if len(seen) != 1 || !bytes.Equal(seen[0], origin.Certificate().Raw) {
		t.Error("the client did not see the origin's own certificate through the tunnel")
	}
	if len(*served) != 0 {
		t.Errorf("a tunnelled request reached the model front: %v", *served)
	}
}
