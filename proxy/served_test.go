package proxy

import (
	"encoding/json"
	"testing"

	"github.com/foldproxy/foldproxy/upstreams"
)

// Tools are recognised as foldproxy's by the names its MCP front served,
// under any client's prefix for foldproxy's entry, and by nothing else.
func TestServedTools(t *testing.T) {
	var none *ServedTools
	none.Add([]json.RawMessage{json.RawMessage(`{"name":"x"}`)})
	if none.Served("x") {
		t.Fatal("a nil registry served a tool")
	}
	s := NewServedTools()
	if s.Served("mcp__foldproxy__github__search") {
		t.Fatal("a tool was served before any tools/list")
	}
	s.Add([]json.RawMessage{json.RawMessage(`{"name":"github__search","inputSchema":{}}`), json.RawMessage(`{"name":"branch_create"}`)})
	for name, want := range map[string]bool{
		"github__search":                  true,
		"mcp__foldproxy__github__search":  true, // Claude Code, Codex (joined namespace)
		"foldproxy_github__search":        true, // OpenCode
		"mcp__foldproxy__branch_create":   true,
		"mcp__claude_ai_Gmail__search":    false, // a connector: not served
		"mcp__plugin__github__searchAll":  false,
		"mcp__foldproxy__githubx__search": false,
		"xgithub__search":                 false,
		"":                                false,
	} {
		if got := s.Served(name); got != want {
			t.Errorf("Served(%q) = %v, want %v", name, got, want)
		}
	}
}

// The MCP front records the catalogue it serves.
func TestServedToolsFilledByCatalogue(t *testing.T) {
	up := &fakeUpstream{name: "ev", cat: upstreams.Catalog{Tools: []json.RawMessage{json.RawMessage(echoTool)}}}
	served := NewServedTools()
	s, _ := newTestServer(t, []Upstream{up}, func(o *Options) { o.Served = served })
	if served.Served("mcp__foldproxy__ev__echo") {
		t.Fatal("served before any catalogue")
	}
	sess := initSession(t, s, `{}`)
	if resp := do(t, s, sess, "tools/list", `{}`); resp.Error != nil {
		t.Fatal(resp.Error)
	}
	if !served.Served("mcp__foldproxy__ev__echo") || !served.Served("mcp__foldproxy__branch_create") || served.Served("mcp__other__echo") {
		t.Fatalf("the served tools are not the catalogue's: %v", served.names)
	}
}
