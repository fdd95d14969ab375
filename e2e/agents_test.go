package e2e

// Every real client folds: Claude Code with foldproxy's plugin under
// "foldproxy run", Claude Code in an imported project started plainly, the
// Codex CLI and OpenCode. Each plays one branch against the scripted model
// server (servers/model): the branch reads a file with the client's own
// tool and one through foldproxy's MCP tool, then returns a summary; the
// test asserts that the requests after the return hold none of the
// branch's output and hold the summary, and that the request before the
// return did hold the output (so that the check can fail).

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// branchPlay is the scenario every client plays.
type branchPlay struct {
	work    string   // the folder the agent works in (the project)
	local   string   // a file the client reads with its own tool
	remote  string   // a file read through foldproxy's MCP tool (server-filesystem)
	marks   []string // what the two files hold, which must leave at the return
	summary string   // the return message, which must stay
	// localTool is the client's own tool that reads local, set by script.
	localTool string
}

func newBranchPlay(t *testing.T) *branchPlay {
	t.Helper()
	p := &branchPlay{work: t.TempDir(), marks: []string{"LOCALMARK-7f3a", "REMOTEMARK-91c2"},
		summary: "SUMMARY-OK: the files hold the two markers"}
	p.local = filepath.Join(p.work, "local.txt")
	p.remote = filepath.Join(p.work, "remote.txt")
	for path, text := range map[string]string{p.local: "local file " + p.marks[0] + "\n", p.remote: "remote file " + p.marks[1] + "\n"} {
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

// fsServer is server-filesystem on the play's folder, as an mcpServers entry.
func (p *branchPlay) fsServer(t *testing.T) map[string]any {
	return stdioEntry(nodeBin(t), filesystemScript(t), p.work)
}

// script is the model's side for a client whose MCP tools are named
// prefix+tool and whose own tool is read(path) → (name, input): create a
// branch, read with the client's tool, read through MCP, ask the branch's
// status, return, answer.
// The answer's turn matches both the folded conversation (branch_create's
// result holds the summary) and the unfolded one (the last message is the
// return's result), so that a client that does not fold still reaches it
// and the test names what the model saw.
func (p *branchPlay) script(prefix, readTool string, readInput map[string]any) map[string]any {
	p.localTool = readTool
	return map[string]any{"turns": []map[string]any{
		{"name": "create", "match": []string{"PROMPT-BRANCH"}, "content": []any{
			map[string]any{"type": "text", "text": "I will read the files in a branch."},
			toolUse("call_play_01", prefix+"branch_create", map[string]any{"description": "read the two files", "budget": 6000})}},
		{"name": "local", "match": []string{"call_play_01"}, "content": []any{
			toolUse("call_play_02", readTool, readInput)}},
		{"name": "remote", "match": []string{"call_play_02"}, "content": []any{
			toolUse("call_play_03", prefix+"fs__read_text_file", map[string]any{"path": p.remote})}},
		{"name": "status", "match": []string{"call_play_03"}, "content": []any{
			toolUse("call_play_05", prefix+"branch_status", map[string]any{})}},
		{"name": "return", "match": []string{"call_play_05"}, "content": []any{
			toolUse("call_play_04", prefix+"branch_return", map[string]any{"message": p.summary})}},
		{"name": "final", "match": []string{"call_play_04"}, "content": []any{
			map[string]any{"type": "text", "text": "FINAL-ANSWER"}}},
		{"name": "final", "match": []string{"call_play_01", p.summary}, "content": []any{
			map[string]any{"type": "text", "text": "FINAL-ANSWER"}}},
	}}
}

// checkFolded checks what the model received: every turn played in order,
// the request that asked for the return still held the branch's output,
// and the one after it holds none of it and holds the summary.
func (p *branchPlay) checkFolded(t *testing.T, recs []modelRecord, path string) {
	t.Helper()
	var turns []string
	var open, after []modelRecord
	for _, r := range recs {
		if r.Invalid != "" {
			t.Errorf("request %d %s %s was invalid: %s", r.Seq, r.Method, r.Path, r.Invalid)
		}
		if r.Path != path || r.Turn == "" || r.Turn == "fallback" {
			continue
		}
		turns = append(turns, r.Turn)
		switch r.Turn {
		case "return":
			open = append(open, r)
		case "final":
			after = append(after, r)
		}
	}
	if strings.Join(turns, ",") != "create,local,remote,status,return,final" {
		t.Fatalf("the model played %v, want create, local, remote, status, return, final", turns)
	}
	for _, r := range open {
		for _, m := range p.marks {
			if !bytes.Contains(r.Body, []byte(m)) {
				t.Errorf("before the return, request %d lacks the branch's output %s:\n%s", r.Seq, m, truncate(string(r.Body), 4000))
			}
		}
		// branch_status: the MCP read charged once, on the MCP wire; the
		// client's own read on the model wire, under its own name.
		body := string(r.Body)
		if !strings.Contains(body, "fs/read_text_file") || !strings.Contains(body, "model/"+p.localTool) ||
			strings.Contains(body, "model/mcp__") || strings.Contains(body, "model/foldproxy_") {
			i := strings.Index(body, "usage_by_tool")
			t.Errorf("request %d: branch_status does not show the reads charged once each (fs/read_text_file, model/%s): %s", r.Seq, p.localTool, body[max(0, i-200):min(len(body), i+400)])
		}
	}
	for _, r := range after {
		for _, m := range append([]string{"call_play_02", "call_play_03", "call_play_05"}, p.marks...) {
			if bytes.Contains(r.Body, []byte(m)) {
				t.Errorf("after the return, request %d still holds %s:\n%s", r.Seq, m, truncate(string(r.Body), 6000))
			}
		}
		if !bytes.Contains(r.Body, []byte(p.summary)) {
			t.Errorf("after the return, request %d lacks the summary", r.Seq)
		}
	}
}

// runAgentCmd runs cmd in its own process group and returns its stdout,
// failing the test with both outputs when it fails.
func runAgentCmd(t *testing.T, cmd *exec.Cmd) []byte {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	ownProcessGroup(cmd)
	err := cmd.Run()
	_ = killGroup(cmd) // whatever it left behind
	if err != nil {
		t.Fatalf("%s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(cmd.Args, " "), err, stdout.Bytes(), stderr.Bytes())
	}
	return stdout.Bytes()
}

// claudeResult checks claude -p's JSON result is the final answer.
func claudeResult(t *testing.T, out []byte) {
	t.Helper()
	var res struct {
		IsError bool   `json:"is_error"`
		Result  string `json:"result"`
	}
	if err := json.Unmarshal(out, &res); err != nil || res.IsError || res.Result != "FINAL-ANSWER" {
		t.Errorf("claude's result %s (%v), want FINAL-ANSWER", out, err)
	}
}

// agentEnv is a client's environment: PATH (with foldproxy's folder first,
// where the plugin looks for it), an empty HOME and the variables given.
func agentEnv(t *testing.T, home string, kv ...string) []string {
	t.Helper()
	env := []string{
		"PATH=" + filepath.Dir(proxyBin(t)) + string(os.PathListSeparator) + os.Getenv("PATH"),
		"HOME=" + home,
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
		"DISABLE_AUTOUPDATER=1",
		// Claude Code waits at most this long for its MCP servers; a
		// loaded machine starting node can need more than the 30 s default.
		"MCP_TIMEOUT=60000",
	}
	return append(env, kv...)
}

// TestClaudeCodePluginWithRun: foldproxy's plugin installed from the
// repository (a local marketplace) gives Claude Code the MCP entry and the
// skill; "foldproxy run -- claude" wires the model endpoint to the
// project's daemon and, seeing the plugin, adds no second MCP entry. The
// branch folds.
func TestClaudeCodePluginWithRun(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	claude := claudeBin(t)
	home := t.TempDir()
	for _, args := range [][]string{{"plugin", "marketplace", "add", repoDir}, {"plugin", "install", "foldproxy@foldproxy"}} {
		cmd := exec.CommandContext(ctx, claude, args...)
		cmd.Env = agentEnv(t, home)
		runAgentCmd(t, cmd)
	}
	p := newBranchPlay(t)
	const prefix = "mcp__plugin_foldproxy_foldproxy__"
	model := startModelServer(t, p.script(prefix, "Read", map[string]any{"file_path": p.local}))
	cfg, err := json.Marshal(map[string]any{"mcpServers": map[string]any{"fs": p.fsServer(t)},
		"foldproxy": map[string]any{"model": map[string]any{"anthropicURL": model.url}, "readyWait": "60s"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(p.work, "foldproxy.json"), cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { waitNoDaemon(testContext(t, 60*time.Second), t, filepath.Join(p.work, ".foldproxy")) })

	cmd := exec.CommandContext(ctx, proxyBin(t), "run", "--", claude, "-p", "PROMPT-BRANCH: read the files", "--output-format", "json",
		// As root, --dangerously-skip-permissions is refused.
		"--allowedTools", "Read,mcp__plugin_foldproxy_foldproxy")
	cmd.Dir = p.work
	cmd.Env = agentEnv(t, home, "ANTHROPIC_API_KEY=dummy")
	claudeResult(t, runAgentCmd(t, cmd))
	recs := model.records(t)
	p.checkFolded(t, recs, "/v1/messages")
	// One foldproxy entry: the plugin's (run added none), with the skill.
	for _, r := range recs {
		if r.Turn != "create" {
			continue
		}
		if n := bytes.Count(r.Body, []byte(`"name":"`+prefix+`branch_create"`)); n != 1 || bytes.Contains(r.Body, []byte(`"mcp__foldproxy__branch_create"`)) {
			t.Errorf("the first request offers %s %d times (and mcp__foldproxy__: %v), want the plugin's once", prefix+"branch_create", n,
				bytes.Contains(r.Body, []byte(`"mcp__foldproxy__branch_create"`)))
		}
		if !bytes.Contains(r.Body, []byte("context-folding")) {
			t.Error("the first request does not list the plugin's skill context-folding")
		}
	}
}

// TestClaudeCodeImportedProjectFolds: a project whose Claude Code reached
// the model through a gateway (ANTHROPIC_BASE_URL in .claude/settings.json,
// here the scripted model server) is imported with "foldproxy import
// --write"; a plain "claude" in it then folds: its model requests go to
// the daemon that its stdio MCP entry started, and on to the gateway.
func TestClaudeCodeImportedProjectFolds(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	claude := claudeBin(t)
	home := t.TempDir()
	p := newBranchPlay(t)
	const prefix = "mcp__foldproxy__"
	model := startModelServer(t, p.script(prefix, "Read", map[string]any{"file_path": p.local}))
	mcpJSON, err := json.Marshal(map[string]any{"mcpServers": map[string]any{"fs": p.fsServer(t)}})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(p.work, ".mcp.json"), mcpJSON, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(p.work, ".claude"), 0o755); err != nil {
		t.Fatal(err)
	}
	settings := `{"env": {"ANTHROPIC_BASE_URL": "` + model.url + `"}}`
	if err := os.WriteFile(filepath.Join(p.work, ".claude", "settings.json"), []byte(settings), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { waitNoDaemon(testContext(t, 60*time.Second), t, filepath.Join(p.work, ".foldproxy")) })
	imp := exec.CommandContext(ctx, proxyBin(t), "import", "--write")
	imp.Dir = p.work
	imp.Env = agentEnv(t, home)
	out := runAgentCmd(t, imp)
	if !bytes.Contains(out, []byte("env.ANTHROPIC_BASE_URL")) {
		t.Errorf("import does not say it wires the model endpoint:\n%s", out)
	}
	// claude -p sends its first request as soon as its MCP servers are
	// connected, and takes no list_changed later: the daemon's first
	// tools/list must wait for server-filesystem (node, cold, on a loaded
	// machine) longer than the default half second.
	cfgPath := filepath.Join(p.work, "foldproxy.json")
	cfg, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	cfg = bytes.Replace(cfg, []byte(`"foldproxy": {`), []byte(`"foldproxy": {"readyWait": "60s",`), 1)
	if err := os.WriteFile(cfgPath, cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	// The user trusted the project and approved its server, as Claude
	// Code's first interactive start asks.
	trust, _ := json.Marshal(map[string]any{"projects": map[string]any{
		p.work: map[string]any{"hasTrustDialogAccepted": true, "enabledMcpjsonServers": []string{"foldproxy"}},
	}})
	if err := os.WriteFile(filepath.Join(home, ".claude.json"), trust, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, claude, "-p", "PROMPT-BRANCH: read the files", "--output-format", "json",
		"--allowedTools", "Read,mcp__foldproxy")
	cmd.Dir = p.work
	cmd.Env = agentEnv(t, home, "ANTHROPIC_API_KEY=dummy")
	claudeResult(t, runAgentCmd(t, cmd))
	p.checkFolded(t, model.records(t), "/v1/messages")
}

// codexBin is the Codex CLI's native binary from e2e/node_modules.
func codexBin(t *testing.T) string {
	t.Helper()
	return npmScript(t, "@openai/codex-linux-x64", "vendor/x86_64-unknown-linux-musl/bin/codex")
}

// codexPlay is the branch play for Codex: its own tool is exec_command,
// its MCP tools are called through the namespace mcp__foldproxy.
func codexPlay(t *testing.T) (*branchPlay, *modelServer) {
	t.Helper()
	p := newBranchPlay(t)
	model := startModelServer(t, p.script("mcp__foldproxy__", "exec_command", map[string]any{"cmd": "cat " + p.local}))
	return p, model
}

// writeProjectConfig writes the play's foldproxy.json: server-filesystem,
// the model APIs at the scripted model server, and settings.
func (p *branchPlay) writeProjectConfig(t *testing.T, model *modelServer, settings map[string]any) string {
	t.Helper()
	fp := map[string]any{"model": map[string]any{"anthropicURL": model.url, "openaiURL": model.url}, "readyWait": "60s"}
	for k, v := range settings {
		fp[k] = v
	}
	cfg, err := json.Marshal(map[string]any{"mcpServers": map[string]any{"fs": p.fsServer(t)}, "foldproxy": fp})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(p.work, "foldproxy.json")
	if err := os.WriteFile(path, cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { waitNoDaemon(testContext(t, 60*time.Second), t, filepath.Join(p.work, ".foldproxy")) })
	return path
}

// checkCodex checks a codex exec run: the answer printed, no WebSocket
// attempt (the model server saw no GET, Codex logged no error).
func checkCodex(t *testing.T, out []byte, stderr string, model *modelServer) {
	t.Helper()
	if !strings.Contains(string(out), "FINAL-ANSWER") {
		t.Errorf("codex printed %q, want FINAL-ANSWER", out)
	}
	if strings.Contains(stderr, "ERROR") || strings.Contains(stderr, "WebSocket") {
		t.Errorf("codex logged errors:\n%s", stderr)
	}
	for _, r := range model.records(t) {
		if r.Method != "POST" {
			t.Errorf("request %d: %s %s reached the model (want POSTs only)", r.Seq, r.Method, r.Path)
		}
	}
}

// runCodex runs cmd (codex exec ...) and returns its stdout and stderr.
func runCodex(t *testing.T, cmd *exec.Cmd) ([]byte, string) {
	t.Helper()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	ownProcessGroup(cmd)
	err := cmd.Run()
	_ = killGroup(cmd)
	if err != nil {
		t.Fatalf("%s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(cmd.Args, " "), err, stdout.Bytes(), stderr.Bytes())
	}
	return stdout.Bytes(), stderr.String()
}

// codexArgs are codex exec's arguments in these tests. The model is named:
// Codex's default model turns on code mode, where the model calls one exec
// tool whose JavaScript calls the MCP tools (README: "Codex's code mode").
var codexArgs = []string{"exec", "--skip-git-repo-check", "-m", "gpt-5.1", "PROMPT-BRANCH: read the files"}

// TestCodexFoldsThroughRun: "foldproxy run -- codex exec ..." sets up a
// Responses provider at the project's daemon and foldproxy's MCP entry;
// Codex never tries the WebSocket, and its branch folds although it wraps
// every MCP result ("Wall time: ...\nOutput:") and calls the tools through
// a namespace.
func TestCodexFoldsThroughRun(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	p, model := codexPlay(t)
	p.writeProjectConfig(t, model, nil)
	cmd := exec.CommandContext(ctx, proxyBin(t), append([]string{"run", "--", codexBin(t)}, codexArgs...)...)
	cmd.Dir = p.work
	cmd.Env = agentEnv(t, t.TempDir(), "OPENAI_API_KEY=dummy")
	out, stderr := runCodex(t, cmd)
	checkCodex(t, out, stderr, model)
	p.checkFolded(t, model.records(t), "/v1/responses")
}

// TestCodexFoldsWithConfigToml: the README's Codex setup by hand, with
// foldproxy kept running (serve --listen) and a config.toml holding a
// model_providers entry at it and foldproxy's stdio MCP entry (a relay to
// that server), folds too. "codex exec" sends its first request without
// waiting for MCP servers that are slow to start, and takes no
// list_changed later: hence a server that runs before Codex starts.
func TestCodexFoldsWithConfigToml(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	p, model := codexPlay(t)
	cfg := p.writeProjectConfig(t, model, nil)
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	srv := startProcess(t, "foldproxy serve --listen", exec.Command(proxyBin(t), "serve", "--config", cfg, "--listen", addr))
	waitListening(ctx, t, srv, addr)
	// Up, with server-filesystem's tools (readyWait makes the first list
	// wait for it).
	mcpc := directHTTPClient(t, newAgent(), "http://"+addr+"/mcp")
	tools, err := mcpc.rawList(ctx, "tools/list", "tools")
	listed, _ := json.Marshal(tools)
	if err != nil || !bytes.Contains(listed, []byte("fs__read_text_file")) {
		t.Fatalf("foldproxy's tools: %v, %d tools", err, len(tools))
	}
	home := t.TempDir()
	toml := codexReadmeConfig(addr, proxyBin(t), cfg)
	if err := os.MkdirAll(filepath.Join(home, ".codex"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, ".codex", "config.toml"), []byte(toml), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, codexBin(t), codexArgs...)
	cmd.Dir = p.work
	cmd.Env = agentEnv(t, home, "OPENAI_API_KEY=dummy")
	out, stderr := runCodex(t, cmd)
	checkCodex(t, out, stderr, model)
	p.checkFolded(t, model.records(t), "/v1/responses")
}

// codexReadmeConfig is the README's config.toml for Codex, for foldproxy's
// daemon on addr, the binary exe and the config cfg.
func codexReadmeConfig(addr, exe, cfg string) string {
	return strings.NewReplacer("127.0.0.1:8765", addr, "/usr/local/bin/foldproxy", exe, "/path/to/project/foldproxy.json", cfg).Replace(codexReadmeTOML)
}

// codexReadmeTOML is the block of README.md under "### Codex CLI", which
// TestReadmeCodexBlock keeps equal to it.
const codexReadmeTOML = `model_provider = "foldproxy"

[model_providers.foldproxy]
name = "foldproxy"
base_url = "http://127.0.0.1:8765/v1"   # foldproxy serve --listen 127.0.0.1:8765
wire_api = "responses"
env_key = "OPENAI_API_KEY"
supports_websockets = false

[mcp_servers.foldproxy]
command = "/usr/local/bin/foldproxy"
args = ["serve", "--config", "/path/to/project/foldproxy.json"]
startup_timeout_sec = 60

[mcp_servers.foldproxy.tools.branch_create]
approval_mode = "approve"
[mcp_servers.foldproxy.tools.branch_return]
approval_mode = "approve"
[mcp_servers.foldproxy.tools.branch_status]
approval_mode = "approve"
[mcp_servers.foldproxy.tools.branch_recall]
approval_mode = "approve"
`

// opencodeBin is OpenCode's native binary from e2e/node_modules.
func opencodeBin(t *testing.T) string {
	t.Helper()
	return npmScript(t, "opencode-linux-x64", "bin/opencode")
}

// opencodeEnv is OpenCode's environment: offline (no model list fetched,
// no update check), an empty HOME, the API key the openai provider needs.
func opencodeEnv(t *testing.T) []string {
	t.Helper()
	return agentEnv(t, t.TempDir(), "OPENAI_API_KEY=dummy", "OPENCODE_DISABLE_MODELS_FETCH=1", "OPENCODE_DISABLE_AUTOUPDATE=1")
}

// opencodeArgs are opencode's arguments in these tests.
var opencodeArgs = []string{"run", "-m", "openai/gpt-5.1", "PROMPT-BRANCH: read the files"}

// opencodePlay is the branch play for OpenCode: its own tool is read, its
// MCP tools are named <entry>_<tool>, and its openai provider speaks the
// Responses API.
func opencodePlay(t *testing.T) (*branchPlay, *modelServer) {
	t.Helper()
	p := newBranchPlay(t)
	model := startModelServer(t, p.script("foldproxy_", "read", map[string]any{"filePath": p.local}))
	return p, model
}

// TestOpenCodeFoldsThroughRun: "foldproxy run -- opencode run ..." gives
// OpenCode the daemon as its openai provider's base URL and foldproxy as a
// local MCP server (OPENCODE_CONFIG_CONTENT); the branch folds.
func TestOpenCodeFoldsThroughRun(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	p, model := opencodePlay(t)
	p.writeProjectConfig(t, model, nil)
	cmd := exec.CommandContext(ctx, proxyBin(t), append([]string{"run", "--", opencodeBin(t)}, opencodeArgs...)...)
	cmd.Dir = p.work
	cmd.Env = opencodeEnv(t)
	if out := runAgentCmd(t, cmd); !bytes.Contains(out, []byte("FINAL-ANSWER")) {
		t.Errorf("opencode printed %q, want FINAL-ANSWER", out)
	}
	p.checkFolded(t, model.records(t), "/v1/responses")
}

// TestOpenCodeFoldsWithConfig: the README's OpenCode setup by hand, an
// opencode.json in the project with the openai provider's baseURL at a
// running foldproxy and foldproxy's local MCP entry, folds too.
func TestOpenCodeFoldsWithConfig(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	p, model := opencodePlay(t)
	cfg := p.writeProjectConfig(t, model, nil)
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	srv := startProcess(t, "foldproxy serve --listen", exec.Command(proxyBin(t), "serve", "--config", cfg, "--listen", addr))
	waitListening(ctx, t, srv, addr)
	oc := strings.NewReplacer("127.0.0.1:8765", addr, "/usr/local/bin/foldproxy", proxyBin(t), "/path/to/project/foldproxy.json", cfg).Replace(opencodeReadmeJSON)
	if err := os.WriteFile(filepath.Join(p.work, "opencode.json"), []byte(oc), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, opencodeBin(t), opencodeArgs...)
	cmd.Dir = p.work
	cmd.Env = opencodeEnv(t)
	if out := runAgentCmd(t, cmd); !bytes.Contains(out, []byte("FINAL-ANSWER")) {
		t.Errorf("opencode printed %q, want FINAL-ANSWER", out)
	}
	p.checkFolded(t, model.records(t), "/v1/responses")
}

// opencodeReadmeJSON is the block of README.md under "### OpenCode",
// which TestReadmeAgentBlocks keeps equal to it.
const opencodeReadmeJSON = `{
  "$schema": "https://opencode.ai/config.json",
  "provider": {
    "openai": {"options": {"baseURL": "http://127.0.0.1:8765/v1"}}
  },
  "mcp": {
    "foldproxy": {
      "type": "local",
      "command": ["/usr/local/bin/foldproxy", "serve", "--config", "/path/to/project/foldproxy.json"]
    }
  }
}
`

// TestReadmeAgentBlocks: the README's Codex and OpenCode setups are the
// blocks the tests above run.
func TestReadmeAgentBlocks(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(repoDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for name, block := range map[string]string{"config.toml": "```toml\n" + codexReadmeTOML + "```\n", "opencode.json": "```json\n" + opencodeReadmeJSON + "```\n"} {
		if !bytes.Contains(readme, []byte(block)) {
			t.Errorf("README.md does not hold the tested %s block:\n%s", name, block)
		}
	}
}
