package fold

import (
	"strings"
	"testing"

	"github.com/foldproxy/foldproxy/policy"
)

// fill creates branches under the root of session until one is refused,
// and returns how many it made and the refusal.
func (e *testEnv) fill(t *testing.T, session string) (int, string) {
	t.Helper()
	for n := 0; ; n++ {
		_, text, ok := e.call(t, session, ToolCreate, map[string]any{"description": "work", "parent_branch_id": RootID(session)})
		if !ok {
			return n, text
		}
		if n > 100 {
			t.Fatalf("%s: more than 100 branches created", session)
		}
	}
}

// TestShareOfInstanceCap: one session filling what it may of the
// instance-wide cap leaves every other open session its guaranteed share,
// and a session opened afterwards finds its share free too.
func TestShareOfInstanceCap(t *testing.T) {
	share := func(f *policy.Fold) {
		f.MaxActivePerSess, f.MaxActiveInstance, f.GuaranteedPerSess = 10, 10, 2
		f.CreatesPerMinute = 1000
	}
	e := newEnv(t, share)
	if err := e.m.OpenSession(t.Context(), SessionRecord{ID: "s2"}); err != nil {
		t.Fatal(err)
	}
	// Beyond its own 2, s1 may create while the slot it takes leaves s2's
	// 2 and a newcomer's 2 free: up to 6 active of 10.
	n1, why := e.fill(t, "s1")
	if n1 != 6 {
		t.Errorf("s1 created %d branches, want 6 (10 minus s2's 2 and a newcomer's 2)", n1)
	}
	if want := "ErrTooManyBranches: this session holds 6 active branches, beyond the 2 every session is sure of, and the proxy keeps its last 4 free slots for other sessions"; !strings.HasPrefix(why, want) {
		t.Errorf("s1's refusal = %q, want it to start %q", why, want)
	}
	n2, why := e.fill(t, "s2")
	if n2 != 2 {
		t.Errorf("s2 created %d branches after s1 filled its share, want its 2 (%s)", n2, why)
	}
	if err := e.m.OpenSession(t.Context(), SessionRecord{ID: "s3"}); err != nil {
		t.Fatal(err)
	}
	n3, why := e.fill(t, "s3")
	if n3 != 2 {
		t.Errorf("s3, opened last, created %d branches, want its 2 (%s)", n3, why)
	}
	if !strings.Contains(why, "this proxy has 10 active branches across its sessions, the maximum") {
		t.Errorf("s3's refusal = %q, want the instance cap", why)
	}

	// The control: with the reserve off (the guarantee as large as the
	// per-session maximum), s1 takes the whole cap and s2 gets nothing.
	e = newEnv(t, func(f *policy.Fold) { share(f); f.GuaranteedPerSess = 10 })
	if err := e.m.OpenSession(t.Context(), SessionRecord{ID: "s2"}); err != nil {
		t.Fatal(err)
	}
	if n1, _ := e.fill(t, "s1"); n1 != 10 {
		t.Errorf("no reserve: s1 created %d branches, want all 10", n1)
	}
	if n2, _ := e.fill(t, "s2"); n2 != 0 {
		t.Errorf("no reserve: s2 created %d branches, want 0", n2)
	}
}

// TestShareReleased: a branch that returns gives its slot back, and an
// ending session is owed nothing.
func TestShareReleased(t *testing.T) {
	e := newEnv(t, func(f *policy.Fold) {
		f.MaxActivePerSess, f.MaxActiveInstance, f.GuaranteedPerSess = 10, 10, 2
		f.CreatesPerMinute = 1000
	})
	if err := e.m.OpenSession(t.Context(), SessionRecord{ID: "s2"}); err != nil {
		t.Fatal(err)
	}
	if n, _ := e.fill(t, "s1"); n != 6 {
		t.Fatalf("s1 created %d branches, want 6", n)
	}
	if err := e.m.EndSession(t.Context(), "s2"); err != nil {
		t.Fatal(err)
	}
	// s2 gone: s1 may take s2's share, still leaving a newcomer's.
	if n, why := e.fill(t, "s1"); n != 2 {
		t.Errorf("after s2 ended, s1 created %d more branches, want 2 (%s)", n, why)
	}
	e.mustCall(t, "s1", ToolReturn, map[string]any{"message": "done"})
	if n, why := e.fill(t, "s1"); n != 1 {
		t.Errorf("after a return, s1 created %d more branches, want the 1 freed (%s)", n, why)
	}
}
