package modelwire

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// Codex's Responses requests fold: its MCP tools are called through a
// namespace ({"namespace":"mcp__foldproxy","name":"branch_create"}), its
// MCP results come wrapped (two input_text parts "Wall time: ...\nOutput:"
// and the JSON; one text with the JSON after "Output:"; the serialized MCP
// content array of older versions), and items the parser does not know
// (additional_tools, configuration_update) are kept where they are, in the
// folded span too.
func TestCodexWrappersFold(t *testing.T) {
	wallTime := func(text string) any {
		return []any{map[string]any{"type": "input_text", "text": "Wall time: 0.0029 seconds\nOutput:"}, map[string]any{"type": "input_text", "text": text}}
	}
	for name, wrap := range map[string]func(string) any{
		"two parts": wallTime,
		"one text":  func(text string) any { return "Wall time: 0.0020 seconds\nOutput:\n" + text },
		"mcp content": func(text string) any {
			b, _ := json.Marshal([]any{map[string]any{"type": "text", "text": text}})
			return string(b)
		},
	} {
		t.Run(name, func(t *testing.T) {
			ns := func(id, tool string) map[string]any {
				return map[string]any{"type": "function_call", "call_id": id, "namespace": "mcp__foldproxy", "name": tool, "arguments": "{}"}
			}
			out := func(id string, v any) map[string]any {
				return map[string]any{"type": "function_call_output", "call_id": id, "output": v}
			}
			extra := map[string]any{"type": "additional_tools", "tools": []any{map[string]any{"type": "function", "name": "late_tool"}}}
			items := []any{
				map[string]any{"type": "message", "role": "user", "content": "go"},
				ns("c1", "branch_create"), out("c1", wrap(createAnswer("b-1"))),
				extra,
				map[string]any{"type": "function_call", "call_id": "c2", "name": "exec_command", "arguments": `{"cmd":"cat a"}`},
				out("c2", "Chunk ID: 3db790\nWall time: 0.0000 seconds\nProcess exited with code 0\nOutput:\nLOCALMARK\n"),
				ns("c3", "fs__read_text_file"), out("c3", "Wall time: 0.0074 seconds\nOutput:\n{\"content\":\"REMOTEMARK\"}"),
			}
			// While the branch is open: the built-in result is charged on
			// the model wire, the namespaced MCP one not (the MCP wire
			// charged it).
			st := newFakeState(Branch{ID: "b-1", Budget: 6000})
			open, _ := json.Marshal(map[string]any{"model": "m", "input": items})
			mustApply(t, OpenAIResponses, open, st, Options{})
			if !slices.Equal(st.order, []string{"b-1/c2"}) {
				t.Errorf("charged %v, want b-1/c2 only", st.order)
			}
			st.branches["b-1"].Closed, st.branches["b-1"].Summary = true, "SUMMARY-OK"
			items = append(items, ns("c4", "branch_return"), out("c4", wrap(`{"tokens_used":70,"message":"SUMMARY-OK"}`)),
				map[string]any{"type": "configuration_update", "model": "other"},
				map[string]any{"type": "message", "role": "user", "content": "next"})
			body, _ := json.Marshal(map[string]any{"model": "m", "input": items})
			res := mustApply(t, OpenAIResponses, body, st, Options{})
			got := string(res.Body)
			for _, gone := range []string{"LOCALMARK", "REMOTEMARK", `"c2"`, `"c3"`, `"c4"`} {
				if strings.Contains(got, gone) {
					t.Errorf("%s is still in the folded request:\n%s", gone, got)
				}
			}
			for _, kept := range []string{"SUMMARY-OK", `{"tools":[{"name":"late_tool","type":"function"}],"type":"additional_tools"}`, `{"model":"other","type":"configuration_update"}`, `"next"`} {
				if !strings.Contains(got, kept) {
					t.Errorf("%s is not in the folded request:\n%s", kept, got)
				}
			}
		})
	}
}
