package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// Loops (issue 27): a request that would come back to foldproxy is
// refused, not sent; the refusal is asserted, not a timing.

// TestModelURLAtOwnListenerRefusedAtStart: model.anthropicURL naming the
// --listen address (through localhost) is certain to loop: serve refuses
// to start and says which setting and how to fix it.
func TestModelURLAtOwnListenerRefusedAtStart(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	port := freePort(t)
	listen := fmt.Sprintf("127.0.0.1:%d", port)
	cfg := writeConfig(t, map[string]any{}, map[string]any{
		"scrub": map[string]any{"disabled": true},
		"model": map[string]any{"anthropicURL": fmt.Sprintf("http://localhost:%d", port)},
	})
	p := startProcess(t, "foldproxy", exec.Command(proxyBin(t), "serve", "--config", cfg, "--state", t.TempDir(), "--listen", listen))
	// It either exits (refused) or listens (today: serves the loop).
	for {
		select {
		case <-p.done:
			out := p.out.String()
			if p.err == nil || !strings.Contains(out, fmt.Sprintf("model.anthropicURL http://localhost:%d is foldproxy's own --listen address", port)) ||
				!strings.Contains(out, "https://api.anthropic.com") {
				t.Errorf("serve with the model URL at its own listener: %v\n%s", p.err, out)
			}
			return
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
		if c, err := net.Dial("tcp", listen); err == nil {
			c.Close()
			t.Fatal("serve listens with model.anthropicURL set to its own address")
		}
	}
}

// TestConnectToOwnProxyRefused: with the proxy's own port allowed, a
// CONNECT to foldproxy itself (by address or by localhost) is refused
// with the reason, instead of a tunnel into itself that the client could
// nest again and again.
func TestConnectToOwnProxyRefused(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	port := freePort(t)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	cfg := writeConfig(t, map[string]any{}, map[string]any{
		"scrub": map[string]any{"disabled": true},
		"proxy": map[string]any{"allowPorts": []int{443, port}},
	})
	p := startProcess(t, "foldproxy", exec.Command(proxyBin(t), "serve", "--config", cfg, "--state", t.TempDir(), "--listen", "127.0.0.1:0", "--proxy-listen", addr))
	waitListening(ctx, t, p, addr)
	for _, target := range []string{addr, fmt.Sprintf("localhost:%d", port)} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
		resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
		if err != nil {
			c.Close()
			t.Fatalf("CONNECT %s: %v", target, err)
		}
		var body []byte
		if resp.StatusCode != http.StatusOK {
			body, _ = io.ReadAll(resp.Body)
		}
		c.Close()
		if resp.StatusCode == http.StatusOK || !strings.Contains(string(body), "foldproxy's own listener") ||
			!strings.Contains(string(body), "does not tunnel to itself") {
			t.Errorf("CONNECT %s to foldproxy itself: %d %q, want a refusal saying why", target, resp.StatusCode, body)
		}
	}
	if !strings.Contains(p.out.String(), "allowPorts holds the proxy's own port") {
		t.Errorf("no warning at start about allowPorts:\n%s", p.out.String())
	}
}
