package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestBranchShareTwoSessions: over the real binary's HTTP front, one
// session that creates branches until refused leaves the other session its
// guaranteed share of the instance-wide cap (fold.guaranteedPerSession).
func TestBranchShareTwoSessions(t *testing.T) {
	cfg := foldProxyConfig(t, map[string]any{}, map[string]any{
		"maxActivePerSession": 10, "maxActivePerInstance": 10, "guaranteedPerSession": 2,
		"createsPerMinute": 100, "maxDepth": 10,
	}, true)
	url, _ := startProxyHTTPProcess(t, cfg)
	ctx := testContext(t, 60*time.Second)
	a := directHTTPClient(t, newAgent(), url)
	b := directHTTPClient(t, newAgent(), url)
	fill := func(name string, p *peer) (int, string) {
		root := foldSessionTree(ctx, t, p).Tree.BranchID
		for n := 0; n <= 10; n++ {
			r := foldCall(ctx, t, p, "branch_create", map[string]any{"description": fmt.Sprintf("%s work %d", name, n), "parent_branch_id": root})
			if r.isError {
				return n, r.text()
			}
		}
		t.Fatalf("session %s created more than the instance cap of 10 branches", name)
		return 0, ""
	}
	// Both sessions are open (each listed its tree) before A fills.
	foldSessionTree(ctx, t, b)
	na, why := fill("A", a)
	if na != 6 || !strings.Contains(why, "ErrTooManyBranches: this session holds 6 active branches, beyond the 2 every session is sure of") {
		t.Errorf("session A created %d branches, then %q; want 6, then the share refusal", na, why)
	}
	nb, why := fill("B", b)
	if nb != 2 {
		t.Errorf("session B created %d branches after A filled its share, want its 2 (%s)", nb, why)
	}
}
