package fold

import (
	"strings"
	"testing"
	"time"

	"github.com/foldproxy/foldproxy/policy"
)

// TestLearnedBudget: without history a branch gets the default and the
// answer says nothing of it; after similar branches returned having used
// little, a similar branch gets the smallest tier and the answer says
// where it came from; after similar branches were force-returned, a
// larger tier; an asked-for budget is never changed; a branch unlike
// any gets the default.
func TestLearnedBudget(t *testing.T) {
	e := newEnv(t, func(f *policy.Fold) { f.CreatesPerMinute = 1000 })
	ans := e.mustCall(t, "s1", ToolCreate, map[string]any{"description": "read the django admin changelist views"})
	if ans["budget"].(float64) != 8192 || ans["budget_from"] != nil {
		t.Fatalf("without history: %v", ans)
	}
	e.mustCall(t, "s1", ToolReturn, map[string]any{"message": "ok"})
	for i := range 4 {
		id := e.create(t, map[string]any{"description": "read the django admin changelist views", "budget": 8192})
		if _, _, err := e.charge(t, "s1", id, 900+10*i); err != nil {
			t.Fatal(err)
		}
		e.mustCall(t, "s1", ToolReturn, map[string]any{"branch_id": id, "message": "ok"})
	}
	ans = e.mustCall(t, "s1", ToolCreate, map[string]any{"description": "read the django admin changelist views again"})
	if ans["budget"].(float64) != 4096 || !strings.Contains(ans["budget_from"].(string), "similar branches") {
		t.Fatalf("after small similar branches: %v", ans)
	}
	e.mustCall(t, "s1", ToolReturn, map[string]any{"message": "ok"})
	// Force-returned ones ask for more.
	for range 4 {
		id := e.create(t, map[string]any{"description": "grep the sympy printing test logs", "budget": 4096})
		if res, _, err := e.charge(t, "s1", id, 5000); err != nil || !res.Forced {
			t.Fatalf("%+v %v", res, err)
		}
	}
	ans = e.mustCall(t, "s1", ToolCreate, map[string]any{"description": "grep the sympy printing test logs"})
	if ans["budget"].(float64) != 16384 {
		t.Fatalf("after forced similar branches: %v", ans)
	}
	e.mustCall(t, "s1", ToolReturn, map[string]any{"message": "ok"})
	if ans := e.mustCall(t, "s1", ToolCreate, map[string]any{"description": "grep the sympy printing test logs", "budget": 3000}); ans["budget"].(float64) != 3000 || ans["budget_from"] != nil {
		t.Fatalf("an asked-for budget: %v", ans)
	}
	e.mustCall(t, "s1", ToolReturn, map[string]any{"message": "ok"})
	if ans := e.mustCall(t, "s1", ToolCreate, map[string]any{"description": "rotate kubernetes certificates"}); ans["budget"].(float64) != 8192 || ans["budget_from"] != nil {
		t.Fatalf("unlike any: %v", ans)
	}
}

func TestStrategyScore(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	bs := []*Branch{
		{Depth: 0, Status: StatusActive},
		{Depth: 1, Status: StatusReturned, Budget: 1000, Used: 500, Created: t0, Deadline: t0.Add(100 * time.Second), Closed: t0.Add(50 * time.Second)},
		{Depth: 1, Status: StatusReturned, Budget: 1000, Used: 1000, Created: t0, Deadline: t0.Add(100 * time.Second), Closed: t0.Add(100 * time.Second)},
		{Depth: 1, Status: StatusForced, Reason: ReasonBudget, Budget: 1000, Used: 1000},
		{Depth: 1, Status: StatusForced, Reason: ReasonParent, Budget: 1000, Used: 10},
	}
	got := StrategyScore(bs)
	// efficiency (0.5+1)/2, velocity (0.5+0)/2, accuracy 2/3.
	want := Score{Branches: 3, Returned: 2, Forced: 1, TokenEfficiency: 0.75, Velocity: 0.25, Accuracy: 0.667, Score: 0.575}
	if got != want {
		t.Fatalf("StrategyScore = %+v, want %+v", got, want)
	}
}

func TestUsageKindAndModelOutput(t *testing.T) {
	for tool, want := range map[string]string{
		"fs/read_text_file": UsageFileReads, "fs/read_multiple_files": UsageFileReads, "model/Read": UsageFileReads,
		"gh/get_file_contents": UsageFileReads, "ev/resources/read": UsageFileReads,
		"fs/search_files": UsageSearches, "model/Grep": UsageSearches, "model/Glob": UsageSearches, "fs/list_directory": UsageSearches,
		"fs/directory_tree": UsageSearches, "foldproxy/memory_search": UsageSearches,
		"model/Bash": UsageToolCalls, "replay/run": UsageToolCalls, "foldproxy/branch_create": UsageToolCalls, "fs/write_file": UsageToolCalls,
	} {
		if got := UsageKind(tool); got != want {
			t.Errorf("UsageKind(%s) = %s, want %s", tool, got, want)
		}
	}
	e := newEnv(t, nil)
	id := e.create(t, map[string]any{"description": "work"})
	if err := e.m.RecordModelOutput(t.Context(), id, 120); err != nil {
		t.Fatal(err)
	}
	if err := e.m.RecordModelOutput(t.Context(), id, -1); err == nil {
		t.Fatal("negative tokens accepted")
	}
	if err := e.m.RecordModelOutput(t.Context(), "b-nope", 1); err == nil {
		t.Fatal("an unknown branch accepted")
	}
	if _, _, err := e.charge(t, "s1", id, 70); err != nil {
		t.Fatal(err)
	}
	st := e.mustCall(t, "s1", ToolStatus, map[string]any{"branch_id": id, "detailed": true})
	kinds := st["usage_by_kind"].(map[string]any)
	if kinds[UsageReasoning].(float64) != 120 || kinds[UsageFileReads].(float64) != 70 || st["budget_used"].(float64) != 70 {
		t.Fatalf("usage_by_kind %v, budget_used %v: want reasoning 120 beside, not in, the 70 charged", kinds, st["budget_used"])
	}
	// Closed, its output goes to the nearest active ancestor: the root.
	e.mustCall(t, "s1", ToolReturn, map[string]any{"branch_id": id, "message": "done"})
	if err := e.m.RecordModelOutput(t.Context(), id, 30); err != nil {
		t.Fatal(err)
	}
	if r := e.branch(t, RootID("s1")); r.Reasoning != 30 {
		t.Fatalf("the root's reasoning %d, want 30", r.Reasoning)
	}
}
