package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestAgentSetup: each kind of agent gets its model endpoint, foldproxy's
// token and an MCP entry the way it reads them, and nothing it already
// has is lost.
func TestAgentSetup(t *testing.T) {
	base := "http://127.0.0.1:4567"
	in := func(kind string, argv []string, env ...string) agentInput {
		return agentInput{kind: kind, argv: argv, env: append([]string{"PATH=/bin"}, env...), base: base, token: "tok",
			exe: "/opt/fp", config: "/p/foldproxy.json", state: "/p/.foldproxy"}
	}
	get := func(w agentWiring, k string) string { v, _ := lookupEnv(w.env, k); return v }

	// Claude Code: environment, the token after the user's own headers,
	// the MCP entry before the user's arguments.
	w, err := agentSetup(in(agentClaude, []string{"claude", "-p", "hi"}, "ANTHROPIC_CUSTOM_HEADERS=X-Mine: 1", "ANTHROPIC_BASE_URL=https://gateway.example"))
	if err != nil {
		t.Fatal(err)
	}
	if get(w, "ANTHROPIC_BASE_URL") != base || get(w, "ANTHROPIC_CUSTOM_HEADERS") != "X-Mine: 1\nX-Foldproxy-Token: tok" ||
		get(w, "MCP_CONNECTION_NONBLOCKING") != "false" || get(w, "FOLDPROXY_CONFIG") != "/p/foldproxy.json" || get(w, "PATH") != "/bin" {
		t.Errorf("claude env = %q", w.env)
	}
	if len(w.argv) != 5 || w.argv[1] != "--mcp-config" || !slices.Equal(w.argv[3:], []string{"-p", "hi"}) {
		t.Fatalf("claude argv = %q", w.argv)
	}
	var mc struct {
		MCPServers map[string]struct {
			Command string   `json:"command"`
			Args    []string `json:"args"`
		} `json:"mcpServers"`
	}
	if err := json.Unmarshal([]byte(w.argv[2]), &mc); err != nil || mc.MCPServers["foldproxy"].Command != "/opt/fp" ||
		!slices.Equal(mc.MCPServers["foldproxy"].Args, []string{"serve", "--config", "/p/foldproxy.json", "--state", "/p/.foldproxy"}) {
		t.Errorf("--mcp-config %s (%v)", w.argv[2], err)
	}
	// Already connected (imported project, plugin), a subcommand, or
	// the project's .mcp.json as the config.
	c := in(agentClaude, []string{"claude"})
	c.mcpReaches = true
	if w, _ := agentSetup(c); len(w.argv) != 1 {
		t.Errorf("claude with foldproxy in its MCP config already: argv %q", w.argv)
	}
	if w, _ := agentSetup(in(agentClaude, []string{"claude", "mcp", "list"})); len(w.argv) != 3 {
		t.Errorf("claude mcp list: argv %q", w.argv)
	}
	c = in(agentClaude, []string{"claude"})
	c.strictMCP = true
	if w, _ := agentSetup(c); !slices.Contains(w.argv, "--strict-mcp-config") {
		t.Errorf("claude on the project's .mcp.json: argv %q lacks --strict-mcp-config", w.argv)
	}

	// Codex: -c overrides before the subcommand; the key from the
	// environment when there is one, the token from FOLDPROXY_TOKEN.
	w, _ = agentSetup(in(agentCodex, []string{"codex", "exec", "go"}, "OPENAI_API_KEY=k"))
	joined := strings.Join(w.argv, " ")
	for _, want := range []string{`-c model_provider="foldproxy"`, `-c model_providers.foldproxy.base_url="` + base + `/v1"`,
		`-c model_providers.foldproxy.wire_api="responses"`, `-c model_providers.foldproxy.supports_websockets=false`,
		`-c model_providers.foldproxy.env_key="OPENAI_API_KEY"`, `-c mcp_servers.foldproxy.tools.branch_return.approval_mode="approve"`,
		`-c model_providers.foldproxy.env_http_headers={"X-Foldproxy-Token"="FOLDPROXY_TOKEN"}`,
		`-c mcp_servers.foldproxy.command="/opt/fp"`, `-c mcp_servers.foldproxy.args=["serve","--config","/p/foldproxy.json","--state","/p/.foldproxy"]`} {
		if !strings.Contains(joined, want) {
			t.Errorf("codex argv lacks %s:\n%s", want, joined)
		}
	}
	if w.argv[0] != "codex" || !slices.Equal(w.argv[len(w.argv)-2:], []string{"exec", "go"}) || get(w, "FOLDPROXY_TOKEN") != "tok" {
		t.Errorf("codex argv %q, token %q", w.argv, get(w, "FOLDPROXY_TOKEN"))
	}
	if w, _ := agentSetup(in(agentCodex, []string{"codex"})); !strings.Contains(strings.Join(w.argv, " "), "requires_openai_auth=true") {
		t.Errorf("codex without OPENAI_API_KEY: %q", w.argv)
	}

	// OpenCode: merged into the user's own inline configuration.
	w, err = agentSetup(in(agentOpenCode, []string{"opencode"}, `OPENCODE_CONFIG_CONTENT={"model":"openai/gpt-5","provider":{"openai":{"options":{"timeout":5}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	var oc struct {
		Model    string `json:"model"`
		Provider map[string]struct {
			Options map[string]any `json:"options"`
		} `json:"provider"`
		MCP map[string]struct {
			Type    string   `json:"type"`
			Command []string `json:"command"`
		} `json:"mcp"`
	}
	if err := json.Unmarshal([]byte(get(w, "OPENCODE_CONFIG_CONTENT")), &oc); err != nil {
		t.Fatal(err)
	}
	if oc.Model != "openai/gpt-5" || oc.Provider["openai"].Options["baseURL"] != base+"/v1" || oc.Provider["openai"].Options["timeout"] != 5.0 ||
		oc.Provider["anthropic"].Options["baseURL"] != base+"/v1" || oc.MCP["foldproxy"].Type != "local" || oc.MCP["foldproxy"].Command[0] != "/opt/fp" {
		t.Errorf("OPENCODE_CONFIG_CONTENT = %s", get(w, "OPENCODE_CONFIG_CONTENT"))
	}
	if _, err := agentSetup(in(agentOpenCode, []string{"opencode"}, "OPENCODE_CONFIG_CONTENT=[1")); err == nil || !strings.Contains(err.Error(), "OPENCODE_CONFIG_CONTENT") {
		t.Errorf("a malformed OPENCODE_CONFIG_CONTENT: %v", err)
	}

	// Anything else: the SDKs' variables.
	w, _ = agentSetup(in(agentOther, []string{"python3", "agent.py"}))
	if get(w, "OPENAI_BASE_URL") != base+"/v1" || get(w, "ANTHROPIC_BASE_URL") != base || get(w, "FOLDPROXY_MCP_URL") != base+"/mcp" || !slices.Equal(w.argv, []string{"python3", "agent.py"}) {
		t.Errorf("other: env %q argv %q", w.env, w.argv)
	}
	for cmd, want := range map[string]string{"claude": agentClaude, "/usr/bin/codex": agentCodex, "OpenCode.exe": agentOpenCode, "aider": agentOther} {
		if got := agentKindOf(cmd); got != want {
			t.Errorf("agentKindOf(%q) = %q, want %q", cmd, got, want)
		}
	}
}

// TestFindRunConfig: the config an imported .mcp.json runs foldproxy with
// comes first, then foldproxy.json, then the project's .mcp.json; with
// none, the error says how to make one.
func TestFindRunConfig(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := findRunConfig(dir, ""); err == nil || !strings.Contains(err.Error(), "foldproxy import --write") {
		t.Errorf("no config: %v", err)
	}
	write(".mcp.json", `{"mcpServers":{"fs":{"command":"npx"}}}`)
	if rc, err := findRunConfig(dir, ""); err != nil || rc.path != filepath.Join(dir, ".mcp.json") || !rc.projectMCP || rc.mcpRunsFoldproxy {
		t.Errorf("a plain .mcp.json: %+v, %v", rc, err)
	}
	write("foldproxy.json", `{"mcpServers":{}}`)
	if rc, err := findRunConfig(dir, ""); err != nil || rc.path != filepath.Join(dir, "foldproxy.json") || rc.projectMCP {
		t.Errorf("foldproxy.json: %+v, %v", rc, err)
	}
	write(".mcp.json", `{"mcpServers":{"foldproxy":{"command":"/bin/foldproxy","args":["serve","--config","/home/u/.config/foldproxy/projects/p/foldproxy.json"]}}}`)
	if rc, err := findRunConfig(dir, ""); err != nil || rc.path != "/home/u/.config/foldproxy/projects/p/foldproxy.json" || !rc.mcpRunsFoldproxy {
		t.Errorf("an imported project: %+v, %v", rc, err)
	}
	if rc, err := findRunConfig(dir, "other.json"); err != nil || rc.path != filepath.Join(dir, "other.json") {
		t.Errorf("--config: %+v, %v", rc, err)
	}
}
