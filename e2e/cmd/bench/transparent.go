package main

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// runTransparent measures section 8: transparent mode (foldproxy as
// HTTPS_PROXY, the model host intercepted with its local CA) against
// base-URL mode (ANTHROPIC_BASE_URL=foldproxy) and against the scripted
// model server directly, in the same run: first byte of a streamed
// Messages answer for a Claude Code-shaped request, the model served over
// TLS on loopback with a test CA (trusted by foldproxy through
// SSL_CERT_FILE and foldproxy.proxy.extraRootsFile). Then the resident
// memory of foldproxy with 100 concurrent tunnelled connections (CONNECT
// to a host that is not intercepted, TLS through the tunnel, one request
// each, held open) against the same process idle.
func runTransparent(ctx context.Context, e *env, res *results) error {
	const sec = "8 transparent mode"
	calls, warm, tunnels := 40, 5, 100
	if e.quick {
		calls, warm = 10, 2
	}
	dir, err := os.MkdirTemp(e.tmp, "transparent-")
	if err != nil {
		return err
	}
	caFile, certFile, keyFile, testRoots, err := writeTestPKI(dir)
	if err != nil {
		return err
	}
	modelAddr, stopModel, err := startBackground(ctx, "model server (TLS)", "", e.model, "-listen", "{addr}", "-chunk", "64", "-tls-cert", certFile, "-tls-key", keyFile)
	if err != nil {
		return err
	}
	defer stopModel()
	_, modelPort, _ := net.SplitHostPort(modelAddr)
	modelURL := "https://localhost:" + modelPort
	// The remote MCP server of the tools/call rows: base-URL mode has it
	// as an mcpServers entry, transparent mode intercepts it (proxy.mcp).
	remote, err := startRemoteMCP(ctx, e, certFile, keyFile)
	if err != nil {
		return err
	}
	servers := map[string]any{}
	proxySet := map[string]any{"interceptHosts": []string{"localhost"}, "allowPorts": []int{atoi(modelPort)}, "extraRootsFile": caFile}
	if remote != nil {
		defer remote.stop()
		servers["everything"] = map[string]any{"type": "http", "url": remote.url}
		proxySet["allowPorts"] = []int{atoi(modelPort), portOfURL(remote.url)}
		proxySet["mcp"] = []map[string]any{{"url": remote.url, "name": "everything-remote"}}
	}
	cfg, err := e.writeConfig("transparent.json", servers, map[string]any{
		"model": map[string]any{"anthropicURL": modelURL},
		"proxy": proxySet,
	})
	if err != nil {
		return err
	}
	state, err := e.stateDir("transparent")
	if err != nil {
		return err
	}
	fp, err := startTransparentProxy(ctx, e.proxy, cfg, state, caFile)
	if err != nil {
		return err
	}
	defer fp.stop()

	caPEM, err := os.ReadFile(filepath.Join(state, "ca", "ca.pem"))
	if err != nil {
		return err
	}
	fpRoots := x509.NewCertPool()
	fpRoots.AppendCertsFromPEM(caPEM)
	pu, _ := url.Parse("http://" + fp.proxyAddr)
	sides := []struct {
		name string
		hc   *http.Client
		url  string
	}{
		{"direct", &http.Client{Transport: &http.Transport{DisableCompression: true, TLSClientConfig: &tls.Config{RootCAs: testRoots}}}, modelURL + "/v1/messages?beta=true"},
		{"base URL", &http.Client{Transport: &http.Transport{DisableCompression: true}}, "http://" + fp.listenAddr + "/v1/messages?beta=true"},
		{"transparent", &http.Client{Transport: &http.Transport{DisableCompression: true, Proxy: http.ProxyURL(pu), TLSClientConfig: &tls.Config{RootCAs: fpRoots}}}, modelURL + "/v1/messages?beta=true"},
	}
	outs, err := loadOutputs(e.data)
	if err != nil {
		return err
	}
	body := claudeShapedRequest(outs, "", "")
	var st [3]roundStats
	for _, s := range sides {
		if _, err := firstBytes(ctx, s.hc, s.url, body, warm); err != nil {
			return fmt.Errorf("warm-up %s: %w", s.name, err)
		}
	}
	for r := 0; r < e.rounds; r++ {
		for k := range sides {
			i := (k + r) % len(sides) // rotate the order round by round
			samples, err := firstBytes(ctx, sides[i].hc, sides[i].url, body, calls)
			if err != nil {
				return fmt.Errorf("%s: %w", sides[i].name, err)
			}
			st[i].add(samples)
		}
	}
	d, b, t := st[0].P50(), st[1].P50(), st[2].P50()
	note := fmt.Sprintf("%d KB Claude Code-shaped request (no branch), TLS model on loopback, %d calls x %d rounds", len(body)/1000, calls, e.rounds)
	res.add(row{Section: sec, Metric: "first byte p50, transparent vs direct", Value: ms(t), Baseline: ms(d) + " direct",
		Ratio: ratio(float64(t), float64(d)), Num: msf(t), Base: msf(d), Unit: "ms", Note: fmt.Sprintf("%s; %s", signedMS(t-d), note)})
	res.add(row{Section: sec, Metric: "first byte p50, transparent vs base URL", Value: ms(t), Baseline: ms(b) + " base URL",
		Ratio: ratio(float64(t), float64(b)), Num: msf(t), Base: msf(b), Unit: "ms", Note: fmt.Sprintf("%s; base URL is %s over direct", signedMS(t-b), signedMS(b-d))})
	res.add(row{Section: sec, Metric: "first byte p99, transparent / base URL / direct", Value: ms(st[2].P99()),
		Baseline: ms(st[1].P99()) + " / " + ms(st[0].P99()), Ratio: ratio(float64(st[2].P99()), float64(st[0].P99())),
		Num: msf(st[2].P99()), Base: msf(st[0].P99()), Unit: "ms"})

	if remote != nil {
		if err := mcpRows(ctx, e, res, sec, remote, fp, testRoots, fpRoots, pu, calls, warm); err != nil {
			return err
		}
	}

	// Memory: 100 tunnels to 127.0.0.1 (not intercepted: only "localhost" is).
	for _, s := range sides {
		s.hc.CloseIdleConnections()
	}
	return tunnelRows(ctx, res, sec, fp, modelPort, testRoots, tunnels)
}

// tunnelRows adds the row of the proxy fp's memory with tunnels CONNECT
// tunnels held open to 127.0.0.1:modelPort, against its idle memory.
func tunnelRows(ctx context.Context, res *results, sec string, fp *transparentProxy, modelPort string, testRoots *x509.CertPool, tunnels int) error {
	time.Sleep(500 * time.Millisecond) // let closed connections go before the idle reading
	idle, err := procStatus(fp.pid, "VmRSS")
	if err != nil {
		return err
	}
	tunnelTLS := &tls.Config{RootCAs: testRoots, ServerName: "localhost"}
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range tunnels {
		c, err := openTunnel(ctx, fp.proxyAddr, "127.0.0.1:"+modelPort, tunnelTLS)
		if err != nil {
			return fmt.Errorf("tunnel %d: %w", len(conns)+1, err)
		}
		conns = append(conns, c)
	}
	held, err := procStatus(fp.pid, "VmRSS")
	if err != nil {
		return err
	}
	per := (held["VmRSS"] - idle["VmRSS"]) / int64(tunnels)
	res.add(row{Section: sec, Metric: fmt.Sprintf("RSS with %d tunnelled connections", tunnels), Value: mib(held["VmRSS"]),
		Baseline: mib(idle["VmRSS"]) + " idle", Ratio: ratio(float64(held["VmRSS"]), float64(idle["VmRSS"])),
		Num: float64(held["VmRSS"]) / (1 << 20), Base: float64(idle["VmRSS"]) / (1 << 20), Unit: "MiB",
		Note: fmt.Sprintf("%.1f KiB per tunnel; each: CONNECT, TLS to the origin through it, one request, held open", float64(per)/1024)})
	return nil
}

// openTunnel opens a CONNECT tunnel to target through the proxy, does TLS
// through it and one GET, and returns the connection, open.
func openTunnel(ctx context.Context, proxyAddr, target string, cfg *tls.Config) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, "tcp", proxyAddr)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		c.Close()
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		c.Close()
		return nil, fmt.Errorf("CONNECT: %s", resp.Status)
	}
	tc := tls.Client(c, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		c.Close()
		return nil, err
	}
	fmt.Fprintf(tc, "GET /v1/models HTTP/1.1\r\nHost: localhost\r\n\r\n")
	r, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil {
		tc.Close()
		return nil, err
	}
	_, _ = io.Copy(io.Discard, r.Body)
	r.Body.Close()
	return tc, nil
}

// transparentProxy is foldproxy with --listen and --proxy-listen.
type transparentProxy struct {
	listenAddr, proxyAddr string
	pid                   int
	stop                  func()
}

// startTransparentProxy runs foldproxy with its HTTP front and forward
// proxy on free ports, SSL_CERT_FILE set to the test CA so that base-URL
// mode trusts the TLS model server as transparent mode does.
func startTransparentProxy(ctx context.Context, bin, cfg, state, caFile string) (*transparentProxy, error) {
	var addrs [2]string
	for i := range addrs {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		addrs[i] = fmt.Sprintf("127.0.0.1:%d", port)
	}
	stderr := &tailBuffer{max: 16 << 10}
	cmd := exec.Command(bin, "serve", "--config", cfg, "--listen", addrs[0], "--proxy-listen", addrs[1], "--state", state, "--log-level", "warn")
	cmd.Env = append(os.Environ(), "SSL_CERT_FILE="+caFile)
	cmd.Stderr = stderr
	ownGroup(cmd)
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	fp := &transparentProxy{listenAddr: addrs[0], proxyAddr: addrs[1], pid: cmd.Process.Pid, stop: func() {
		_ = terminate(cmd)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = killGroup(cmd)
			<-exited
		}
	}}
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get("http://" + addrs[0] + "/healthz")
		if err == nil {
			resp.Body.Close()
			if c, err := net.Dial("tcp", addrs[1]); err == nil {
				c.Close()
				return fp, nil
			}
		}
		select {
		case err := <-exited:
			return nil, fmt.Errorf("foldproxy exited: %v%s", err, stderr.tail())
		case <-ctx.Done():
			fp.stop()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			fp.stop()
			return nil, fmt.Errorf("foldproxy did not answer%s", stderr.tail())
		}
	}
}

// writeTestPKI writes a test CA and a certificate it signed for localhost
// and 127.0.0.1 into dir.
func writeTestPKI(dir string) (caFile, certFile, keyFile string, roots *x509.CertPool, err error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "bench test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return
	}
	caCert, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "localhost"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return
	}
	keyDER, _ := x509.MarshalPKCS8PrivateKey(key)
	caFile, certFile, keyFile = filepath.Join(dir, "ca.pem"), filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	for path, b := range map[string]*pem.Block{caFile: {Type: "CERTIFICATE", Bytes: caDER}, certFile: {Type: "CERTIFICATE", Bytes: der}, keyFile: {Type: "PRIVATE KEY", Bytes: keyDER}} {
		if err = os.WriteFile(path, pem.EncodeToMemory(b), 0o600); err != nil {
			return
		}
	}
	roots = x509.NewCertPool()
	roots.AddCert(caCert)
	return
}

// signedMS is a difference with its sign: "+1.2 ms", "-0.4 ms".
func signedMS(d time.Duration) string {
	if d < 0 {
		return "-" + ms(-d)
	}
	return "+" + ms(d)
}

func atoi(s string) int {
	n := 0
	for _, c := range strings.TrimSpace(s) {
		n = n*10 + int(c-'0')
	}
	return n
}

// mcpRows measures a tools/call (server-everything's echo of a 2 KB
// message, over streamable HTTP) directly, through foldproxy's MCP front
// (base-URL mode: an mcpServers entry) and through the forward proxy
// (transparent mode: proxy.mcp), in the same run, rounds rotated.
func mcpRows(ctx context.Context, e *env, res *results, sec string, remote *remoteMCP, fp *transparentProxy,
	testRoots, fpRoots *x509.CertPool, pu *url.URL, calls, warm int,
) error {
	sides := []struct {
		name string
		s    *mcpSession
	}{
		{"direct", &mcpSession{hc: &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: testRoots}}}, url: remote.url}},
		{"base URL", &mcpSession{hc: &http.Client{Transport: &http.Transport{}}, url: "http://" + fp.listenAddr + "/mcp"}},
		{"transparent", &mcpSession{hc: &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu), TLSClientConfig: &tls.Config{RootCAs: fpRoots}}}, url: remote.url}},
	}
	msg := strings.Repeat("The quick brown fox reads a file and reports what it found. ", 34)[:2000]
	args := map[string]any{"message": msg}
	tools := make([]string, len(sides))
	for i, s := range sides {
		if err := s.s.open(ctx); err != nil {
			return fmt.Errorf("MCP %s: %w", s.name, err)
		}
		tool, err := s.s.toolNamed(ctx, "echo")
		if err != nil {
			return fmt.Errorf("MCP %s: %w", s.name, err)
		}
		tools[i] = tool
		if _, err := s.s.callTimes(ctx, tool, args, warm); err != nil {
			return fmt.Errorf("MCP warm-up %s: %w", s.name, err)
		}
	}
	// Calls interleaved one by one, the order rotated, so that the load of
	// a shared machine falls on the three sides alike.
	var st [3]roundStats
	for r := 0; r < e.rounds; r++ {
		var samples [3][]time.Duration
		for c := range calls {
			for k := range sides {
				i := (k + c + r) % len(sides)
				d, err := sides[i].s.callTimes(ctx, tools[i], args, 1)
				if err != nil {
					return fmt.Errorf("MCP %s: %w", sides[i].name, err)
				}
				samples[i] = append(samples[i], d...)
			}
		}
		for i := range sides {
			st[i].add(samples[i])
		}
	}
	d, b, t := st[0].P50(), st[1].P50(), st[2].P50()
	note := fmt.Sprintf("server-everything echo of 2 KB over streamable HTTP, TLS on loopback, %d calls x %d rounds, interleaved", calls, e.rounds)
	res.add(row{Section: sec, Metric: "MCP tools/call p50, transparent vs direct", Value: ms(t), Baseline: ms(d) + " direct",
		Ratio: ratio(float64(t), float64(d)), Num: msf(t), Base: msf(d), Unit: "ms", Note: fmt.Sprintf("%s; %s", signedMS(t-d), note)})
	res.add(row{Section: sec, Metric: "MCP tools/call p50, transparent vs base URL", Value: ms(t), Baseline: ms(b) + " base URL",
		Ratio: ratio(float64(t), float64(b)), Num: msf(t), Base: msf(b), Unit: "ms", Note: fmt.Sprintf("%s; base URL (MCP front, http upstream) is %s over direct", signedMS(t-b), signedMS(b-d))})
	res.add(row{Section: sec, Metric: "MCP tools/call p99, transparent / base URL / direct", Value: ms(st[2].P99()),
		Baseline: ms(st[1].P99()) + " / " + ms(st[0].P99()), Ratio: ratio(float64(st[2].P99()), float64(st[0].P99())),
		Num: msf(st[2].P99()), Base: msf(st[0].P99()), Unit: "ms"})
	for _, s := range sides {
		s.s.hc.CloseIdleConnections()
	}
	return nil
}

// portOfURL is the port of an https://host:port/... URL.
func portOfURL(raw string) int {
	u, err := url.Parse(raw)
	if err != nil {
		return 0
	}
	return atoi(u.Port())
}
