package modelwire

import (
	"bytes"
	"strings"
	"testing"
)

func TestGuidance(t *testing.T) {
	big := strings.Repeat("word ", 3000) // about 3,750 tokens by bytes/4
	msgs := []aMsg{
		userText("task"),
		assistant(toolUse("t1", "Read", map[string]any{"file_path": "a"})),
		user(toolResult("t1", big, false)),
		assistant(toolUse("t2", "Read", map[string]any{"file_path": "b"})),
		user(toolResult("t2", big, false)),
	}
	opt := Options{Guidance: Guidance{AfterTokens: 5000}}
	res := mustApply(t, Anthropic, anthropicRequest(t, msgs), newFakeState(), opt)
	if res.Reminders != 1 || !res.Guidance || !contains(res.Body, "tokens of tool output since the last fold") {
		t.Fatalf("no token reminder: %+v\n%s", res, res.Body)
	}
	if res.TokensAfter <= res.TokensBefore {
		t.Errorf("the reminder is not counted: before %d, after %d", res.TokensBefore, res.TokensAfter)
	}
	// The reminder sits after the last block of the newest message: every
	// byte before it is the client's.
	body := anthropicRequest(t, msgs)
	i := bytes.Index(res.Body, []byte(`,{"type":"text","text":"[foldproxy]`))
	if i < 0 || !bytes.Equal(res.Body[:i], body[:i]) {
		t.Fatalf("the reminder changed earlier bytes")
	}

	// The conversation grows: the reminder stays where it was, byte for
	// byte, and a repeated failing command gets its own.
	first := res.Body[:i+200]
	msgs = append(msgs,
		assistant(toolUse("t3", "Bash", map[string]any{"command": "make"})),
		user(toolResult("t3", "Exit code 2\nmake: *** No rule", true)),
		assistant(toolUse("t4", "Bash", map[string]any{"command": "make"})),
		user(toolResult("t4", "Exit code 2\nmake: *** No rule", true)))
	res = mustApply(t, Anthropic, anthropicRequest(t, msgs), newFakeState(), opt)
	if !bytes.HasPrefix(res.Body, first) {
		t.Fatal("the earlier reminder moved")
	}
	if res.Reminders != 2 || !res.Guidance || !contains(res.Body, "failed before with the same input") {
		t.Fatalf("no repeat reminder: %+v\n%s", res, res.Body)
	}

	// Off, or without the fold tools: nothing.
	res = mustApply(t, Anthropic, anthropicRequest(t, msgs), newFakeState(), Options{Guidance: Guidance{Off: true}})
	if res.Changed {
		t.Fatal("guidance off changed the request")
	}
	res = mustApply(t, Anthropic, []byte(strings.Replace(string(anthropicRequest(t, msgs)), "mcp__foldproxy__branch_create", "Other", 1)), newFakeState(), opt)
	if res.Changed {
		t.Fatal("guidance for an agent without the fold tools")
	}
	// Inside a branch: no guidance (the branch's budget speaks there).
	inBranch := append([]aMsg{
		userText("task"),
		assistant(toolUse("c1", "branch_create", map[string]any{})),
		user(toolResult("c1", createAnswer("b-1"), false)),
	}, msgs[1:]...)
	res = mustApply(t, Anthropic, anthropicRequest(t, inBranch), newFakeState(Branch{ID: "b-1"}), opt)
	if res.Reminders != 0 {
		t.Fatalf("guidance inside a branch: %+v", res)
	}
}
