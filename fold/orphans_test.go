package fold

import (
	"testing"
	"time"

	"github.com/foldproxy/foldproxy/fold/store"
)

// TestOrphansListedAcknowledgedAged: branches that ended without a return
// because their session went away (ended, or a restart) are listed by
// branch_status of a later session of the same principal, not of another
// principal, until acknowledged or older than fold.orphanMaxAge.
func TestOrphansListedAcknowledgedAged(t *testing.T) {
	store := store.NewMemStore()
	clk := &clockAt{time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)}
	newMgr := func(principal string) *Manager {
		m, err := NewManager(t.Context(), Options{Store: store, Counter: wordCounter{}, PruneInterval: -1, Principal: principal, Now: clk.now})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		if err := m.Recover(t.Context(), nil); err != nil {
			t.Fatal(err)
		}
		return m
	}
	a := newMgr("alice")
	e := &testEnv{m: a, store: store}
	open := func(m *Manager, id string) {
		if err := m.OpenSession(t.Context(), SessionRecord{ID: id, Transport: "stdio"}); err != nil {
			t.Fatal(err)
		}
	}
	open(a, "s1")
	ended := e.create(t, map[string]any{"description": "read the scheduler"})
	returned := e.create(t, map[string]any{"description": "returned work"})
	e.mustCall(t, "s1", ToolReturn, map[string]any{"branch_id": returned, "message": "done"})
	if err := a.EndSession(t.Context(), "s1"); err != nil {
		t.Fatal(err)
	}
	// A session cut by a crash: its branch is failed at the next start.
	open(a, "s2")
	crashed, _ := e.m.CallTool(t.Context(), "s2", ToolCreate, []byte(`{"description":"grep the logs"}`))
	_ = crashed
	a.Close()

	b := newMgr("alice")
	eb := &testEnv{m: b, store: store}
	open(b, "s3")
	tree := eb.mustCall(t, "s3", ToolStatus, map[string]any{})
	orphans, _ := tree["orphans"].([]any)
	if len(orphans) != 2 {
		t.Fatalf("orphans %v, want the ended session's branch and the crashed one's", tree["orphans"])
	}
	reasons := map[string]bool{}
	for _, o := range orphans {
		om := o.(map[string]any)
		reasons[om["reason"].(string)] = true
		if om["branch_id"] == returned {
			t.Errorf("a returned branch is listed as an orphan")
		}
	}
	if !reasons[ReasonSessionEnd] || !reasons[ReasonProxyRestarted] {
		t.Fatalf("orphans' reasons %v", reasons)
	}
	_ = ended

	// Another principal sees none of them.
	c := newMgr("bob")
	ec := &testEnv{m: c, store: store}
	open(c, "s4")
	if tree := ec.mustCall(t, "s4", ToolStatus, map[string]any{}); tree["orphans"] != nil {
		t.Fatalf("bob sees alice's orphans: %v", tree["orphans"])
	}

	// Acknowledged, they are not listed again, even after a restart.
	if ack := eb.mustCall(t, "s3", ToolStatus, map[string]any{"acknowledge": true}); ack["acknowledged"].(float64) != 2 {
		t.Fatalf("acknowledge: %v", ack)
	}
	if tree := eb.mustCall(t, "s3", ToolStatus, map[string]any{}); tree["orphans"] != nil {
		t.Fatalf("after acknowledging: %v", tree["orphans"])
	}
	b.Close()
	d := newMgr("alice")
	ed := &testEnv{m: d, store: store}
	open(d, "s5")
	if tree := ed.mustCall(t, "s5", ToolStatus, map[string]any{}); tree["orphans"] != nil {
		t.Fatalf("after a restart: %v", tree["orphans"])
	}
	// A new orphan ages out after fold.orphanMaxAge.
	id, _ := d.CallTool(t.Context(), "s5", ToolCreate, []byte(`{"description":"long gone"}`))
	_ = id
	if err := d.EndSession(t.Context(), "s5"); err != nil {
		t.Fatal(err)
	}
	open(d, "s6")
	if tree := ed.mustCall(t, "s6", ToolStatus, map[string]any{}); len(tree["orphans"].([]any)) != 1 {
		t.Fatalf("the new orphan: %v", tree["orphans"])
	}
	clk.t = clk.t.Add(73 * time.Hour)
	if tree := ed.mustCall(t, "s6", ToolStatus, map[string]any{}); tree["orphans"] != nil {
		t.Fatalf("an orphan older than 72h: %v", tree["orphans"])
	}
}
