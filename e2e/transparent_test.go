package e2e

// Transparent mode end to end (issue 9): foldproxy as the agent's
// HTTPS_PROXY. The real Claude Code CLI reaches the scripted model, served
// over TLS on loopback with a test CA of its own, through foldproxy's
// forward proxy, which intercepts the model host with its local CA and
// runs the requests through the model front's context manager; a host
// that is not intercepted is tunnelled byte for byte.

import (
	"bufio"
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// testPKI is a test CA and a server certificate it signed for localhost
// and 127.0.0.1, in PEM files.
type testPKI struct {
	caFile, certFile, keyFile string
	pool                      *x509.CertPool
}

func newTestPKI(t testing.TB) testPKI {
	t.Helper()
	dir := t.TempDir()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "e2e model test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leafTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "localhost"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, leafTmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalPKCS8PrivateKey(key)
	p := testPKI{caFile: filepath.Join(dir, "ca.pem"), certFile: filepath.Join(dir, "cert.pem"), keyFile: filepath.Join(dir, "key.pem"), pool: x509.NewCertPool()}
	p.pool.AddCert(caCert)
	for path, b := range map[string]*pem.Block{
		p.caFile:   {Type: "CERTIFICATE", Bytes: caDER},
		p.certFile: {Type: "CERTIFICATE", Bytes: der},
		p.keyFile:  {Type: "PRIVATE KEY", Bytes: keyDER},
	} {
		if err := os.WriteFile(path, pem.EncodeToMemory(b), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

// transparentProxy is a running foldproxy with its forward proxy.
type transparentProxy struct {
	proxyURL string // http://127.0.0.1:PORT, for HTTPS_PROXY
	listen   string // its HTTP front (/metrics)
	state    string
	proc     *process
}

// caFile is foldproxy's local CA certificate.
func (p transparentProxy) caFile() string { return filepath.Join(p.state, "ca", "ca.pem") }

// startTransparent runs foldproxy serve with --listen and --proxy-listen on
// free loopback ports.
func startTransparent(t testing.TB, settings map[string]any) transparentProxy {
	t.Helper()
	cfg := writeConfig(t, map[string]any{}, settings)
	state := t.TempDir()
	listen := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	paddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	// At debug level, so that tests can check that nothing of a
	// client's credentials reaches even the most verbose log.
	p := startProcess(t, "foldproxy --proxy-listen "+paddr, exec.Command(proxyBin(t), "serve", "--config", cfg, "--listen", listen, "--proxy-listen", paddr, "--state", state, "--log-level", "debug"))
	ctx := testContext(t, 60*time.Second)
	waitListening(ctx, t, p, paddr)
	waitListening(ctx, t, p, listen)
	return transparentProxy{proxyURL: "http://" + paddr, listen: listen, state: state, proc: p}
}

func portOf(t testing.TB, rawURL string) int {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(u.Port())
	if err != nil {
		t.Fatalf("%s: no port", rawURL)
	}
	return n
}

// auditRecords reads the audit log's records of kind.
func auditRecords(t testing.TB, path, kind string) []map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var rec map[string]any
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		if rec["kind"] == kind {
			out = append(out, rec)
		}
	}
	return out
}

func TestTransparentClaudeCode(t *testing.T) {
	pki := newTestPKI(t)
	const answer = "Hello from the scripted model, through foldproxy's forward proxy."
	model := startModelServer(t, map[string]any{"fallback": []map[string]any{{"type": "text", "text": answer}}},
		"-tls-cert", pki.certFile, "-tls-key", pki.keyFile)
	modelPort := portOf(t, model.url)
	modelURL := fmt.Sprintf("https://localhost:%d", modelPort)
	fp := startTransparent(t, map[string]any{
		"proxy": map[string]any{"interceptHosts": []string{"localhost"}, "allowPorts": []int{443, modelPort}, "extraRootsFile": pki.caFile},
	})

	ctx := testContext(t, 120*time.Second)
	cmd := exec.CommandContext(ctx, claudeBin(t), "-p", "Say hello.", "--output-format", "json")
	cmd.Dir = t.TempDir()
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + t.TempDir(),
		"HTTPS_PROXY=" + fp.proxyURL,
		"NODE_EXTRA_CA_CERTS=" + fp.caFile(),
		// The scripted model stands in for api.anthropic.com on loopback;
		// foldproxy intercepts it as it would the real host.
		"ANTHROPIC_BASE_URL=" + modelURL,
		"ANTHROPIC_API_KEY=dummy",
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
		"DISABLE_AUTOUPDATER=1",
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	ownProcessGroup(cmd)
	err := cmd.Run()
	_ = killGroup(cmd)
	if err != nil {
		t.Fatalf("claude -p through HTTPS_PROXY: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.Bytes(), stderr.Bytes())
	}
	var res struct {
		Result  string `json:"result"`
		IsError bool   `json:"is_error"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		t.Fatalf("claude's output: %v\n%s", err, stdout.Bytes())
	}
	if res.IsError || !strings.Contains(res.Result, answer) {
		t.Errorf("claude's result = %q (is_error %v), want the scripted answer", res.Result, res.IsError)
	}

	// Every Messages request the model received came through foldproxy's
	// context manager: one audit record of kind model each, with the
	// conversation's tokens counted, and as many in the metrics.
	var messages int
	for _, r := range model.records(t) {
		if r.Method == http.MethodPost && r.Path == "/v1/messages" {
			messages++
			if got := r.header("X-Api-Key"); got != "dummy" {
				t.Errorf("request %d: x-api-key %q, want the agent's own key passed through", r.Seq, got)
			}
			if r.Invalid != "" {
				t.Errorf("request %d is not a valid Messages request: %s", r.Seq, r.Invalid)
			}
		}
	}
	if messages == 0 {
		t.Fatal("the scripted model received no Messages request")
	}
	recs := auditRecords(t, filepath.Join(fp.state, "audit.jsonl"), "model")
	var anthropic int
	for _, r := range recs {
		if r["method"] == "anthropic" {
			anthropic++
			if r["outcome"] != "ok" {
				t.Errorf("audit record %v: outcome %v, want ok", r, r["outcome"])
			}
			if tok, _ := r["result_tokens"].(float64); tok <= 0 {
				t.Errorf("audit record %v: no tokens counted by the context manager", r)
			}
		}
	}
	if anthropic != messages {
		t.Errorf("the audit log has %d model records of the Messages API, the model received %d requests: every one must go through foldproxy", anthropic, messages)
	}
	m := scrapeMetrics(ctx, t, "http://"+fp.listen+"/metrics")
	if got := m.value("foldproxy_model_requests_total", "outcome=ok"); int(got) < messages {
		t.Errorf("foldproxy_model_requests_total{outcome=ok} = %v, want at least %d", got, messages)
	}
}

// proxiedClient is an HTTPS client through the forward proxy that trusts
// roots and records the leaf certificate each connection presents.
func proxiedClient(t testing.TB, proxyURL string, roots *x509.CertPool, seen *[][]byte) *http.Client {
	t.Helper()
	pu, err := url.Parse(proxyURL)
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{Proxy: http.ProxyURL(pu), TLSClientConfig: &tls.Config{
		RootCAs: roots,
		VerifyConnection: func(cs tls.ConnectionState) error {
			*seen = append(*seen, cs.PeerCertificates[0].Raw)
			return nil
		},
	}}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

func TestTransparentTunnelsAndRefuses(t *testing.T) {
	// The origin that is not intercepted: a TLS server whose certificate
	// only it holds. Through a tunnel the client sees exactly it.
	origin := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "origin body "+r.URL.Path)
	}))
	defer origin.Close()
	originRoots := x509.NewCertPool()
	originRoots.AddCert(origin.Certificate())
	// An intercepted host whose certificate foldproxy does not trust: the
	// failure reaches the client, nothing is forwarded.
	untrusted := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("foldproxy forwarded to a host whose certificate it could not verify: %s", r.URL)
	}))
	defer untrusted.Close()
	closedPort := freePort(t)

	fp := startTransparent(t, map[string]any{
		"proxy": map[string]any{
			"interceptHosts": []string{fmt.Sprintf("127.0.0.1:%d", portOf(t, untrusted.URL))},
			"allowPorts":     []int{portOf(t, origin.URL), portOf(t, untrusted.URL)},
		},
	})
	ctx := testContext(t, 30*time.Second)

	var seen [][]byte
	resp, err := proxiedClient(t, fp.proxyURL, originRoots, &seen).Get(origin.URL + "/tunnelled")
	if err != nil {
		t.Fatalf("GET through the tunnel: %v", err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(got) != "origin body /tunnelled" {
		t.Errorf("through the tunnel: %q", got)
	}
	want := sha256.Sum256(origin.Certificate().Raw)
	if len(seen) != 1 || sha256.Sum256(seen[0]) != want {
		t.Errorf("the client saw %d certificates, want exactly the origin's (SHA-256 %x)", len(seen), want)
	}

	// Intercepted, upstream TLS fails: a 502 that says why.
	caPEM, err := os.ReadFile(fp.caFile())
	if err != nil {
		t.Fatal(err)
	}
	fpRoots := x509.NewCertPool()
	fpRoots.AppendCertsFromPEM(caPEM)
	seen = nil
	resp, err = proxiedClient(t, fp.proxyURL, fpRoots, &seen).Post(untrusted.URL+"/v1/messages", "application/json",
		strings.NewReader(`{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatalf("POST to the intercepted host: %v", err)
	}
	got, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(string(got), "certificate") || !strings.Contains(string(got), "unknown authority") {
		t.Errorf("upstream TLS failure: %d %s, want 502 naming the certificate error", resp.StatusCode, got)
	}
	if len(seen) != 1 || sha256.Sum256(seen[0]) == sha256.Sum256(untrusted.Certificate().Raw) {
		t.Error("the intercepted host was not answered with foldproxy's own certificate")
	}

	// Refusals of the real binary: a port outside the allow list, plain HTTP.
	c, err := (&net.Dialer{}).DialContext(ctx, "tcp", strings.TrimPrefix(fp.proxyURL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "CONNECT 127.0.0.1:%d HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n", closedPort, closedPort)
	r, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatal(err)
	}
	got, _ = io.ReadAll(r.Body)
	if r.StatusCode != http.StatusForbidden || !strings.Contains(string(got), fmt.Sprintf("port %d is not allowed", closedPort)) {
		t.Errorf("CONNECT to a port not allowed: %d %s", r.StatusCode, got)
	}
	pu, _ := url.Parse(fp.proxyURL)
	plain := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu)}}
	resp, err = plain.Get("http://" + fp.listen + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	got, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(got), "open relay") {
		t.Errorf("plain-HTTP proxy request: %d %s, want 403", resp.StatusCode, got)
	}
}
