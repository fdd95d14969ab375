package modelwire

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"
)

// fakeState is a State for unit tests: branches by id, and charges decided
// as fold's adapter decides them (cut to the remaining budget, with a notice
// naming a handle), remembered by tool-use id.
type fakeState struct {
	branches map[string]*Branch
	charges  map[string]Decision // by toolUseID
	order    []string            // charge order, "branch/toolUseID"
	lookups  int
}

func newFakeState(bs ...Branch) *fakeState {
	st := &fakeState{branches: map[string]*Branch{}, charges: map[string]Decision{}}
	for _, b := range bs {
		b := b
		st.branches[b.ID] = &b
	}
	return st
}

func (s *fakeState) Branch(_ context.Context, id string) (Branch, bool, error) {
	s.lookups++
	b, ok := s.branches[id]
	if !ok {
		return Branch{}, false, nil
	}
	return *b, true, nil
}

func (s *fakeState) ChargeResult(_ context.Context, branchID, toolUseID, toolName, text string) (Decision, error) {
	if d, ok := s.charges[toolUseID]; ok {
		return d, nil
	}
	b := s.branches[branchID]
	if b == nil || b.Closed {
		return Decision{Keep: len(text)}, nil
	}
	n := (len(text) + 3) / 4
	d := Decision{Keep: len(text)}
	if b.Budget > 0 && b.Used+n > b.Budget {
		keep := (b.Budget - b.Used) * 4
		d = Decision{Keep: keep, Notice: fmt.Sprintf("[foldproxy] result cut at %d tokens to fit branch %s's budget. The rest is kept: call branch_recall with handle %q to read it. This branch has been force-returned; continue in the parent.", keep/4, branchID, branchID+"~h"+toolUseID)}
		b.Used = b.Budget
		b.Closed = true
		b.EndCall = toolUseID
		b.Summary = "Branch " + branchID + " was force-returned: budget exhausted."
	} else {
		b.Used += n
	}
	s.charges[toolUseID] = d
	s.order = append(s.order, branchID+"/"+toolUseID)
	return d, nil
}

// conversation builders: a tiny DSL for Anthropic-shaped conversations.

type aMsg = map[string]any

func userText(s string) aMsg {
	return aMsg{"role": "user", "content": []any{map[string]any{"type": "text", "text": s}}}
}

func toolUse(id, name string, input map[string]any) map[string]any {
	return map[string]any{"type": "tool_use", "id": id, "name": name, "input": input}
}

func toolResult(id, text string, isErr bool) map[string]any {
	r := map[string]any{"type": "tool_result", "tool_use_id": id, "content": text}
	if isErr {
		r["is_error"] = true
	}
	return r
}

func assistant(blocks ...map[string]any) aMsg {
	bs := make([]any, len(blocks))
	for i, b := range blocks {
		bs[i] = b
	}
	return aMsg{"role": "assistant", "content": bs}
}

func user(blocks ...map[string]any) aMsg {
	bs := make([]any, len(blocks))
	for i, b := range blocks {
		bs[i] = b
	}
	return aMsg{"role": "user", "content": bs}
}

func createAnswer(id string) string {
	return fmt.Sprintf(`{"branch_id":%q,"parent_branch_id":"root-s1","depth":1,"budget_allocated":20000}`, id)
}

func returnAnswer(id, message string) string {
	return fmt.Sprintf(`{"success":true,"branch_id":%q,"parent_branch_id":"root-s1","tokens_used":1234,"message":%q}`, id, message)
}

// anthropicRequest marshals a request with the given messages (map keys
// sort, which is fine for tests that compare with themselves).
func anthropicRequest(t testing.TB, msgs []aMsg) []byte {
	t.Helper()
	req := map[string]any{
		"model":      "claude-test",
		"max_tokens": 1000,
		"system":     []any{map[string]any{"type": "text", "text": "You are a test."}},
		"tools":      []any{map[string]any{"name": "mcp__foldproxy__branch_create", "input_schema": map[string]any{"type": "object"}}},
		"messages":   msgs,
	}
	b, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustApply(t testing.TB, d Dialect, body []byte, st State, opt Options) Result {
	t.Helper()
	res, err := Apply(context.Background(), d, body, st, opt)
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if err := Check(d, res.Body); err != nil {
		t.Fatalf("the folded request is not valid: %v\n%s", err, res.Body)
	}
	return res
}

func keys[M ~map[string]V, V any](m M) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func contains(b []byte, s string) bool { return strings.Contains(string(b), s) }

// xorshift returns a deterministic byte source for generated tests.
func xorshift(seed uint64) func() byte {
	return func() byte {
		seed ^= seed << 13
		seed ^= seed >> 7
		seed ^= seed << 17
		return byte(seed)
	}
}

// MarkEnd makes fakeState an Ender: the first mark of a closed branch wins.
func (s *fakeState) MarkEnd(_ context.Context, id, toolUseID string) (string, string, error) {
	b := s.branches[id]
	if b == nil || !b.Closed {
		return "", "", nil
	}
	if b.EndCall == "" {
		b.EndCall, b.EndNotice = toolUseID, "END of "+id
	}
	return b.EndCall, b.EndNotice, nil
}
