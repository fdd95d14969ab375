package fold

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/foldproxy/foldproxy/fold/store"
)

// clockAt is a settable clock.
type clockAt struct{ t time.Time }

func (c *clockAt) now() time.Time { return c.t }

// TestCheckpointSaveResume: a session saves a checkpoint with an open
// branch; the session ends; a new session resumes it and gets the
// summary (and context at level context), and the open branch again with
// the budget and the time it had left; another principal's Manager on the
// same store cannot see or resume it; the texts are scrubbed; a save past
// the size bound is refused and nothing is stored.
func TestCheckpointSaveResume(t *testing.T) {
	store := store.NewMemStore()
	clk := &clockAt{time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)}
	newMgr := func(principal string) *Manager {
		m, err := NewManager(t.Context(), Options{Store: store, Scanner: fakeScanner{}, Counter: wordCounter{}, PruneInterval: -1, Principal: principal, Now: clk.now})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		return m
	}
	e := &testEnv{m: newMgr("alice"), store: store, events: &events{}}
	if err := e.m.OpenSession(t.Context(), SessionRecord{ID: "s1", Transport: "stdio"}); err != nil {
		t.Fatal(err)
	}
	outer := e.create(t, map[string]any{"description": "map the parser", "budget": 5000, "timeout_seconds": 200})
	inner := e.create(t, map[string]any{"description": "read the lexer", "budget": 1000, "timeout_seconds": 100, "parent_branch_id": outer})
	done := e.create(t, map[string]any{"description": "list the tests", "parent_branch_id": outer})
	e.mustCall(t, "s1", ToolReturn, map[string]any{"branch_id": done, "message": "tests are in t/"})
	if _, _, err := e.charge(t, "s1", inner, 300); err != nil {
		t.Fatal(err)
	}
	clk.t = clk.t.Add(40 * time.Second)
	innerUsed, outerUsed := e.branch(t, inner).Used, e.branch(t, outer).Used

	ans := e.mustCall(t, "s1", ToolCheckpointSave, map[string]any{"name": "parser work", "summary": "Half way: the lexer is read. The SECRET is in env.", "context": "Files: lexer.go, parser.go"})
	id := ans["checkpoint_id"].(string)
	if ans["open_branches"].(float64) != 2 || !strings.HasPrefix(id, "ck-") {
		t.Fatalf("checkpoint_save: %v", ans)
	}
	if err := e.m.EndSession(t.Context(), "s1"); err != nil {
		t.Fatal(err)
	}
	clk.t = clk.t.Add(time.Hour) // a session later

	// Another principal sees nothing and cannot resume it.
	bob := newMgr("bob")
	eb := &testEnv{m: bob, store: store}
	if err := bob.OpenSession(t.Context(), SessionRecord{ID: "b1", Transport: "stdio"}); err != nil {
		t.Fatal(err)
	}
	if list := eb.mustCall(t, "b1", ToolCheckpointList, map[string]any{}); len(list["checkpoints"].([]any)) != 0 {
		t.Fatalf("bob lists %v", list)
	}
	if _, text, ok := eb.call(t, "b1", ToolCheckpointResume, map[string]any{"checkpoint_id": id}); ok || !strings.HasPrefix(text, "ErrCheckpointNotFound") {
		t.Fatalf("bob resumed alice's checkpoint: %s", text)
	}

	// A new session of alice's resumes it.
	if err := e.m.OpenSession(t.Context(), SessionRecord{ID: "s2", Transport: "stdio"}); err != nil {
		t.Fatal(err)
	}
	list := e.mustCall(t, "s2", ToolCheckpointList, map[string]any{})
	if items := list["checkpoints"].([]any); len(items) != 1 || items[0].(map[string]any)["checkpoint_id"] != id {
		t.Fatalf("checkpoint_list: %v", list)
	}
	res := e.mustCall(t, "s2", ToolCheckpointResume, map[string]any{"checkpoint_id": id})
	if res["summary"] != "Half way: the lexer is read. The [REDACTED:test] is in env." || res["context"] != nil {
		t.Fatalf("resume at level summary: %v", res)
	}
	var got struct {
		Branches []resumedBranch `json:"branches"`
	}
	raw, _ := json.Marshal(res)
	_ = json.Unmarshal(raw, &got)
	if len(got.Branches) != 2 || got.Branches[0].Was != outer || got.Branches[1].Was != inner {
		t.Fatalf("re-created %+v, want %s then %s", got.Branches, outer, inner)
	}
	nb := e.branch(t, got.Branches[1].BranchID)
	if nb.Session != "s2" || nb.Parent != got.Branches[0].BranchID || nb.Budget != 1000-innerUsed || nb.Used != 0 ||
		nb.Deadline.Sub(clk.t) != 60*time.Second || nb.Status != StatusActive {
		t.Fatalf("the re-created lexer branch: %+v; want under %s, budget %d, 60 s left", nb, got.Branches[0].BranchID, 1000-innerUsed)
	}
	if ob := e.branch(t, got.Branches[0].BranchID); ob.Budget != 5000-outerUsed || outerUsed == 0 || ob.Deadline.Sub(clk.t) != 160*time.Second {
		t.Fatalf("the re-created parser branch: %+v", ob)
	}
	// It works on: charges land in it.
	if r, _, err := e.charge(t, "s2", got.Branches[1].BranchID, 100); err != nil || r.Used != 100 {
		t.Fatalf("charge in the resumed branch: %+v %v", r, err)
	}
	if res := e.mustCall(t, "s2", ToolCheckpointResume, map[string]any{"checkpoint_id": id, "level": "context"}); res["context"] != "Files: lexer.go, parser.go" {
		t.Fatalf("resume at level context: %v", res)
	}

	// Bounds and refusals.
	if _, text, ok := e.call(t, "s2", ToolCheckpointSave, map[string]any{"name": "big", "summary": "x", "context": strings.Repeat("<", 49_000)}); ok || !strings.Contains(text, "over the") {
		t.Fatalf("an oversized checkpoint: %s", text)
	}
	if _, text, ok := e.call(t, "s2", ToolCheckpointSave, map[string]any{"name": "n", "summary": "FAILSCAN"}); ok || !strings.HasPrefix(text, "ErrScanFailed") {
		t.Fatalf("an unscannable summary: %s", text)
	}
	if _, text, ok := e.call(t, "s2", ToolCheckpointResume, map[string]any{"checkpoint_id": id, "level": "all"}); ok || !strings.Contains(text, "not summary or context") {
		t.Fatalf("a bad level: %s", text)
	}
	cs, err := Checkpoints(context.Background(), store, "")
	if err != nil || len(cs) != 1 || cs[0].Resumed != 2 {
		t.Fatalf("stored checkpoints: %+v %v", cs, err)
	}
}
