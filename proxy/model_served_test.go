package proxy

import (
	"encoding/json"
	"testing"
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
