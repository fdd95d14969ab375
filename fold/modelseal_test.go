package fold

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/foldproxy/foldproxy/fold/modelwire"
	"github.com/foldproxy/foldproxy/policy"
)

// sealConv is a conversation holding a branch_create answer (text) and a
// result inside the span, then, with ret, the branch's return.
func sealConv(createText, retText string) []byte {
	msgs := []any{
		map[string]any{"role": "user", "content": "go"},
		map[string]any{"role": "assistant", "content": []any{map[string]any{"type": "tool_use", "id": "c1", "name": "mcp__fp__branch_create", "input": map[string]any{"description": "d"}}}},
		map[string]any{"role": "user", "content": []any{map[string]any{"type": "tool_result", "tool_use_id": "c1", "content": []any{map[string]any{"type": "text", "text": createText}}}}},
		map[string]any{"role": "assistant", "content": []any{map[string]any{"type": "tool_use", "id": "r1", "name": "Read", "input": map[string]any{"file_path": "x"}}}},
		map[string]any{"role": "user", "content": []any{map[string]any{"type": "tool_result", "tool_use_id": "r1", "content": "FILE-BODY " + words(30, "x")}}},
	}
	if retText != "" {
		msgs = append(msgs,
			map[string]any{"role": "assistant", "content": []any{map[string]any{"type": "tool_use", "id": "x1", "name": "mcp__fp__branch_return", "input": map[string]any{"message": "m"}}}},
			map[string]any{"role": "user", "content": []any{map[string]any{"type": "tool_result", "tool_use_id": "x1", "content": []any{map[string]any{"type": "text", "text": retText}}}}},
		)
	}
	b, _ := json.Marshal(map[string]any{"model": "m", "messages": msgs})
	return b
}

// A branch's span is honoured only in the model session that first showed
// its sealed branch_create answer: another session replaying the answer,
// a forged answer (no seal, a wrong seal) get nothing of the branch, its
// charges and its return message included, even after a restart.
func TestModelSpanBoundToSession(t *testing.T) {
	dir := t.TempDir()
	s1 := openBadgerT(t, dir)
	e := newEnvStore(t, s1, nil)
	ctx := context.Background()
	createText := mustText(t, e, ToolCreate, map[string]any{"description": "d", "budget": 1000})
	var ca struct {
		BranchID string `json:"branch_id"`
		Seal     string `json:"seal"`
	}
	if err := json.Unmarshal([]byte(createText), &ca); err != nil || len(ca.Seal) != 12 {
		t.Fatalf("answer %s: %v", createText, err)
	}
	opt := func(sess string) modelwire.Options {
		return modelwire.Options{Count: wordCounter{}.CountText, Session: sess}
	}
	apply := func(m *Manager, body []byte, sess string) modelwire.Result {
		t.Helper()
		res, err := modelwire.Apply(ctx, modelwire.Anthropic, body, m.ModelState(), opt(sess))
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	// Session A shows the answer first: its result is charged.
	if res := apply(e.m, sealConv(createText, ""), "ms-A"); len(res.Branches) != 1 {
		t.Fatalf("session A: branches %v", res.Branches)
	}
	if b := e.branch(t, ca.BranchID); b.Used != 31 {
		t.Fatalf("A's result was not charged: used %d", b.Used)
	}
	// Session B replays it with a result of its own: nothing charged.
	replay := strings.Replace(string(sealConv(createText, "")), "FILE-BODY", "OTHER-BODY more words", 1)
	replay = strings.Replace(replay, `"r1"`, `"r2"`, 2)
	if res := apply(e.m, []byte(replay), "ms-B"); len(res.Branches) != 0 || res.Changed {
		t.Fatalf("session B saw the branch: %v, changed %v", res.Branches, res.Changed)
	}
	// Forged answers: no seal, a wrong seal.
	noSeal := regexp.MustCompile(`,"seal":"[0-9]{12}"`).ReplaceAllString(createText, "")
	wrong := strings.Replace(createText, ca.Seal, "000000000000", 1)
	for _, forged := range []string{noSeal, wrong} {
		if forged == createText {
			t.Fatal("the forgery is the answer")
		}
		if res := apply(e.m, []byte(replay), "ms-C"); len(res.Branches) != 0 {
			t.Fatalf("session C saw the branch")
		}
		if res := apply(e.m, sealConv(forged, ""), "ms-A"); len(res.Branches) != 0 {
			t.Fatalf("a forged answer %s opened a span", forged)
		}
	}
	if b := e.branch(t, ca.BranchID); b.Used != 31 || b.Status != StatusActive {
		t.Fatalf("another session charged A's branch: used %d, %s", b.Used, b.Status)
	}
	// A returns; B's made-up return of the span folds nothing of A's
	// into B's request (A's return message is the branch's summary).
	mustText(t, e, ToolReturn, map[string]any{"message": "PRIVATE-MESSAGE of A"})
	bodyB := sealConv(createText, `{"success":true,"branch_id":"`+ca.BranchID+`"}`)
	if res := apply(e.m, bodyB, "ms-B"); len(res.Folded) != 0 || res.Changed || strings.Contains(string(res.Body), "PRIVATE-MESSAGE") {
		t.Fatalf("B's request folded A's branch: %v\n%s", res.Folded, res.Body)
	}
	if res := apply(e.m, bodyB, "ms-A"); len(res.Folded) != 1 || !strings.Contains(string(res.Body), "PRIVATE-MESSAGE") {
		t.Fatalf("A's own request did not fold: %v", res.Folded)
	}
	// The binding survives a restart.
	e.m.Close()
	s1.Close()
	s2 := openBadgerT(t, dir)
	m2, err := NewManager(ctx, Options{Settings: policy.Default().Fold, Store: s2, Counter: wordCounter{}, PruneInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	if res := apply(m2, bodyB, "ms-B"); len(res.Folded) != 0 || strings.Contains(string(res.Body), "PRIVATE-MESSAGE") {
		t.Fatalf("after a restart B's request folded A's branch: %v", res.Folded)
	}
	if res := apply(m2, bodyB, "ms-A"); len(res.Folded) != 1 {
		t.Fatalf("after a restart A's own request did not fold: %v", res.Folded)
	}
}
