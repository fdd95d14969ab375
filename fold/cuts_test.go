package fold

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/foldproxy/foldproxy/policy"
)

// cutRoot charges n cut results to the root of session s1 and returns
// their handles in order.
func cutRoot(t testing.TB, e *testEnv, n int) []string {
	t.Helper()
	var handles []string
	for range n {
		res, err := e.m.Charge(t.Context(), "s1", RootID("s1"), func(Budget) (Charge, error) {
			return Charge{Upstream: "up", Method: "tools/call", Name: "read", Result: []byte(`"cut"`), Cut: true, Rest: []byte("the rest")}, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		handles = append(handles, res.Handle)
	}
	return handles
}

// A branch's record lists its latest listedCuts cut handles and counts
// them all, so that a main thread that cuts many results does not pay for
// a longer record on every later charge; every handle stays readable.
func TestChargeKeepsLatestCuts(t *testing.T) {
	dir := t.TempDir()
	s := openBadgerT(t, dir)
	e := newEnvStore(t, s, nil)
	handles := cutRoot(t, e, listedCuts)
	// json.Marshal gives the bytes the store writes (store.FuzzEncodeBranch
	// pins its encoder to it).
	full, err := json.Marshal(e.branch(t, RootID("s1")))
	if err != nil {
		t.Fatal(err)
	}
	handles = append(handles, cutRoot(t, e, 3*listedCuts)...)
	b := e.branch(t, RootID("s1"))
	if b.CutCount != 4*listedCuts || !slices.Equal(b.Cuts, handles[len(handles)-listedCuts:]) {
		t.Fatalf("after %d cuts the record counts %d and lists %v; want the last %d of %v", len(handles), b.CutCount, b.Cuts, listedCuts, handles)
	}
	after, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	// Only the counts (calls, tokens, the cut count) have more digits.
	if len(after) > len(full)+len(`,"cutCount":64`)+4 {
		t.Errorf("the record grew from %d bytes at %d cuts to %d at %d:\n%s", len(full), listedCuts, len(after), b.CutCount, after)
	}
	for _, h := range handles {
		if _, err := s.GetCut(t.Context(), h); err != nil {
			t.Errorf("cut %s: %v", h, err)
		}
	}

	// branch_status shows the latest and the count.
	var st struct {
		Tree struct {
			Cuts     []string `json:"cuts"`
			CutCount int      `json:"cut_count"`
		} `json:"tree"`
	}
	_, text, _ := e.call(t, "s1", ToolStatus, map[string]any{})
	if err := json.Unmarshal([]byte(text), &st); err != nil {
		t.Fatal(err)
	}
	if st.Tree.CutCount != 4*listedCuts || !slices.Equal(st.Tree.Cuts, handles[len(handles)-listedCuts:]) {
		t.Errorf("branch_status: cut_count %d, cuts %v", st.Tree.CutCount, st.Tree.Cuts)
	}

	// The same after the store is opened again by a new manager.
	e.m.Close()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := openBadgerT(t, dir)
	defer s2.Close()
	got, err := s2.GetBranch(t.Context(), RootID("s1"))
	if err != nil {
		t.Fatal(err)
	}
	if got.CutCount != 4*listedCuts || !slices.Equal(got.Cuts, b.Cuts) {
		t.Errorf("reopened: count %d, cuts %v", got.CutCount, got.Cuts)
	}
}

// A branch with fewer cuts than listedCuts shows them all and no count.
func TestStatusFewCuts(t *testing.T) {
	e := newEnv(t, nil)
	handles := cutRoot(t, e, 2)
	_, text, _ := e.call(t, "s1", ToolStatus, map[string]any{})
	if strings.Contains(text, "cut_count") {
		t.Errorf("the count is shown when every cut is listed: %s", text)
	}
	for _, h := range handles {
		if !strings.Contains(text, h) {
			t.Errorf("handle %s is not shown: %s", h, text)
		}
	}
}

// The summary of a branch names its cut handles, and their number when it
// does not list them all.
func TestSummaryCutCount(t *testing.T) {
	e := newEnv(t, nil)
	b := &Branch{ID: "b-1", Status: StatusForced, Cuts: []string{"b-1~a", "b-1~b"}, CutCount: 2}
	if s := e.m.summarize(b, nil); !strings.Contains(s, "b-1~a, b-1~b") || strings.Contains(s, "the last") {
		t.Errorf("summary: %s", s)
	}
	b.CutCount = 30
	if s := e.m.summarize(b, nil); !strings.Contains(s, "Cut results: 30, the last 2 of which") {
		t.Errorf("summary: %s", s)
	}
}

// The status of a main thread that ran many branches stays small: it lists
// its latest listedChildren children and counts them all, the closed ones
// being paged apart.
func TestStatusManyChildren(t *testing.T) {
	e := newEnv(t, func(f *policy.Fold) { f.CreatesPerMinute = 100000 })
	var ids []string
	var at25 int
	for i := range 100 {
		b := e.create(t, map[string]any{"description": "x"})
		e.mustCall(t, "s1", ToolReturn, map[string]any{"branch_id": b, "message": "done"})
		ids = append(ids, b)
		if i == 24 {
			_, text, _ := e.call(t, "s1", ToolStatus, map[string]any{})
			at25 = len(text)
		}
	}
	latest := ids[len(ids)-listedChildren:]
	var tree struct {
		Tree struct {
			Children   []string `json:"children"`
			ChildCount int      `json:"child_count"`
		} `json:"tree"`
		Closed     []map[string]any `json:"closed"`
		NextOffset int              `json:"next_offset"`
	}
	_, text, _ := e.call(t, "s1", ToolStatus, map[string]any{})
	if err := json.Unmarshal([]byte(text), &tree); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(tree.Tree.Children, latest) || tree.Tree.ChildCount != 100 || len(tree.Closed) != treeClosedPage || tree.NextOffset != treeClosedPage {
		t.Errorf("tree: children %v (count %d), %d closed, next %d", tree.Tree.Children, tree.Tree.ChildCount, len(tree.Closed), tree.NextOffset)
	}
	// Only the counts have more digits.
	if len(text) > at25+40 {
		t.Errorf("the answer grew from %d bytes at 25 branches to %d at 100: %s", at25, len(text), text)
	}
	var one struct {
		Children   []string `json:"children"`
		ChildCount int      `json:"child_count"`
	}
	_, text, _ = e.call(t, "s1", ToolStatus, map[string]any{"branch_id": RootID("s1")})
	if err := json.Unmarshal([]byte(text), &one); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(one.Children, latest) || one.ChildCount != 100 {
		t.Errorf("the root's status: children %v (count %d)", one.Children, one.ChildCount)
	}
	// A branch with few children lists them all, with no count.
	a := e.create(t, map[string]any{"description": "a"})
	a1 := e.create(t, map[string]any{"description": "a1"})
	_, text, _ = e.call(t, "s1", ToolStatus, map[string]any{"branch_id": a})
	if !strings.Contains(text, `"children":["`+a1+`"]`) || strings.Contains(text, "child_count") {
		t.Errorf("a branch with one child: %s", text)
	}
}
