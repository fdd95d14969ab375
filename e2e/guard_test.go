package e2e

import (
	"context"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// Issue 14: /metrics and /healthz on the listener skipped the token check.
// With authToken set, the real binary refuses them without the token and
// serves them with it; a separate --metrics listener (no token check) is
// refused unless it is on loopback.
func TestMetricsAndHealthzNeedTheToken(t *testing.T) {
	const token = "e2e-guard-token-6d1f"
	cfg := writeConfig(t, map[string]any{"everything": everythingStdioEntry(t)}, map[string]any{"authToken": token})
	url, _ := startProxyHTTPProcess(t, cfg)
	base := strings.TrimSuffix(url, "/mcp")
	ctx := testContext(t, 30*time.Second)
	get := func(path, auth string) int {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if auth != "" {
			req.Header.Set("Authorization", "Bearer "+auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, path := range []string{"/metrics", "/healthz"} {
		if code := get(path, ""); code != http.StatusUnauthorized {
			t.Errorf("GET %s without the token: %d, want 401", path, code)
		}
		if code := get(path, token); code != http.StatusOK {
			t.Errorf("GET %s with the token: %d, want 200", path, code)
		}
	}

	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(cctx, proxyBin(t), "serve", "--config", cfg, "--state", t.TempDir(),
		"--listen", "127.0.0.1:0", "--metrics", "0.0.0.0:0").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "not a loopback address") {
		t.Errorf("serve --metrics 0.0.0.0:0: err %v, output %q; want a refusal", err, out)
	}
}
