package e2e

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// claudeEnv is the environment of a Claude Code run: an empty home of its
// own and no traffic beyond what the command needs (no model is used).
func claudeEnv(home string) []string {
	env := []string{"HOME=" + home, "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "DISABLE_AUTOUPDATER=1"}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "HOME", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "CLAUDE_CONFIG_DIR", "XDG_CONFIG_HOME":
			continue
		}
		env = append(env, kv)
	}
	return env
}

// TestClaudeCodeImportedProject: a project whose .mcp.json has a working
// server and a dead one is imported with "foldproxy import --write"; the
// real Claude Code CLI then starts the imported entry in three sessions at
// once (three "claude mcp list", each with its own home, each its own foldproxy process on the
// project's one state folder) and every one reports it Connected, the dead
// upstream notwithstanding.
func TestClaudeCodeImportedProject(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	claude := claudeBin(t)
	home := t.TempDir()
	project := t.TempDir()
	state := filepath.Join(project, ".foldproxy")
	t.Cleanup(func() { waitNoDaemon(testContext(t, 60*time.Second), t, state) })

	servers := map[string]any{
		"everything": everythingStdioEntry(t),
		"dead":       stdioEntry(filepath.Join(t.TempDir(), "no-such-server")),
	}
	mcpJSON, err := json.MarshalIndent(map[string]any{"mcpServers": servers}, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(project, ".mcp.json"), mcpJSON, 0o644); err != nil {
		t.Fatal(err)
	}
	imp := exec.CommandContext(ctx, proxyBin(t), "import", "--write")
	imp.Dir = project
	imp.Env = claudeEnv(home)
	if out, err := imp.CombinedOutput(); err != nil {
		t.Fatalf("foldproxy import --write: %v\n%s", err, out)
	}
	var entry struct {
		MCPServers map[string]struct {
			Command string   `json:"command"`
			Args    []string `json:"args"`
		} `json:"mcpServers"`
	}
	b, err := os.ReadFile(filepath.Join(project, ".mcp.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &entry); err != nil {
		t.Fatal(err)
	}
	if fp := entry.MCPServers["foldproxy"]; len(entry.MCPServers) != 1 || fp.Command != proxyBin(t) {
		t.Fatalf("imported .mcp.json = %s, want one entry running %s", b, proxyBin(t))
	}
	gi, _ := os.ReadFile(filepath.Join(project, ".gitignore"))
	if !strings.Contains(string(gi), "/.foldproxy/") {
		t.Errorf(".gitignore does not keep foldproxy's state out: %q", gi)
	}

	// The user trusted the project and approved its server, as Claude
	// Code's first interactive start asks.
	trust, _ := json.Marshal(map[string]any{"projects": map[string]any{
		project: map[string]any{"hasTrustDialogAccepted": true, "enabledMcpjsonServers": []string{"foldproxy"}},
	}})
	if err := os.WriteFile(filepath.Join(home, ".claude.json"), trust, 0o600); err != nil {
		t.Fatal(err)
	}

	// Each session has a home of its own, a copy of that one: Claude Code
	// rewrites ~/.claude.json as it starts, and three at once on one file
	// can read another's half-written rewrite and lose the approval
	// ("Pending approval"), a race of Claude Code's, not foldproxy's.
	homes := make([]string, 3)
	for i := range homes {
		homes[i] = t.TempDir()
		if err := os.CopyFS(homes[i], os.DirFS(home)); err != nil {
			t.Fatal(err)
		}
	}
	outs := make([]string, 3)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for i := range outs {
		wg.Go(func() {
			cmd := exec.CommandContext(ctx, claude, "mcp", "list")
			cmd.Dir = project
			cmd.Env = claudeEnv(homes[i])
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			ownProcessGroup(cmd)
			cmd.Cancel = func() error { return killGroup(cmd) }
			errs[i] = cmd.Run()
			outs[i] = out.String()
		})
	}
	wg.Wait()
	for i, out := range outs {
		line := ""
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, "foldproxy:") {
				line = l
			}
		}
		if errs[i] != nil || !strings.HasSuffix(strings.TrimSpace(line), "Connected") {
			t.Errorf("session %d: claude mcp list: %v; want foldproxy Connected:\n%s", i, errs[i], out)
		}
	}
	logged, _ := os.ReadFile(filepath.Join(state, "foldproxy.log"))
	if !bytes.Contains(logged, []byte(`upstream=dead`)) || !bytes.Contains(logged, []byte("not found")) {
		t.Errorf("the daemon's log does not say why the dead upstream is down:\n%s", truncate(string(logged), 3000))
	}
}
