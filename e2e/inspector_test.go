package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"
)

// inspectorToolNames runs the MCP Inspector's CLI (tools/list over
// streamable HTTP) against url and returns the tool names it printed.
func inspectorToolNames(ctx context.Context, t *testing.T, url string) []string {
	t.Helper()
	launcher := npmScript(t, "@modelcontextprotocol/inspector", "clients/launcher/build/index.js")
	runCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(runCtx, nodeBin(t), launcher, "--cli", url, "--transport", "http", "--method", "tools/list")
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "CI=true", "NO_COLOR=1")
	ownProcessGroup(cmd)
	cmd.Cancel = func() error { return killGroup(cmd) }
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("mcp-inspector --cli %s: %v\nstdout:\n%s\nstderr:\n%s", url, err, truncate(stdout.String(), 2000), truncate(stderr.String(), 2000))
	}
	var out struct {
		Tools []struct {
			Name string `json:"name"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		t.Fatalf("mcp-inspector printed something other than a tools/list result (%v):\n%s", err, truncate(stdout.String(), 2000))
	}
	var names []string
	for _, tool := range out.Tools {
		names = append(names, tool.Name)
	}
	return names
}

func TestInspectorCLI(t *testing.T) {
	upstream := startEverythingHTTP(t, "streamableHttp")
	t.Run("direct", func(t *testing.T) {
		names := inspectorToolNames(testContext(t, 2*time.Minute), t, upstream)
		if !slices.Contains(names, "echo") {
			t.Fatalf("the Inspector listed %v, want echo among them", names)
		}
	})
	t.Run("through-foldproxy", func(t *testing.T) {
		cfg := writeConfig(t, map[string]any{"everything": urlEntry("http", upstream)}, nil)
		url, _ := startProxyHTTPProcess(t, cfg)
		names := inspectorToolNames(testContext(t, 2*time.Minute), t, url)
		for _, want := range append([]string{"everything__echo"}, foldTools...) {
			if !slices.Contains(names, want) {
				t.Errorf("the Inspector listed %v through foldproxy, want %s among them", names, want)
			}
		}
	})
}
