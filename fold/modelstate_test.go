package fold

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/foldproxy/foldproxy/fold/modelwire"
	"github.com/foldproxy/foldproxy/policy"
)

func words(n int, w string) string { return strings.TrimSpace(strings.Repeat(w+" ", n)) }

func TestModelStateChargesOnceAndCuts(t *testing.T) {
	e := newEnv(t, nil)
	id := e.create(t, map[string]any{"budget": 100})
	st := e.m.ModelState()
	ctx := t.Context()

	d, err := st.ChargeResult(ctx, id, "tu1", "Read", words(40, "a"))
	if err != nil || d.Keep != len(words(40, "a")) || d.Notice != "" {
		t.Fatalf("first charge: %+v, %v", d, err)
	}
	if b := e.branch(t, id); b.Used != 40 || b.ByTool["model/Read"] != 40 {
		t.Fatalf("used %d, by tool %v", b.Used, b.ByTool)
	}
	// Same key: same decision, no charge.
	if d2, _ := st.ChargeResult(ctx, id, "tu1", "Read", words(40, "a")); d2 != d {
		t.Fatalf("second charge decided %+v, want %+v", d2, d)
	}
	if b := e.branch(t, id); b.Used != 40 {
		t.Fatalf("a resend charged again: used %d", b.Used)
	}
	// An overrun: cut to fit with the notice, archived, force-returned.
	big := words(200, "b")
	d, err = st.ChargeResult(ctx, id, "tu2", "Bash", big)
	if err != nil {
		t.Fatal(err)
	}
	if d.Keep >= len(big) || !strings.Contains(d.Notice, "branch_recall with handle") || !strings.Contains(d.Notice, "force-returned") {
		t.Fatalf("cut: %+v", d)
	}
	b := e.branch(t, id)
	if b.Status != StatusForced || b.Reason != ReasonBudget || b.Used > 100 || len(b.Cuts) != 1 {
		t.Fatalf("after the cut: %+v", b)
	}
	kept := len(strings.Fields(big[:d.Keep]))
	if b.Used != 40+kept+len(strings.Fields(d.Notice)) {
		t.Fatalf("used %d, want %d", b.Used, 40+kept+len(strings.Fields(d.Notice)))
	}
	// The rest is recalled by the handle of the notice.
	ans := e.mustCall(t, "s1", ToolRecall, map[string]any{"handle": b.Cuts[0], "max_tokens": 1000})
	if got := fmt.Sprint(ans["text"]); got != big[d.Keep:] {
		t.Fatalf("recalled %q, want the rest %q", got, big[d.Keep:])
	}
	// The branch reports where its span ends; a later result is free.
	mb, ok, err := st.Branch(ctx, id)
	if err != nil || !ok || !mb.Closed || mb.EndCall != "tu2" || !strings.Contains(mb.Summary, "force-returned") {
		t.Fatalf("Branch: %+v %v %v", mb, ok, err)
	}
	if d3, _ := st.ChargeResult(ctx, id, "tu3", "Bash", big); d3.Keep != len(big) || d3.Notice != "" {
		t.Fatalf("a result after the forced return: %+v", d3)
	}
}

func TestModelStateWarningNotice(t *testing.T) {
	e := newEnv(t, nil)
	id := e.create(t, map[string]any{"budget": 400})
	d, err := e.m.ModelState().ChargeResult(t.Context(), id, "tu1", "Read", words(340, "a"))
	if err != nil || d.Keep != len(words(340, "a")) || !strings.Contains(d.Notice, "budget: 358/400 tokens used (89%, warning)") {
		t.Fatalf("%+v %v", d, err)
	}
}

// Decisions survive a restart: a new Manager on the same Badger store
// decides the same and charges nothing.
func TestModelStateDecisionsSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	s1 := openBadgerT(t, dir)
	e := newEnvStore(t, s1, nil)
	id := e.create(t, map[string]any{"budget": 50})
	big := words(120, "c")
	d1, err := e.m.ModelState().ChargeResult(t.Context(), id, "tu1", "Bash", big)
	if err != nil || d1.Keep >= len(big) {
		t.Fatalf("%+v %v", d1, err)
	}
	e.m.Close()
	s1.Close()

	s2 := openBadgerT(t, dir)
	m2, err := NewManager(t.Context(), Options{Settings: policy.Default().Fold, Store: s2, Counter: wordCounter{}, PruneInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	d2, err := m2.ModelState().ChargeResult(t.Context(), id, "tu1", "Bash", big)
	if err != nil || d2 != d1 {
		t.Fatalf("after restart: %+v (%v), want %+v", d2, err, d1)
	}
	b, ok, err := m2.ModelState().Branch(t.Context(), id)
	if err != nil || !ok || b.EndCall != "tu1" {
		t.Fatalf("after restart: %+v %v %v", b, ok, err)
	}
}

// The whole seam: Apply with the Manager as State folds a returned branch
// found through the fold tools' real answers.
func TestModelStateApplyFolds(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	createText := mustText(t, e, ToolCreate, map[string]any{"description": "look around", "budget": 1000})
	var ca struct {
		BranchID string `json:"branch_id"`
	}
	if err := json.Unmarshal([]byte(createText), &ca); err != nil {
		t.Fatal(err)
	}
	conv := func(extra ...any) []byte {
		msgs := []any{
			map[string]any{"role": "user", "content": "go"},
			map[string]any{"role": "assistant", "content": []any{map[string]any{"type": "tool_use", "id": "c1", "name": "mcp__fp__branch_create", "input": map[string]any{"description": "look around"}}}},
			map[string]any{"role": "user", "content": []any{map[string]any{"type": "tool_result", "tool_use_id": "c1", "content": []any{map[string]any{"type": "text", "text": createText}}}}},
			map[string]any{"role": "assistant", "content": []any{map[string]any{"type": "tool_use", "id": "r1", "name": "Read", "input": map[string]any{"file_path": "x"}}}},
			map[string]any{"role": "user", "content": []any{map[string]any{"type": "tool_result", "tool_use_id": "r1", "content": "FILE-BODY " + words(30, "x")}}},
		}
		b, _ := json.Marshal(map[string]any{"model": "m", "messages": append(msgs, extra...)})
		return b
	}
	st := e.m.ModelState()
	res, err := modelwire.Apply(ctx, modelwire.Anthropic, conv(), st, modelwire.Options{Count: wordCounter{}.CountText})
	if err != nil || res.Changed {
		t.Fatalf("open branch: %v %s", err, res.Body)
	}
	if b := e.branch(t, ca.BranchID); b.Used != 31 {
		t.Fatalf("the Read result was not charged: used %d", b.Used)
	}
	retText := mustText(t, e, ToolReturn, map[string]any{"message": "found it in x"})
	res, err = modelwire.Apply(ctx, modelwire.Anthropic, conv(
		map[string]any{"role": "assistant", "content": []any{map[string]any{"type": "tool_use", "id": "x1", "name": "mcp__fp__branch_return", "input": map[string]any{"message": "found it in x"}}}},
		map[string]any{"role": "user", "content": []any{map[string]any{"type": "tool_result", "tool_use_id": "x1", "content": []any{map[string]any{"type": "text", "text": retText}}}}},
	), st, modelwire.Options{Count: wordCounter{}.CountText})
	if err != nil || len(res.Folded) != 1 || strings.Contains(string(res.Body), "FILE-BODY") || !strings.Contains(string(res.Body), "found it in x") {
		t.Fatalf("fold: %v %+v\n%s", err, res.Folded, res.Body)
	}
	if err := modelwire.Check(modelwire.Anthropic, res.Body); err != nil {
		t.Fatal(err)
	}
}

func mustText(t *testing.T, e *testEnv, tool string, args any) string {
	t.Helper()
	_, text, ok := e.call(t, "s1", tool, args)
	if !ok {
		t.Fatalf("%s refused: %s", tool, text)
	}
	return text
}

// The context size of the latest model request shows in branch_status and
// is stored in the root's record (for foldproxy report).
func TestModelStateObserve(t *testing.T) {
	e := newEnv(t, nil)
	id := e.create(t, map[string]any{"budget": 100})
	obs, ok := e.m.ModelState().(modelwire.Observer)
	if !ok {
		t.Fatal("the Manager's State is not an Observer")
	}
	if err := obs.Observe(t.Context(), modelwire.Result{Branches: []string{id}, TokensBefore: 5000, TokensAfter: 1200, Folded: []string{"x"}}); err != nil {
		t.Fatal(err)
	}
	ans := e.mustCall(t, "s1", ToolStatus, map[string]any{})
	mc, _ := ans["model_context"].(map[string]any)
	if mc["tokens_before"] != 5000.0 || mc["tokens_after"] != 1200.0 || mc["branches_folded"] != 1.0 {
		t.Fatalf("branch_status model_context = %v", ans["model_context"])
	}
	if root := e.branch(t, RootID("s1")); root.ModelContext == nil || root.ModelContext.TokensAfter != 1200 {
		t.Fatalf("root record: %+v", root.ModelContext)
	}
}

// A branch closed without the conversation showing it (here: its parent
// returned) gets its notice with the newest result inside its span, once
// and for good, and folds after the model's next turn.
func TestModelStateMarkEnd(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	parent := e.create(t, map[string]any{"budget": 1000})
	childText := mustText(t, e, ToolCreate, map[string]any{"description": "child", "budget": 500, "parent_branch_id": parent})
	var ca struct {
		BranchID string `json:"branch_id"`
	}
	if err := json.Unmarshal([]byte(childText), &ca); err != nil {
		t.Fatal(err)
	}
	conv := func(extra ...any) []byte {
		msgs := []any{
			map[string]any{"role": "user", "content": "go"},
			map[string]any{"role": "assistant", "content": []any{map[string]any{"type": "tool_use", "id": "c1", "name": "branch_create", "input": map[string]any{}}}},
			map[string]any{"role": "user", "content": []any{map[string]any{"type": "tool_result", "tool_use_id": "c1", "content": childText}}},
			map[string]any{"role": "assistant", "content": []any{map[string]any{"type": "tool_use", "id": "r1", "name": "Read", "input": map[string]any{}}}},
			map[string]any{"role": "user", "content": []any{map[string]any{"type": "tool_result", "tool_use_id": "r1", "content": "CHILD-READ"}}},
		}
		b, _ := json.Marshal(map[string]any{"model": "m", "messages": append(msgs, extra...)})
		return b
	}
	mustText(t, e, ToolReturn, map[string]any{"branch_id": parent, "message": "done"})
	st := e.m.ModelState()
	opt := modelwire.Options{Count: wordCounter{}.CountText}
	res, err := modelwire.Apply(ctx, modelwire.Anthropic, conv(), st, opt)
	if err != nil || len(res.Folded) != 0 || !strings.Contains(string(res.Body), `CHILD-READ\n\n[foldproxy] Branch `+ca.BranchID) || !strings.Contains(string(res.Body), "Continue in the parent.") {
		t.Fatalf("notice: %v\n%s", err, res.Body)
	}
	again, err := modelwire.Apply(ctx, modelwire.Anthropic, conv(), st, opt)
	if err != nil || string(again.Body) != string(res.Body) {
		t.Fatalf("a resend differs: %v\n%s", err, again.Body)
	}
	res, err = modelwire.Apply(ctx, modelwire.Anthropic, conv(
		map[string]any{"role": "assistant", "content": "back in the parent"},
		map[string]any{"role": "user", "content": "next"}), st, opt)
	if err != nil || len(res.Folded) != 1 || strings.Contains(string(res.Body), "CHILD-READ") {
		t.Fatalf("not folded after the next turn: %v %v\n%s", err, res.Folded, res.Body)
	}
	if err := modelwire.Check(modelwire.Anthropic, res.Body); err != nil {
		t.Fatal(err)
	}
	// The mark is in the archive: a fresh table reads it back.
	e.m.mu.Lock()
	delete(e.m.model, ca.BranchID)
	e.m.mu.Unlock()
	if b, _, _ := st.Branch(ctx, ca.BranchID); b.EndCall != "r1" || b.EndNotice == "" {
		t.Fatalf("after reload: %+v", b)
	}
}

// TestModelStateEndsWithNotice walks a branch down with model-wire results:
// a result that would leave less than the notice reserve is cut with the
// full cut notice and force-returns the branch, so its last result says why.
func TestModelStateEndsWithNotice(t *testing.T) {
	e := newEnv(t, nil)
	id := e.create(t, map[string]any{"budget": 100})
	st := e.m.ModelState()
	var last modelwire.Decision
	for i := range 10 {
		text := words(30, "a")
		d, err := st.ChargeResult(t.Context(), id, fmt.Sprintf("tu%d", i), "Read", text)
		if err != nil {
			t.Fatal(err)
		}
		if d.Keep < len(text) && d.Notice == "" {
			t.Fatalf("call %d cut without a notice: %+v", i, d)
		}
		last = d
		if e.branch(t, id).Status != StatusActive {
			break
		}
	}
	b := e.branch(t, id)
	if b.Status != StatusForced || !strings.Contains(last.Notice, "branch_recall with handle") || !strings.Contains(last.Notice, "force-returned") {
		t.Fatalf("branch %s (%d of %d used) ended on %+v, want the full cut notice", b.Status, b.Used, b.Budget, last)
	}
	if b.Used > b.Budget {
		t.Fatalf("used %d of %d", b.Used, b.Budget)
	}
}

// TestChargeReserve: Charge gives fit the notice reserve of the branch, and
// a limited main thread's results leave room for a branch's answers.
func TestChargeReserve(t *testing.T) {
	e := newEnv(t, func(f *policy.Fold) { f.RootBudget = 1000 })
	id := e.create(t, map[string]any{"budget": 500})
	_, bud, err := e.charge(t, "s1", id, 10)
	if err != nil {
		t.Fatal(err)
	}
	want := wordCounter{}.CountText(CutNotice(id, bud.Handle, false, 500, 999_999_999, true))
	if bud.Reserve != want || bud.Remaining != 500 {
		t.Fatalf("branch budget: reserve %d, remaining %d; want %d, 500", bud.Reserve, bud.Remaining, want)
	}
	root := RootID("s1")
	rb := e.branch(t, root)
	_, bud, err = e.charge(t, "s1", root, 10)
	if err != nil {
		t.Fatal(err)
	}
	if wantRem := 1000 - rb.Used - rootAnswerReserve; bud.Remaining != wantRem || bud.Reserve == 0 {
		t.Fatalf("root budget: remaining %d, reserve %d; want %d and a reserve", bud.Remaining, bud.Reserve, wantRem)
	}
	// The main thread spends its results' share, and can still start a
	// branch whose answers it pays.
	if _, _, err := e.charge(t, "s1", root, 5000); err != nil {
		t.Fatal(err)
	}
	if rb = e.branch(t, root); rb.Budget-rb.Used != rootAnswerReserve || rb.Status != StatusActive {
		t.Fatalf("root after a cut: %d left, %s; want %d, active", rb.Budget-rb.Used, rb.Status, rootAnswerReserve)
	}
	if id := e.create(t, map[string]any{"description": "after the limit", "budget": 10}); id == "" {
		t.Fatal("no branch")
	}
}

// TestModelStateSpent: on the model wire as on the MCP wire, a branch with
// less left than the shortest cut notice shows the spent notice instead of
// the result, uncharged, and is force-returned; the whole result is kept
// under the handle the notice names.
func TestModelStateSpent(t *testing.T) {
	e := newEnv(t, nil)
	id := e.create(t, map[string]any{"budget": 3})
	text := words(40, "a")
	d, err := e.m.ModelState().ChargeResult(t.Context(), id, "tu1", "Read", text)
	if err != nil {
		t.Fatal(err)
	}
	b := e.branch(t, id)
	if d.Keep != 0 || !strings.HasPrefix(d.Notice, "foldproxy did not deliver this result: branch "+id+" has 3 tokens left") || b.Used != 0 || b.Status != StatusForced || len(b.Cuts) != 1 {
		t.Fatalf("decision %+v; branch used %d, %s, cuts %v", d, b.Used, b.Status, b.Cuts)
	}
	if !strings.Contains(d.Notice, fmt.Sprintf("branch_recall with handle %q", b.Cuts[0])) {
		t.Fatalf("the notice %q does not name the handle %s", d.Notice, b.Cuts[0])
	}
	ans := e.mustCall(t, "s1", ToolRecall, map[string]any{"handle": b.Cuts[0], "max_tokens": 1000})
	if got := fmt.Sprint(ans["text"]); got != text {
		t.Fatalf("recalled %q, want the whole result", got)
	}
}

// TestFitModelMainThread: a main thread is never given the short cut
// notice: when the full one does not fit, it is told why, uncharged.
func TestFitModelMainThread(t *testing.T) {
	e := newEnv(t, nil)
	bud := Budget{Branch: RootID("s1"), Total: 1000, Used: 990, Remaining: 10, Level: "critical", Handle: "root~h"}
	d, ch := e.m.fitModel(bud, true, "tu1", "Read", words(40, "a"))
	want := SpentNotice(RootID("s1"), "root~h", true, 10, 1000)
	if d.Keep != 0 || d.Notice != want || ch.Tokens != 0 || !ch.Cut || string(ch.Rest) != words(40, "a") {
		t.Fatalf("decision %+v, charge %d tokens, cut %v, rest %q; want the spent notice %q", d, ch.Tokens, ch.Cut, ch.Rest, want)
	}
	// With room for the full notice, the main thread gets it.
	bud.Used, bud.Remaining = 900, 100
	d, ch = e.m.fitModel(bud, true, "tu2", "Read", words(400, "a"))
	if d.Keep == 0 || !strings.Contains(d.Notice, "main thread has reached its token budget") || ch.Tokens != 100 {
		t.Fatalf("decision %+v, charge %d", d, ch.Tokens)
	}
}
