package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// waitCancelled waits until flaky's stats count at least n cancelled slow
// calls: the upstream received notifications/cancelled for them.
func waitCancelled(ctx context.Context, t *testing.T, p *peer, n int) {
	t.Helper()
	for {
		text, _ := p.callText(ctx, t, "flaky__stats", nil)
		text, _, _ = strings.Cut(text, "\n") // a forced return's notice may follow
		var st struct{ Cancelled int }
		if err := json.Unmarshal([]byte(text), &st); err != nil {
			t.Fatalf("stats returned %q: %v", text, err)
		}
		if st.Cancelled >= n {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the upstream saw %d cancellations, want %d: %v", st.Cancelled, n, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Issue 14: an upstream call had no end. A call to a server that never
// answers now ends at upstreams.<name>.callTimeout with a tool error naming
// the setting, and the upstream receives notifications/cancelled; a branch
// force-returned at its deadline ends its call in flight the same way.
func TestHangingUpstreamEnds(t *testing.T) {
	cfg := writeConfig(t,
		map[string]any{"flaky": stdioEntry(helperBin(t, "flaky"), "-crash-every", "0")},
		map[string]any{"upstreams": map[string]any{"flaky": map[string]any{"callTimeout": "2s"}}})
	p := startProxyStdio(t, cfg, nil)
	ctx := testContext(t, 60*time.Second)

	text, res := p.callText(ctx, t, "flaky__slow", map[string]any{"ms": 600000})
	if !res.IsError || !strings.Contains(text, "upstreams.flaky.callTimeout") || !strings.Contains(text, "within 2s") {
		t.Fatalf("hanging call: isError=%v %q; want a tool error naming upstreams.flaky.callTimeout", res.IsError, text)
	}
	waitCancelled(ctx, t, p, 1)

	// A branch whose deadline passes during a call: the call ends with the
	// branch, and is cancelled upstream.
	text, res = p.callText(ctx, t, "branch_create", map[string]any{"description": "deadline during a call", "timeout_seconds": 1})
	if res.IsError {
		t.Fatalf("branch_create: %s", text)
	}
	var created struct {
		BranchID string `json:"branch_id"`
	}
	if err := json.Unmarshal([]byte(text), &created); err != nil || created.BranchID == "" {
		t.Fatalf("branch_create returned %q (%v)", text, err)
	}
	text, res = p.callText(ctx, t, "flaky__slow", map[string]any{"ms": 600000, "branch_id": created.BranchID})
	if !res.IsError || !strings.Contains(text, "branch closed while this call was in flight") || !strings.Contains(text, created.BranchID) {
		t.Fatalf("call in a branch reaching its deadline: isError=%v %q", res.IsError, text)
	}
	t.Logf("the agent sees: %s", text)
	waitCancelled(ctx, t, p, 2)
}
