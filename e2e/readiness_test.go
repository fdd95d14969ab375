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

// TestReadinessDeadAndSlowUpstreams: with one upstream whose command does
// not exist and one that cannot start until the test lets it, foldproxy
// answers initialize and tools/list at once (default readyWait), says in
// its instructions and in branch_status which upstreams are not up and
// why, and announces the slow one's tools with list_changed once it is up.
// The slow upstream is held by a gate file, not by a delay: the test waits
// on events only.
func TestReadinessDeadAndSlowUpstreams(t *testing.T) {
	ctx := testContext(t, 90*time.Second)
	gate := filepath.Join(t.TempDir(), "gate")
	ev := everythingStdioEntry(t)
	slowArgs := append([]string{ev["command"].(string)}, ev["args"].([]string)...)
	slow := stdioEntry("sh", append([]string{"-c", `while [ ! -e "$0" ]; do sleep 0.05; done; exec "$@"`, gate}, slowArgs...)...)
	missing := filepath.Join(t.TempDir(), "no-such-server")
	cfg := writeConfig(t, map[string]any{
		"dead": stdioEntry(missing),
		"slow": slow,
	}, map[string]any{"readyWait": "500ms"}) // the default, said explicitly

	start := time.Now()
	tr := stdioTransport(t, "foldproxy", proxyBin(t), "serve", "--config", cfg, "--state", t.TempDir())
	p := &peer{name: "foldproxy", agent: newAgent(), notes: newRecorder()}
	p.Client = client.NewClient(tr, client.WithProtocolVersion(protocolVersion))
	p.OnNotification(p.notes.add)
	life, stop := context.WithCancel(context.Background())
	t.Cleanup(func() { _ = p.Close(); stop() })
	if err := p.Start(life); err != nil {
		t.Fatalf("starting the client: %v", err)
	}
	init, err := p.Initialize(ctx, mcp.InitializeRequest{Params: mcp.InitializeParams{
		ProtocolVersion: protocolVersion,
		ClientInfo:      mcp.Implementation{Name: "readiness", Version: "1"},
	}})
	if err != nil {
		t.Fatalf("initialize: %v", err)
	}
	names := func() []string {
		t.Helper()
		res, err := p.ListTools(ctx, mcp.ListToolsRequest{})
		if err != nil {
			t.Fatalf("tools/list: %v", err)
		}
		var out []string
		for _, tool := range res.Tools {
			out = append(out, tool.Name)
		}
		return out
	}
	first := names()
	elapsed := time.Since(start)
	t.Logf("process start to first tools/list answer, one dead and one held upstream: %s", elapsed.Round(time.Millisecond))

	// The gate is still shut: the list was answered without the slow
	// upstream, which is still starting.
	if slices.Contains(first, "slow__echo") {
		t.Fatalf("slow__echo listed before its server could start: %v", first)
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

	// Open the gate: the slow upstream comes up and is announced.
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := p.notes.waitFor(ctx, 1, func(n note) bool { return n.Method == "notifications/tools/list_changed" }); err != nil {
		t.Fatalf("no tools/list_changed after the slow upstream came up: %v", err)
	}
	if now := names(); !slices.Contains(now, "slow__echo") {
		t.Errorf("after list_changed, tools/list lacks slow__echo: %v", now)
	}
	status, _ = p.callText(ctx, t, "branch_status", nil)
	if strings.Contains(status, "slow (") || !strings.Contains(status, "dead (down") {
		t.Errorf("branch_status after the slow upstream came up:\n%s", status)
	}
}
