package e2e

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
)

// toolCall is a tools/call of a named tool.
func toolCall(name, tool string, args map[string]any) call {
	if args == nil {
		args = map[string]any{}
	}
	return call{name: name, method: "tools/call", params: map[string]any{"name": tool, "arguments": args}, named: true}
}

// everythingCalls are server-everything's calls with deterministic
// answers (dynamic resources carry a time, normalized away).
func everythingCalls() []call {
	ts := func(c call) call { c.normalize = normalizeTimestamps; return c }
	return []call{
		toolCall("echo", "echo", map[string]any{"message": "hello from foldproxy e2e ✓"}),
		toolCall("get-sum", "get-sum", map[string]any{"a": 2, "b": 40.5}),
		toolCall("get-sum-invalid", "get-sum", map[string]any{"a": "two"}),
		toolCall("annotated-error-image", "get-annotated-message", map[string]any{"messageType": "error", "includeImage": true}),
		toolCall("annotated-debug", "get-annotated-message", map[string]any{"messageType": "debug"}),
		toolCall("resource-links", "get-resource-links", map[string]any{"count": 4}),
		toolCall("structured-content", "get-structured-content", map[string]any{"location": "Chicago"}),
		toolCall("tiny-image", "get-tiny-image", nil),
		ts(toolCall("resource-reference", "get-resource-reference", map[string]any{"resourceType": "Text", "resourceId": 3})),
		toolCall("unknown-tool", "no-such-tool", nil),
		ts(call{name: "read-dynamic-text", method: "resources/read", params: map[string]any{"uri": "demo://resource/dynamic/text/2"}}),
		{name: "read-unknown", method: "resources/read", params: map[string]any{"uri": "demo://resource/static/document/no-such-file.md"}},
		{name: "prompt-simple", method: "prompts/get", params: map[string]any{"name": "simple-prompt"}, named: true},
		{name: "prompt-args", method: "prompts/get", params: map[string]any{"name": "args-prompt", "arguments": map[string]any{"city": "Lyon", "state": "Rhône"}}, named: true},
		{name: "prompt-completable", method: "prompts/get", params: map[string]any{"name": "completable-prompt", "arguments": map[string]any{"department": "Engineering", "name": "Alice"}}, named: true},
		ts(call{name: "prompt-resource", method: "prompts/get", params: map[string]any{"name": "resource-prompt", "arguments": map[string]any{"resourceType": "Text", "resourceId": "1"}}, named: true}),
	}
}

// fsFixture makes a small folder tree for server-filesystem.
func fsFixture(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"hello.txt":        "hello, foldproxy\nsecond line\n",
		"data.json":        `{"name":"fixture","items":[1,2,3]}`,
		"sub/notes.md":     "# Notes\n\n- one\n- two\n",
		"sub/deep/log.txt": "2025-01-01 INFO started\n2025-01-01 INFO done\n",
	}
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// server-filesystem reports real paths.
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		t.Fatal(err)
	}
	return real
}

// filesystemCalls are server-filesystem's read-only calls on a fixture.
func filesystemCalls(dir string) []call {
	return []call{
		toolCall("list_directory", "list_directory", map[string]any{"path": dir}),
		toolCall("list_directory_with_sizes", "list_directory_with_sizes", map[string]any{"path": dir}),
		toolCall("directory_tree", "directory_tree", map[string]any{"path": dir}),
		toolCall("read_text_file", "read_text_file", map[string]any{"path": filepath.Join(dir, "hello.txt")}),
		toolCall("read_text_file-head", "read_text_file", map[string]any{"path": filepath.Join(dir, "sub/deep/log.txt"), "head": 1}),
		toolCall("read_multiple_files", "read_multiple_files", map[string]any{"paths": []string{filepath.Join(dir, "hello.txt"), filepath.Join(dir, "data.json")}}),
		toolCall("search_files", "search_files", map[string]any{"path": dir, "pattern": "**/*.txt"}),
		toolCall("list_allowed_directories", "list_allowed_directories", nil),
		toolCall("read-missing", "read_text_file", map[string]any{"path": filepath.Join(dir, "missing.txt")}),
		toolCall("read-outside", "read_text_file", map[string]any{"path": "/etc/hostname"}),
	}
}

// readEveryResource adds a resources/read of every resource listed directly.
func readEveryResource(ctx context.Context, t *testing.T, direct *peer) []call {
	t.Helper()
	if direct.GetServerCapabilities().Resources == nil {
		return nil
	}
	items, err := direct.ListResources(ctx, mcp.ListResourcesRequest{})
	if err != nil {
		t.Fatalf("%s: resources/list: %v", direct.name, err)
	}
	var calls []call
	for _, r := range items.Resources {
		calls = append(calls, call{name: "read " + r.URI, method: "resources/read", params: map[string]any{"uri": r.URI}, normalize: normalizeTimestamps})
	}
	return calls
}

func TestDirectServersListTools(t *testing.T) {
	tests := []struct {
		name    string
		connect func(t *testing.T) *peer
		want    []string
	}{
		{"everything-stdio", func(t *testing.T) *peer {
			return directStdioClient(t, nil, nodeBin(t), everythingScript(t), "stdio")
		}, []string{"echo", "get-sum", "trigger-long-running-operation", "trigger-sampling-request", "trigger-elicitation-request", "get-roots-list"}},
		{"everything-sse", func(t *testing.T) *peer {
			return directSSEClient(t, nil, startEverythingHTTP(t, "sse"))
		}, []string{"echo", "get-sum", "trigger-long-running-operation"}},
		{"everything-streamableHttp", func(t *testing.T) *peer {
			return directHTTPClient(t, nil, startEverythingHTTP(t, "streamableHttp"))
		}, []string{"echo", "get-sum", "trigger-long-running-operation", "trigger-sampling-request"}},
		{"filesystem", func(t *testing.T) *peer {
			return directStdioClient(t, nil, nodeBin(t), filesystemScript(t), fsFixture(t))
		}, []string{"read_text_file", "list_directory", "list_allowed_directories", "write_file"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testContext(t, 60*time.Second)
			p := tt.connect(t)
			res, err := p.ListTools(ctx, mcp.ListToolsRequest{})
			if err != nil {
				t.Fatalf("tools/list: %v", err)
			}
			var names []string
			for _, tool := range res.Tools {
				names = append(names, tool.Name)
			}
			for _, w := range tt.want {
				if !slices.Contains(names, w) {
					t.Errorf("tools/list has no %q; got %v", w, names)
				}
			}
			t.Logf("%d tools: %v", len(names), names)
		})
	}
}

// passthroughCase is one upstream compared directly and through foldproxy.
type passthroughCase struct {
	name string
	// setup returns the mcpServers entry for foldproxy, a function that
	// connects a client directly to an equivalent upstream, and the calls.
	setup func(t *testing.T) (entry map[string]any, direct func(a *agent) *peer, calls []call)
}

func passthroughCases() []passthroughCase {
	return []passthroughCase{
		{"everything-stdio", func(t *testing.T) (map[string]any, func(*agent) *peer, []call) {
			return everythingStdioEntry(t), func(a *agent) *peer {
				return directStdioClient(t, a, nodeBin(t), everythingScript(t), "stdio")
			}, everythingCalls()
		}},
		{"everything-sse", func(t *testing.T) (map[string]any, func(*agent) *peer, []call) {
			u := startEverythingHTTP(t, "sse")
			return urlEntry("sse", u), func(a *agent) *peer { return directSSEClient(t, a, u) }, everythingCalls()
		}},
		{"everything-streamableHttp", func(t *testing.T) (map[string]any, func(*agent) *peer, []call) {
			u := startEverythingHTTP(t, "streamableHttp")
			return urlEntry("http", u), func(a *agent) *peer { return directHTTPClient(t, a, u) }, everythingCalls()
		}},
		{"filesystem", func(t *testing.T) (map[string]any, func(*agent) *peer, []call) {
			dir := fsFixture(t)
			return stdioEntry(nodeBin(t), filesystemScript(t), dir), func(a *agent) *peer {
				return directStdioClient(t, a, nodeBin(t), filesystemScript(t), dir)
			}, filesystemCalls(dir)
		}},
	}
}

// TestDirectPassthroughBaseline compares two direct sessions of each
// upstream with the same comparison as TestProxyPassthrough: it proves the
// calls are deterministic and the comparison sound.
func TestDirectPassthroughBaseline(t *testing.T) {
	for _, pc := range passthroughCases() {
		t.Run(pc.name, func(t *testing.T) {
			ctx := testContext(t, 2*time.Minute)
			_, direct, calls := pc.setup(t)
			a, b := direct(nil), direct(nil)
			compareCatalogs(ctx, t, a, b, "", false)
			compareCalls(ctx, t, a, b, "", append(calls, readEveryResource(ctx, t, a)...))
		})
	}
}

// TestProxyPassthrough (issue 2 a): through foldproxy, every upstream's
// catalogue and answers are the direct ones, apart from the "<server>__"
// prefix, the optional branch_id argument and the fold tools.
func TestProxyPassthrough(t *testing.T) {
	for _, pc := range passthroughCases() {
		t.Run(pc.name, func(t *testing.T) {
			entry, direct, calls := pc.setup(t)
			cfg := writeConfig(t, map[string]any{"up": entry}, nil)
			fronts := []struct {
				name  string
				start func(t *testing.T) *peer
			}{
				{"stdio-front", func(t *testing.T) *peer { return startProxyStdio(t, cfg, nil) }},
				{"http-front", func(t *testing.T) *peer { _, p := startProxyHTTP(t, cfg, nil); return p }},
			}
			for _, f := range fronts {
				t.Run(f.name, func(t *testing.T) {
					ctx := testContext(t, 2*time.Minute)
					d := direct(nil)
					p := f.start(t)
					compareCatalogs(ctx, t, d, p, "up__", true)
					compareCalls(ctx, t, d, p, "up__", append(calls, readEveryResource(ctx, t, d)...))
				})
			}
		})
	}
}
