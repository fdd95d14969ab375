package e2e

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
)

// TestReadinessDeadAndSlowUpstreams: with one upstream that starts at once,
// one whose command does not exist and one that cannot start until the
// test lets it, foldproxy answers initialize and tools/list without the
// slow one (default readyWait): the first tools/list lists the ready
// upstream's tools while the slow one is still held; the instructions and
// branch_status say which upstreams are not up and why; a second session
// attaching to the warm daemon is answered the same way; and when the slow
// one comes up, both sessions get list_changed and list its tools.
// The slow upstream is held by a gate file, not by a delay, and the ready
// one is known to be up from the daemon's log: the test waits on events
// only.
func TestReadinessDeadAndSlowUpstreams(t *testing.T) {
	ctx := testContext(t, 90*time.Second)
	gate := filepath.Join(t.TempDir(), "gate")
	ev := everythingStdioEntry(t)
	slowArgs := append([]string{ev["command"].(string)}, ev["args"].([]string)...)
	slow := stdioEntry("sh", append([]string{"-c", `while [ ! -e "$0" ]; do sleep 0.05; done; exec "$@"`, gate}, slowArgs...)...)
	missing := filepath.Join(t.TempDir(), "no-such-server")
	cfg := writeConfig(t, map[string]any{
		"ready": replayEntry(t),
		"dead":  stdioEntry(missing),
		"slow":  slow,
	}, map[string]any{"readyWait": "500ms"}) // the default, said explicitly
	state := t.TempDir()

	open := func(name string, roots bool) (*peer, *mcp.InitializeResult) {
		t.Helper()
		tr := stdioTransport(t, name, proxyBin(t), "serve", "--config", cfg, "--state", state)
		p := &peer{name: name, agent: newAgent(), notes: newRecorder()}
		p.Client = client.NewClient(tr, client.WithProtocolVersion(protocolVersion))
		p.OnNotification(p.notes.add)
		life, stop := context.WithCancel(context.Background())
		t.Cleanup(func() { _ = p.Close(); stop() })
		if err := p.Start(life); err != nil {
			t.Fatalf("%s: starting the client: %v", name, err)
		}
		params := mcp.InitializeParams{
			ProtocolVersion: protocolVersion,
			ClientInfo:      mcp.Implementation{Name: "readiness", Version: "1"},
		}
		if roots {
			// Claude Code declares roots: the upstreams are told (those
			// up reconnect, and initialize waits for them), and a slow one
			// must not hold initialize for it.
			params.Capabilities.Roots = &struct {
				ListChanged bool `json:"listChanged,omitempty"`
			}{ListChanged: true}
		}
		init, err := p.Initialize(ctx, mcp.InitializeRequest{Params: params})
		if err != nil {
			t.Fatalf("%s: initialize: %v", name, err)
		}
		return p, init
	}
	names := func(p *peer) []string {
		t.Helper()
		res, err := p.ListTools(ctx, mcp.ListToolsRequest{})
		if err != nil {
			t.Fatalf("%s: tools/list: %v", p.name, err)
		}
		var out []string
		for _, tool := range res.Tools {
			out = append(out, tool.Name)
		}
		return out
	}
	start := time.Now()
	p, init := open("foldproxy", false)
	// The ready upstream is up once the daemon says so.
	upReady := `msg="upstream up" upstream=ready`
	waitLogLine(ctx, t, filepath.Join(state, "foldproxy.log"), upReady, 1)
	first := names(p)
	t.Logf("process start to first tools/list answer, one dead and one held upstream: %s", time.Since(start).Round(time.Millisecond))

	// The gate is still shut: the list was answered without the slow
	// upstream, which is still starting, and with the ready one.
	if slices.Contains(first, "slow__echo") {
		t.Fatalf("slow__echo listed before its server could start: %v", first)
	}
	if !slices.Contains(first, "ready__emit") {
		t.Errorf("the first tools/list lacks the ready upstream's tools: %v", first)
	}
	if !slices.Contains(first, "branch_create") {
		t.Errorf("the first tools/list lacks foldproxy's own tools: %v", first)
	}
	wantDead := `dead (down: command "` + missing + `" not found`
	if !strings.Contains(init.Instructions, wantDead) || !strings.Contains(init.Instructions, "slow (starting)") {
		t.Errorf("instructions do not say which upstreams are down and why (want %q and \"slow (starting)\"):\n%s", wantDead, init.Instructions)
	}
	status, _ := p.callText(ctx, t, "branch_status", nil)
	if !strings.Contains(status, "Upstreams not available: ") || !strings.Contains(status, wantDead) || !strings.Contains(status, "slow (starting)") {
		t.Errorf("branch_status does not name the unavailable upstreams:\n%s", status)
	}

	// A second session, declaring roots, attaches to the warm daemon while
	// the slow upstream is still held: it is answered the same way (the
	// ready upstream reconnects to learn the roots capability, and its
	// initialize waits for that).
	p2, init2 := open("foldproxy 2", true)
	waitLogLine(ctx, t, filepath.Join(state, "foldproxy.log"), upReady, 2)
	second := names(p2)
	if slices.Contains(second, "slow__echo") || !slices.Contains(second, "ready__emit") {
		t.Errorf("the second session's first tools/list (want ready__emit, not slow__echo): %v", second)
	}
	if !strings.Contains(init2.Instructions, wantDead) || !strings.Contains(init2.Instructions, "slow (starting)") {
		t.Errorf("the second session's instructions do not name the unavailable upstreams:\n%s", init2.Instructions)
	}

	// Open the gate: the slow upstream comes up and is announced to both.
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// (The ready upstream's reconnect may have sent list_changed too: each
	// one is followed by a tools/list until slow__echo is there.)
	for _, q := range []*peer{p, p2} {
		for k := 1; ; k++ {
			if _, err := q.notes.waitFor(ctx, k, func(n note) bool { return n.Method == "notifications/tools/list_changed" }); err != nil {
				t.Fatalf("%s: no tools/list_changed listing slow__echo after the slow upstream came up: %v", q.name, err)
			}
			if now := names(q); slices.Contains(now, "slow__echo") {
				if !slices.Contains(now, "ready__emit") {
					t.Errorf("%s: after list_changed, tools/list lacks ready__emit: %v", q.name, now)
				}
				break
			}
		}
	}
	status, _ = p.callText(ctx, t, "branch_status", nil)
	if strings.Contains(status, "slow (") || !strings.Contains(status, "dead (down") {
		t.Errorf("branch_status after the slow upstream came up:\n%s", status)
	}
}

// waitLogLine waits until the log file at path holds n lines containing
// want (the file is read again on each change of its size).
func waitLogLine(ctx context.Context, t *testing.T, path, want string, n int) {
	t.Helper()
	var last int64 = -1
	for {
		if fi, err := os.Stat(path); err == nil && fi.Size() != last {
			last = fi.Size()
			if b, err := os.ReadFile(path); err == nil && strings.Count(string(b), want) >= n {
				return
			}
		}
		select {
		case <-ctx.Done():
			b, _ := os.ReadFile(path)
			t.Fatalf("%s did not log %q %d times: %v\n%s", path, want, n, ctx.Err(), b)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
