package fold

import "testing"

// TestReturnSaysParentForced: a return answer that spends its parent's last
// tokens force-returns the parent and says so, rather than leaving the
// parent to learn it from a refused call.
func TestReturnSaysParentForced(t *testing.T) {
	e := newEnv(t, nil)
	parent := e.create(t, map[string]any{"budget": 200})
	child := e.create(t, map[string]any{"budget": 50, "parent_branch_id": parent})
	// The answer, compact JSON, is three words here: leave the parent three.
	pb := e.branch(t, parent)
	if _, _, err := e.charge(t, "s1", parent, pb.Budget-pb.Used-3); err != nil {
		t.Fatal(err)
	}
	ans := e.mustCall(t, "s1", ToolReturn, map[string]any{"branch_id": child, "message": "done here now"})
	if ans["parent_force_returned"] != true {
		t.Fatalf("answer %v does not say the parent was force-returned", ans)
	}
	if b := e.branch(t, parent); b.Status != StatusForced || b.Reason != ReasonBudget || b.Used != b.Budget {
		t.Fatalf("parent %s (%s), %d of %d used", b.Status, b.Reason, b.Used, b.Budget)
	}

	// With tokens to spare the answer says nothing of it.
	e2 := newEnv(t, nil)
	p2 := e2.create(t, map[string]any{"budget": 200})
	c2 := e2.create(t, map[string]any{"budget": 50, "parent_branch_id": p2})
	if ans := e2.mustCall(t, "s1", ToolReturn, map[string]any{"branch_id": c2, "message": "done here now"}); ans["parent_force_returned"] != nil {
		t.Fatalf("answer %v", ans)
	}
	if b := e2.branch(t, p2); b.Status != StatusActive {
		t.Fatalf("parent %s", b.Status)
	}
}
