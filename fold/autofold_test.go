package fold

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/foldproxy/foldproxy/fold/modelwire"
)

// autoConv builds an Anthropic request of n Bash calls, messages last.
func autoConv(n int) []byte {
	var msgs []string
	msgs = append(msgs, `{"role":"user","content":"fix it"}`)
	for i := 1; i <= n; i++ {
		out, _ := json.Marshal(fmt.Sprintf("out%d ", i) + words(300, fmt.Sprintf("w%d", i)))
		msgs = append(msgs,
			fmt.Sprintf(`{"role":"assistant","content":[{"type":"tool_use","id":"tu%d","name":"Bash","input":{"command":"grep -rn x%d ."}}]}`, i, i),
			fmt.Sprintf(`{"role":"user","content":[{"type":"tool_result","tool_use_id":"tu%d","content":%s}]}`, i, out))
	}
	return []byte(`{"model":"m","max_tokens":10,"tools":[{"name":"Bash","input_schema":{"type":"object"}}],"messages":[` + strings.Join(msgs, ",") + `]}`)
}

func applyAuto(t *testing.T, m *Manager, body []byte, mode string) modelwire.Result {
	t.Helper()
	res, err := modelwire.Apply(t.Context(), modelwire.Anthropic, body, m.ModelState(),
		modelwire.Options{Count: wordCounter{}.CountText, AutoFold: modelwire.AutoFold{Mode: mode}, Session: "ms-1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := modelwire.Check(modelwire.Anthropic, res.Body); err != nil {
		t.Fatalf("invalid: %v", err)
	}
	return res
}

// TestAutoFoldsSurviveRestart: the Manager keeps automatic folds in the
// store: a restart repeats them byte for byte, and branch_recall reads
// what a stub hides, exactly, from any session.
func TestAutoFoldsSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	s1 := openBadgerT(t, dir)
	e := newEnvStore(t, s1, nil)
	var res modelwire.Result
	var folds []modelwire.FoldRecord
	for n := 1; n <= 30; n++ {
		res = applyAuto(t, e.m, autoConv(n), modelwire.ModeOn)
		folds = append(folds, res.AutoFold.New...)
	}
	if len(folds) < 10 {
		t.Fatalf("%d folds over 30 requests", len(folds))
	}
	before := res.Body
	e.m.Close()
	s1.Close()

	s2 := openBadgerT(t, dir)
	e2 := newEnvStore(t, s2, nil)
	after := applyAuto(t, e2.m, autoConv(30), modelwire.ModeOn)
	if !bytes.Equal(after.Body, before) || len(after.AutoFold.New) != 0 {
		t.Fatalf("after a restart the request folds differently (%d new folds)", len(after.AutoFold.New))
	}
	// Recall over MCP, from a session that never saw the model request.
	f := folds[0]
	n := strings.TrimPrefix(f.ToolUseID, "tu")
	want := "out" + n + " " + words(300, "w"+n)
	ans := e2.mustCall(t, "s1", ToolRecall, map[string]any{"handle": f.Handle, "max_tokens": 100000})
	if ans["text"] != want || ans["done"] != true {
		t.Fatalf("recall of %s: %v", f.Handle, ans)
	}
	// A made-up handle of the same form is refused.
	if _, msg, ok := e2.call(t, "s1", ToolRecall, map[string]any{"handle": "af~012345678901234567"}); ok || !strings.Contains(msg, "unknown") {
		t.Fatalf("made-up handle: %v %s", ok, msg)
	}
	// Pruning by age takes folds and their texts, never the key.
	if err := s2.Prune(t.Context(), time.Nanosecond, 0); err != nil {
		t.Fatal(err)
	}
	k, err := s2.GetRecords(t.Context(), recordKindKey, []string{"autofold"})
	if err != nil || len(k["autofold"]) != 32 {
		t.Fatalf("the key of fold handles was pruned: %v", err)
	}
}

// TestAutoFoldsObserveApart: observe mode's decisions are kept apart and
// archive nothing.
func TestAutoFoldsObserveApart(t *testing.T) {
	e := newEnv(t, nil)
	for n := 1; n <= 30; n++ {
		body := autoConv(n)
		res := applyAuto(t, e.m, body, modelwire.ModeObserve)
		if !bytes.Equal(res.Body, body) {
			t.Fatal("observe mode changed the request")
		}
	}
	obs, err := e.store.Records(t.Context(), recordFoldObserve)
	if err != nil {
		t.Fatal(err)
	}
	on, err := e.store.Records(t.Context(), recordFold)
	if err != nil {
		t.Fatal(err)
	}
	nObs, nOn := len(obs), len(on)
	if nObs == 0 || nOn != 0 {
		t.Fatalf("%d observe records, %d real ones", nObs, nOn)
	}
	res := applyAuto(t, e.m, autoConv(30), modelwire.ModeOn)
	if res.AutoFold.Folded == 0 || len(res.AutoFold.New) == 0 {
		t.Fatal("on after observe folds nothing")
	}
}
