package proxy

import (
	"encoding/json"
	"sync"

	"github.com/foldproxy/foldproxy/policy/jsonscan"
)

// ServedTools records the names of the tools foldproxy's MCP front serves
// (every catalogue it builds for tools/list and tools/call), so that the model front tells foldproxy's own
// tools from those of MCP servers the client reaches by itself (Claude
// Code's connectors and plugin servers) by what was served, not by a name
// prefix. The results of served tools were scrubbed and charged on the
// MCP wire; every other tool's results are charged on the model wire.
// Both are scrubbed there (scrubbing a clean text again changes nothing).
// The zero value is not usable; a nil *ServedTools records nothing and
// serves nothing. Its methods are safe for concurrent use.
type ServedTools struct {
	mu    sync.RWMutex
	names map[string]bool
}

// NewServedTools returns an empty registry.
func NewServedTools() *ServedTools { return &ServedTools{names: map[string]bool{}} }

// servedMax bounds the names remembered; past it the set starts again
// (the next tools/list fills it).
const servedMax = 1 << 14

// Add records the names of tools, the tool objects of a catalogue.
func (t *ServedTools) Add(tools []json.RawMessage) {
	if t == nil {
		return
	}
	t.mu.RLock()
	missing := false
	for _, raw := range tools {
		if n := jsonscan.StringField(raw, "name"); n != "" && !t.names[n] {
			missing = true
			break
		}
	}
	t.mu.RUnlock()
	if !missing {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.names)+len(tools) > servedMax {
		t.names = map[string]bool{}
	}
	for _, raw := range tools {
		if n := jsonscan.StringField(raw, "name"); n != "" {
			t.names[n] = true
		}
	}
}

// Served reports whether a tool name on the model wire names a tool the MCP
// front served: the served name itself, or with the client's prefix for
// foldproxy's entry, ending a separator ("mcp__foldproxy__github__search",
// Codex's joined namespace alike, "foldproxy_github__search").
func (t *ServedTools) Served(name string) bool {
	if t == nil || name == "" {
		return false
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.names[name] {
		return true
	}
	for i := 1; i < len(name); i++ {
		switch name[i-1] {
		case '_', '.', '/', '-', ':':
			if t.names[name[i:]] {
				return true
			}
		}
	}
	return false
}
