package modelwire_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"github.com/foldproxy/foldproxy/fold/modelwire"
)

// closedBranches is the smallest State: branches the fold state knows, all
// of them returned, so nothing is charged.
type closedBranches map[string]modelwire.Branch

func (s closedBranches) Branch(_ context.Context, id string) (modelwire.Branch, bool, error) {
	b, ok := s[id]
	return b, ok, nil
}

func (s closedBranches) ChargeResult(_ context.Context, _, _, _, text string) (modelwire.Decision, error) {
	return modelwire.Decision{Keep: len(text)}, nil
}

// ExampleApply folds a returned branch out of an Anthropic Messages
// request: the span from the branch_create call through the branch_return
// result goes, and the branch_create result becomes the branch's summary.
// What the user typed after the return stays.
func ExampleApply() {
	body := []byte(`{"model":"claude-test","max_tokens":1024,"messages":[
{"role":"user","content":"fix the bug"},
{"role":"assistant","content":[{"type":"tool_use","id":"c1","name":"mcp__foldproxy__branch_create","input":{"description":"read the files"}}]},
{"role":"user","content":[{"type":"tool_result","tool_use_id":"c1","content":"{\"branch_id\":\"b-1\",\"budget_allocated\":8192}"}]},
{"role":"assistant","content":[{"type":"tool_use","id":"r1","name":"Read","input":{"file_path":"a.go"}}]},
{"role":"user","content":[{"type":"tool_result","tool_use_id":"r1","content":"package a // 400 lines the model no longer needs"}]},
{"role":"assistant","content":[{"type":"tool_use","id":"x1","name":"mcp__foldproxy__branch_return","input":{"message":"a.go:12 has the bug"}}]},
{"role":"user","content":[{"type":"tool_result","tool_use_id":"x1","content":"{\"success\":true,\"branch_id\":\"b-1\"}"},{"type":"text","text":"now fix it"}]}
]}`)
	st := closedBranches{"b-1": {ID: "b-1", Closed: true, Summary: "Branch b-1 returned: a.go:12 has the bug"}}

	res, err := modelwire.Apply(context.Background(), modelwire.Anthropic, body, st, modelwire.Options{})
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	fmt.Println("folded:", res.Folded, "tokens:", res.TokensBefore, "->", res.TokensAfter)
	var out bytes.Buffer
	if err := json.Compact(&out, res.Body); err != nil {
		fmt.Println("error:", err)
		return
	}
	var req struct {
		Messages []json.RawMessage `json:"messages"`
	}
	if err := json.Unmarshal(out.Bytes(), &req); err != nil {
		fmt.Println("error:", err)
		return
	}
	for _, m := range req.Messages {
		fmt.Println(string(m))
	}
	// Output:
	// folded: [b-1] tokens: 78 -> 32
	// {"role":"user","content":"fix the bug"}
	// {"role":"assistant","content":[{"type":"tool_use","id":"c1","name":"mcp__foldproxy__branch_create","input":{"description":"read the files"}}]}
	// {"role":"user","content":[{"type":"tool_result","tool_use_id":"c1","content":"Branch b-1 returned: a.go:12 has the bug"},{"type":"text","text":"now fix it"}]}
}
