package intercept

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/foldproxy/foldproxy/fold"
)

// TestLateResultIsArchivedAndTold: when the branch a call is charged to
// closes while the call runs (its deadline, or here its own return), the
// result is not delivered, but archived in the closed branch, and the agent
// is told the handle that reads it back, which recalls the whole result.
func TestLateResultIsArchivedAndTold(t *testing.T) {
	s := newPipeStack(t)
	s.session(t, "s")
	id := s.branch(t, "s", 10000)
	res := json.RawMessage(`{"content":[{"type":"text","text":"what the slow call found"}]}`)
	h := Chain(func(ctx context.Context, ex *Exchange) error {
		// The branch closes while the call runs.
		if _, err := s.mgr.CallTool(ctx, "s", fold.ToolReturn, json.RawMessage(`{"branch_id":"`+id+`","message":"done"}`)); err != nil {
			t.Fatal(err)
		}
		ex.Result = res
		return nil
	}, Budget(s.mgr, s.counter, nil), Tokens(s.counter))
	ex := &Exchange{Session: "s", Upstream: "up", Method: "tools/call", Name: "slow", Args: json.RawMessage(`{}`)}
	err := h(t.Context(), ex)
	if err == nil || !errors.Is(err, fold.ErrBranchClosed) || ex.Result != nil {
		t.Fatalf("late result: err %v, result %s; want a refusal naming the closed branch", err, ex.Result)
	}
	i := strings.Index(err.Error(), "handle \"")
	if i < 0 {
		t.Fatalf("the refusal names no handle: %v", err)
	}
	handle := err.Error()[i+len("handle \""):]
	handle = handle[:strings.IndexByte(handle, '"')]
	out, err := s.mgr.CallTool(t.Context(), "s", fold.ToolRecall, json.RawMessage(`{"handle":"`+handle+`","max_tokens":1000}`))
	if err != nil {
		t.Fatalf("recall %s: %v", handle, err)
	}
	var page struct {
		Text string `json:"text"`
	}
	if err := json.Unmarshal(answerJSON(t, out), &page); err != nil || page.Text != string(res) {
		t.Errorf("recall %s: got %s (%v), want the whole result", handle, out, err)
	}
}
