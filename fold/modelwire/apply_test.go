package modelwire

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
)

// branchConversation is a main-thread exchange, a branch that reads two
// files and returns, and a last user turn.
func branchConversation(withReturn bool) []aMsg {
	msgs := []aMsg{
		userText("fix the bug"),
		assistant(map[string]any{"type": "thinking", "thinking": "let me look", "signature": "sig-1"},
			toolUse("t1", "Bash", map[string]any{"command": "ls"})),
		user(toolResult("t1", "a.go b.go", false)),
		assistant(toolUse("c1", "mcp__foldproxy__branch_create", map[string]any{"description": "read the files"})),
		user(toolResult("c1", createAnswer("b-1"), false)),
		assistant(toolUse("r1", "Read", map[string]any{"file_path": "a.go"}), toolUse("r2", "Read", map[string]any{"file_path": "b.go"})),
		user(toolResult("r1", "SECRET-CONTENT-OF-A "+strings.Repeat("a", 400), false), toolResult("r2", "CONTENT-OF-B", false)),
	}
	if withReturn {
		msgs = append(msgs,
			assistant(toolUse("x1", "mcp__foldproxy__branch_return", map[string]any{"message": "a.go has the bug"})),
			user(toolResult("x1", returnAnswer("b-1", "a.go has the bug"), false), map[string]any{"type": "text", "text": "now fix it", "cache_control": map[string]any{"type": "ephemeral"}}),
		)
	}
	return msgs
}

func TestPassThroughWithoutBranches(t *testing.T) {
	body := anthropicRequest(t, []aMsg{
		userText("hello"),
		assistant(toolUse("t1", "Bash", map[string]any{"command": "ls"})),
		user(toolResult("t1", "a.go", false)),
	})
	for _, d := range []Dialect{Anthropic} {
		res := mustApply(t, d, body, newFakeState(), Options{})
		if res.Changed || &res.Body[0] != &body[0] || len(res.Body) != len(body) {
			t.Fatalf("a request without branches changed:\n%s", res.Body)
		}
	}
}

func TestFoldClosedBranch(t *testing.T) {
	st := newFakeState(Branch{ID: "b-1", Closed: true, Summary: "Branch b-1 returned: a.go has the bug"})
	body := anthropicRequest(t, branchConversation(true))
	res := mustApply(t, Anthropic, body, st, Options{})
	if !res.Changed || len(res.Folded) != 1 || res.Folded[0] != "b-1" {
		t.Fatalf("folded %v, changed %v", res.Folded, res.Changed)
	}
	for _, gone := range []string{"SECRET-CONTENT-OF-A", "CONTENT-OF-B", `"r1"`, `"x1"`} {
		if contains(res.Body, gone) {
			t.Errorf("%s is still in the folded request", gone)
		}
	}
	for _, kept := range []string{"Branch b-1 returned: a.go has the bug", "now fix it", "sig-1", `"c1"`, "a.go b.go"} {
		if !contains(res.Body, kept) {
			t.Errorf("%s is missing from the folded request", kept)
		}
	}
	if res.TokensAfter >= res.TokensBefore {
		t.Errorf("tokens after %d, before %d", res.TokensAfter, res.TokensBefore)
	}
	// The bytes before the branch_create result are untouched.
	i := bytes.Index(body, []byte(`"c1"`))
	if !bytes.Equal(body[:i], res.Body[:i]) {
		t.Error("the prefix before the branch point changed")
	}
}

func TestOpenBranchNotFolded(t *testing.T) {
	st := newFakeState(Branch{ID: "b-1", Budget: 100000})
	body := anthropicRequest(t, branchConversation(false))
	res := mustApply(t, Anthropic, body, st, Options{})
	if res.Changed {
		t.Fatalf("an open branch changed the request:\n%s", res.Body)
	}
	if got := strings.Join(st.order, ","); got != "b-1/r1,b-1/r2" {
		t.Fatalf("charged %s, want b-1/r1,b-1/r2", got)
	}
	// A resend charges nothing more.
	mustApply(t, Anthropic, body, st, Options{})
	if len(st.order) != 2 {
		t.Fatalf("a resend charged again: %v", st.order)
	}
	if used := st.branches["b-1"].Used; used != (len("SECRET-CONTENT-OF-A ")+400+3)/4+(len("CONTENT-OF-B")+3)/4 {
		t.Fatalf("used %d", used)
	}
}

func TestOverrunIsCutAndFoldsNextTime(t *testing.T) {
	st := newFakeState(Branch{ID: "b-1", Budget: 50})
	body := anthropicRequest(t, branchConversation(false))
	res := mustApply(t, Anthropic, body, st, Options{})
	if res.Cut != 1 || !contains(res.Body, "force-returned") || contains(res.Body, strings.Repeat("a", 400)) {
		t.Fatalf("cut %d:\n%s", res.Cut, res.Body)
	}
	// Same request again: same bytes (the decision is remembered).
	again := mustApply(t, Anthropic, body, st, Options{})
	if !bytes.Equal(again.Body, res.Body) {
		t.Fatal("the cut is not deterministic")
	}
	// The model answers; the branch is closed, its span ends at the cut
	// result, and the next request folds it.
	msgs := append(branchConversation(false),
		assistant(map[string]any{"type": "text", "text": "ok, back in the parent"}),
		userText("go on"))
	res = mustApply(t, Anthropic, anthropicRequest(t, msgs), st, Options{})
	if len(res.Folded) != 1 || contains(res.Body, "CONTENT-OF-B") || !contains(res.Body, "budget exhausted") {
		t.Fatalf("not folded after the forced return:\n%s", res.Body)
	}
}

func TestNestedSpans(t *testing.T) {
	msgs := []aMsg{
		userText("task"),
		assistant(toolUse("c1", "branch_create", map[string]any{"description": "outer"})),
		user(toolResult("c1", createAnswer("b-out"), false)),
		assistant(toolUse("c2", "branch_create", map[string]any{"description": "inner"})),
		user(toolResult("c2", createAnswer("b-in"), false)),
		assistant(toolUse("g1", "Grep", map[string]any{"pattern": "x"})),
		user(toolResult("g1", "INNER-OUTPUT", false)),
		assistant(toolUse("x2", "branch_return", map[string]any{"message": "inner done"})),
		user(toolResult("x2", returnAnswer("b-in", "inner done"), false)),
		assistant(toolUse("g2", "Grep", map[string]any{"pattern": "y"})),
		user(toolResult("g2", "OUTER-OUTPUT", false)),
	}
	st := newFakeState(Branch{ID: "b-out", Budget: 10000}, Branch{ID: "b-in", Closed: true, Summary: "INNER-SUMMARY"})
	res := mustApply(t, Anthropic, anthropicRequest(t, msgs), st, Options{})
	if contains(res.Body, "INNER-OUTPUT") || !contains(res.Body, "INNER-SUMMARY") || !contains(res.Body, "OUTER-OUTPUT") {
		t.Fatalf("inner fold wrong:\n%s", res.Body)
	}
	if got := strings.Join(st.order, ","); got != "b-out/g2" {
		t.Fatalf("charges %s, want b-out/g2 (g1 belongs to the inner branch, closed)", got)
	}
	// The outer returns too: one fold, the outer's summary only.
	msgs = append(msgs,
		assistant(toolUse("x1", "branch_return", map[string]any{"message": "outer done"})),
		user(toolResult("x1", returnAnswer("b-out", "outer done"), false)))
	st.branches["b-out"].Closed, st.branches["b-out"].Summary = true, "OUTER-SUMMARY"
	res = mustApply(t, Anthropic, anthropicRequest(t, msgs), st, Options{})
	if len(res.Folded) != 1 || res.Folded[0] != "b-out" || contains(res.Body, "INNER-SUMMARY") || contains(res.Body, "OUTER-OUTPUT") || !contains(res.Body, "OUTER-SUMMARY") {
		t.Fatalf("outer fold wrong (%v):\n%s", res.Folded, res.Body)
	}
}

func TestScrubFailsClosed(t *testing.T) {
	body := anthropicRequest(t, []aMsg{
		userText("hello"),
		assistant(toolUse("t1", "Bash", map[string]any{"command": "env"})),
		user(toolResult("t1", "TOKEN=sk-live-123", false), toolResult("t1b", "x", false)),
	})
	// t1b answers no call: Check would refuse; use a valid one instead.
	body = anthropicRequest(t, []aMsg{
		userText("hello"),
		assistant(toolUse("t1", "Bash", map[string]any{"command": "env"}), toolUse("t2", "mcp__x__y", nil)),
		user(toolResult("t1", "TOKEN=sk-live-123", false), toolResult("t2", "MCP sk-live-456", false)),
	})
	scrub := func(_ context.Context, s string) (string, error) {
		return strings.ReplaceAll(s, "sk-live-123", "[REDACTED:key]"), nil
	}
	res := mustApply(t, Anthropic, body, newFakeState(), Options{Scrub: scrub})
	if contains(res.Body, "sk-live-123") || !contains(res.Body, "[REDACTED:key]") || !contains(res.Body, "sk-live-456") {
		t.Fatalf("scrub: %s", res.Body)
	}
	fail := func(context.Context, string) (string, error) { return "", errors.New("scanner down") }
	res = mustApply(t, Anthropic, body, newFakeState(), Options{Scrub: fail})
	if contains(res.Body, "sk-live-123") || !contains(res.Body, "withheld") {
		t.Fatalf("fail closed: %s", res.Body)
	}
}
