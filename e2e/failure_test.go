package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
)

// Issue 2 c and d: a crashing upstream, bad configuration, bad input.

// callOutcome calls a tool and returns its text and whether it failed,
// either as a JSON-RPC error or as a tool error (isError).
func callOutcome(ctx context.Context, p *peer, name string, args map[string]any) (string, bool) {
	if args == nil {
		args = map[string]any{}
	}
	res, err := p.CallTool(ctx, mcp.CallToolRequest{Params: mcp.CallToolParams{Name: name, Arguments: args}})
	if err != nil {
		return err.Error(), true
	}
	return resultText(res), res.IsError
}

func TestDirectFlakyCrashes(t *testing.T) {
	ctx := testContext(t, 60*time.Second)
	p := directStdioClient(t, nil, helperBin(t, "flaky"), "-crash-every", "2")
	if text, failed := callOutcome(ctx, p, "work", nil); failed || !strings.Contains(text, "work call 1") {
		t.Fatalf("first work call: %q (failed %v), want it done", text, failed)
	}
	if text, failed := callOutcome(ctx, p, "work", nil); !failed {
		t.Fatalf("second work call: %q, want the process to crash", text)
	}
}

// TestProxyUpstreamCrash: an upstream that dies mid-call gives a clear error
// naming it, the other upstreams keep working, and its next call works.
func TestProxyUpstreamCrash(t *testing.T) {
	cfg := writeConfig(t, map[string]any{
		"flaky":      stdioEntry(helperBin(t, "flaky"), "-crash-every", "2"),
		"everything": everythingStdioEntry(t),
	}, nil)
	fronts := []struct {
		name  string
		start func(t *testing.T) *peer
	}{
		{"stdio-front", func(t *testing.T) *peer { return startProxyStdio(t, cfg, nil) }},
		{"http-front", func(t *testing.T) *peer { _, p := startProxyHTTP(t, cfg, nil); return p }},
	}
	for _, f := range fronts {
		t.Run(f.name, func(t *testing.T) {
			ctx := testContext(t, 90*time.Second)
			p := f.start(t)
			if text, failed := callOutcome(ctx, p, "flaky__work", nil); failed || !strings.Contains(text, "work call 1") {
				t.Fatalf("first flaky__work: %q (failed %v), want it done", text, failed)
			}
			text, failed := callOutcome(ctx, p, "flaky__work", nil)
			if !failed {
				t.Fatalf("second flaky__work (the upstream crashes): %q, want an error", text)
			}
			if !strings.Contains(text, "flaky") {
				t.Errorf("the crash error %q does not name the upstream \"flaky\"", text)
			}
			if text, failed := callOutcome(ctx, p, "everything__echo", map[string]any{"message": "still here"}); failed || !strings.Contains(text, "still here") {
				t.Errorf("everything__echo after flaky crashed: %q (failed %v)", text, failed)
			}
			if text, failed := callOutcome(ctx, p, "flaky__work", nil); failed || !strings.Contains(text, "work call 1") {
				t.Fatalf("flaky__work after the crash: %q (failed %v), want a restarted upstream's first call", text, failed)
			}
		})
	}
}

// runProxyExpectExit runs "foldproxy serve" on a configuration that must be
// refused, with stdin left open, and returns its stderr once it has exited.
func runProxyExpectExit(t *testing.T, cfg string, env []string) string {
	t.Helper()
	ctx := testContext(t, 30*time.Second)
	cmd := exec.CommandContext(ctx, proxyBin(t), "serve", "--config", cfg, "--state", t.TempDir())
	cmd.Env = env
	ownProcessGroup(cmd)
	cmd.Cancel = func() error { return killGroup(cmd) }
	stdin, err := cmd.StdinPipe() // held open: a serving proxy would wait on it
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	var stdout, stderr syncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("foldproxy did not exit on a bad config within the deadline; stderr:\n%s", stderr.String())
	}
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() == 0 {
		t.Fatalf("foldproxy serve exited with %v, want a non-zero status; stderr:\n%s", err, stderr.String())
	}
	if out := stdout.String(); out != "" {
		t.Errorf("foldproxy wrote to stdout, which is for JSON-RPC only: %q", out)
	}
	return stderr.String()
}

// envWithout returns the environment less the named variables.
func envWithout(names ...string) []string {
	return slices.DeleteFunc(os.Environ(), func(kv string) bool {
		k, _, _ := strings.Cut(kv, "=")
		return slices.Contains(names, k)
	})
}

func TestProxyRefusesBadConfig(t *testing.T) {
	const unset = "FOLDPROXY_E2E_UNSET_VAR_6d1e"
	tests := []struct {
		name    string
		config  string // "" for a file that does not exist
		wantAll []string
	}{
		{"malformed JSON", `{"mcpServers": {"a": {"command": "x",}}}`, []string{"mcp.json", "JSON"}},
		{"not an object", `["mcpServers"]`, []string{"mcp.json", "mcpServers"}},
		{"unknown type", `{"mcpServers": {"weird": {"type": "websocket", "url": "ws://127.0.0.1:9"}}}`, []string{"weird", "websocket"}},
		{"unset variable without default", `{"mcpServers": {"x": {"command": "${` + unset + `}"}}}`, []string{unset}},
		{"unknown setting", `{"mcpServers": {}, "foldproxy": {"budgett": 5}}`, []string{"budgett"}},
		{"invalid setting value", `{"mcpServers": {}, "foldproxy": {"fold": {"maxDepth": -1}}}`, []string{"maxDepth"}},
		{"missing file", "", []string{"no-such-config.json"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := filepath.Join(t.TempDir(), "no-such-config.json")
			if tt.config != "" {
				cfg = writeFile(t, "mcp.json", []byte(tt.config))
			}
			stderr := runProxyExpectExit(t, cfg, envWithout(unset))
			for _, w := range tt.wantAll {
				if !strings.Contains(strings.ToLower(stderr), strings.ToLower(w)) {
					t.Errorf("stderr does not name %q:\n%s", w, stderr)
				}
			}
		})
	}
}

// TestProxyMissingCommand: an upstream whose command does not exist does
// not stop the proxy; calls to it fail naming it; the others work.
func TestProxyMissingCommand(t *testing.T) {
	ctx := testContext(t, 90*time.Second)
	cfg := writeConfig(t, map[string]any{
		"ghost":      stdioEntry(filepath.Join(t.TempDir(), "no-such-binary")),
		"everything": everythingStdioEntry(t),
	}, nil)
	p := startProxyStdio(t, cfg, nil)
	tools, err := p.ListTools(ctx, mcp.ListToolsRequest{})
	if err != nil {
		t.Fatalf("tools/list with a broken upstream: %v", err)
	}
	var names []string
	for _, tool := range tools.Tools {
		names = append(names, tool.Name)
	}
	if !slices.Contains(names, "everything__echo") {
		t.Errorf("tools/list lacks everything__echo: %v", names)
	}
	text, failed := callOutcome(ctx, p, "ghost__anything", nil)
	if !failed || !strings.Contains(text, "ghost") {
		t.Errorf("calling a tool of the broken upstream: %q (failed %v), want an error naming \"ghost\"", text, failed)
	}
	if text, failed := callOutcome(ctx, p, "everything__echo", map[string]any{"message": "works"}); failed || !strings.Contains(text, "works") {
		t.Errorf("everything__echo beside a broken upstream: %q (failed %v)", text, failed)
	}
}

// lineConn speaks newline-delimited JSON-RPC with a foldproxy process
// directly, to send what no MCP client would.
type lineConn struct {
	t     *testing.T
	stdin io.WriteCloser
	lines chan []byte
}

// rpcMessage is any JSON-RPC message as foldproxy writes it.
type rpcMessage struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  string          `json:"method"`
	Result  json.RawMessage `json:"result"`
	Error   *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func startLineConn(t *testing.T, cfg string) *lineConn {
	t.Helper()
	cmd := exec.Command(proxyBin(t), "serve", "--config", cfg, "--state", t.TempDir())
	awaitDaemonExit(t, cmd.Args[1:])
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	startProcess(t, "foldproxy (raw stdio)", cmd)
	dumpOnFailure(t, "foldproxy (raw stdio) stderr", stderr)
	c := &lineConn{t: t, stdin: stdin, lines: make(chan []byte, 64)}
	go func() {
		defer close(c.lines)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
		for sc.Scan() {
			c.lines <- append([]byte(nil), sc.Bytes()...)
		}
	}()
	t.Cleanup(func() { stdin.Close() })
	return c
}

func (c *lineConn) send(line string) {
	c.t.Helper()
	if _, err := io.WriteString(c.stdin, line+"\n"); err != nil {
		c.t.Fatalf("writing to foldproxy's stdin: %v", err)
	}
}

// next returns the next response (notifications and requests from the
// proxy are skipped), failing on anything on stdout that is not JSON-RPC.
func (c *lineConn) next(ctx context.Context) rpcMessage {
	c.t.Helper()
	for {
		select {
		case line, ok := <-c.lines:
			if !ok {
				c.t.Fatalf("foldproxy closed stdout")
			}
			var m rpcMessage
			if err := json.Unmarshal(line, &m); err != nil || m.JSONRPC != "2.0" {
				c.t.Fatalf("stdout line is not JSON-RPC 2.0 (%v): %s", err, truncate(string(line), 300))
			}
			if m.Method != "" {
				continue
			}
			return m
		case <-ctx.Done():
			c.t.Fatalf("no response from foldproxy: %v", ctx.Err())
		}
	}
}

func (c *lineConn) initialize(ctx context.Context) {
	c.t.Helper()
	c.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":%q,"capabilities":{},"clientInfo":{"name":"e2e-raw","version":"1"}}}`, protocolVersion))
	if m := c.next(ctx); m.Error != nil || len(m.Result) == 0 {
		c.t.Fatalf("initialize: %+v", m)
	}
	c.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
}

// checkServing sends a ping and a tools/list and requires answers.
func (c *lineConn) checkServing(ctx context.Context, id int) {
	c.t.Helper()
	c.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"ping"}`, id))
	if m := c.next(ctx); m.Error != nil || string(m.ID) != fmt.Sprint(id) {
		c.t.Fatalf("ping %d after bad input: %+v", id, m)
	}
	c.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/list"}`, id+1))
	if m := c.next(ctx); m.Error != nil || !strings.Contains(string(m.Result), `"tools"`) {
		c.t.Fatalf("tools/list %d after bad input: %+v", id+1, m)
	}
}

func TestProxyMalformedJSONRPC(t *testing.T) {
	ctx := testContext(t, 60*time.Second)
	cfg := writeConfig(t, map[string]any{"everything": everythingStdioEntry(t)}, nil)
	c := startLineConn(t, cfg)
	c.initialize(ctx)
	tests := []struct {
		name      string
		line      string
		wantCodes []int
		wantID    string // the id the error must carry
	}{
		{"not JSON", `{not json`, []int{-32700}, "null"},
		{"truncated object", `{"jsonrpc":"2.0","id":5,"method":"pi`, []int{-32700}, "null"},
		{"wrong version", `{"jsonrpc":"1.0","id":6,"method":"ping"}`, []int{-32600}, ""},
		{"empty batch", `[]`, []int{-32600}, "null"},
		{"object id", `{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}`, []int{-32600}, ""},
		{"a string", `"just a string"`, []int{-32600, -32700}, "null"},
		{"no method", `{"jsonrpc":"2.0","id":7}`, []int{-32600}, ""},
		{"unknown method", `{"jsonrpc":"2.0","id":8,"method":"no/such/method"}`, []int{-32601}, "8"},
		{"bad params", `{"jsonrpc":"2.0","id":9,"method":"tools/call","params":"oops"}`, []int{-32602, -32600}, "9"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c.t = t
			c.send(tt.line)
			m := c.next(ctx)
			if m.Error == nil {
				t.Fatalf("%s: got result %s, want a JSON-RPC error", tt.line, m.Result)
			}
			if !slices.Contains(tt.wantCodes, m.Error.Code) || m.Error.Message == "" {
				t.Errorf("%s: error %d %q, want code %v and a message", tt.line, m.Error.Code, m.Error.Message, tt.wantCodes)
			}
			if tt.wantID != "" && string(m.ID) != tt.wantID {
				t.Errorf("%s: error id %s, want %s", tt.line, m.ID, tt.wantID)
			}
			c.checkServing(ctx, 100+10*i)
		})
	}
}

func TestProxyOversizedMessage(t *testing.T) {
	ctx := testContext(t, 60*time.Second)
	const limit = 4096
	cfg := writeConfig(t, map[string]any{"everything": everythingStdioEntry(t)}, map[string]any{"maxMessageBytes": limit})
	c := startLineConn(t, cfg)
	c.initialize(ctx)
	big := strings.Repeat("x", 64<<10)
	c.send(`{"jsonrpc":"2.0","id":42,"method":"tools/call","params":{"name":"everything__echo","arguments":{"message":"` + big + `"}}}`)
	m := c.next(ctx)
	if m.Error == nil {
		t.Fatalf("a %d-byte message under a %d-byte limit got a result, want an error", len(big), limit)
	}
	if m.Error.Code != -32011 || !strings.Contains(m.Error.Message, fmt.Sprint(limit)) {
		t.Errorf("oversized message: error %d %q, want code -32011 and the limit %d named", m.Error.Code, m.Error.Message, limit)
	}
	c.checkServing(ctx, 43)
}
