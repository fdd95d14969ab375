package modelwire

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
)

// noticeState charges nothing and adds a notice to every result.
type noticeState struct{ fakeState }

func (s *noticeState) ChargeResult(_ context.Context, _, _, _, text string) (Decision, error) {
	return Decision{Keep: len(text), Notice: "[foldproxy] NOTICE"}, nil
}

// Array contents (text parts) in the OpenAI dialects: scrubbed part by
// part, notices appended as a part of the dialect's own type.
func TestOpenAIArrayContents(t *testing.T) {
	create := func(id string) string { return createAnswer(id) }
	chat, _ := json.Marshal(map[string]any{"model": "m", "messages": []any{
		map[string]any{"role": "user", "content": "go"},
		map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{"id": "c1", "type": "function", "function": map[string]any{"name": "fp_branch_create", "arguments": "{}"}}}},
		map[string]any{"role": "tool", "tool_call_id": "c1", "content": create("b-1")},
		map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{"id": "c2", "type": "function", "function": map[string]any{"name": "read", "arguments": "{}"}}}},
		map[string]any{"role": "tool", "tool_call_id": "c2", "content": []any{map[string]any{"type": "text", "text": "key AKIAIOSFODNN7EXAMPLE"}, map[string]any{"type": "text", "text": "second part"}}},
	}})
	resp, _ := json.Marshal(map[string]any{"model": "m", "input": []any{
		map[string]any{"type": "message", "role": "user", "content": "go"},
		map[string]any{"type": "function_call", "call_id": "c1", "name": "fp__branch_create", "arguments": "{}"},
		map[string]any{"type": "function_call_output", "call_id": "c1", "output": create("b-1")},
		map[string]any{"type": "function_call", "call_id": "c2", "name": "shell", "arguments": "{}"},
		map[string]any{"type": "function_call_output", "call_id": "c2", "output": []any{map[string]any{"type": "input_text", "text": "key AKIAIOSFODNN7EXAMPLE"}}},
	}})
	for _, tc := range []struct {
		d    Dialect
		body []byte
		part string
	}{
		{OpenAIChat, chat, `{"type":"text","text":"[foldproxy] NOTICE"}`},
		{OpenAIResponses, resp, `{"type":"input_text","text":"[foldproxy] NOTICE"}`},
	} {
		st := &noticeState{*newFakeState(Branch{ID: "b-1", Budget: 1000})}
		res := mustApply(t, tc.d, tc.body, st, Options{Scrub: testScrub})
		got := string(res.Body)
		if strings.Contains(got, "AKIAIOSFODNN7EXAMPLE") || !strings.Contains(got, "key [REDACTED:aws-access-token]") || !strings.Contains(got, tc.part) {
			t.Errorf("%s: %s", tc.d, got)
		}
		if tc.d == OpenAIChat && !strings.Contains(got, `"second part"`) {
			t.Errorf("%s: an unchanged part changed: %s", tc.d, got)
		}
	}
}

// Unknown dialects and bodies that are not requests are refused with an
// error naming the problem; never a panic.
func TestApplyErrors(t *testing.T) {
	for _, tc := range []struct {
		d    Dialect
		body string
		want string
	}{
		{"gemini", `{}`, "unknown dialect"},
		{Anthropic, `{"messages":`, "not valid JSON"},
		{Anthropic, `[1,2]`, "not a JSON object"},
		{Anthropic, `{"messages":[1]}`, "messages[0] is not an object"},
		{OpenAIResponses, `{"input":[{"type":"message"},"x"]}`, "input[1] is not an object"},
	} {
		_, err := Apply(context.Background(), tc.d, []byte(tc.body), newFakeState(), Options{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Apply(%s, %s) = %v, want an error saying %q", tc.d, tc.body, err, tc.want)
		}
	}
	// A Responses request whose input is a string has no conversation.
	body := []byte(`{"model":"m","input":"hello"}`)
	res := mustApply(t, OpenAIResponses, body, newFakeState(), Options{})
	if res.Changed || string(res.Body) != string(body) {
		t.Fatal("a string input changed")
	}
}
