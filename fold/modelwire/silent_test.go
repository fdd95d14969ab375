package modelwire_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/foldproxy/foldproxy/fold"
	"github.com/foldproxy/foldproxy/fold/modelwire"
	"github.com/foldproxy/foldproxy/fold/store"
	"github.com/foldproxy/foldproxy/intercept/tokens"
	"github.com/foldproxy/foldproxy/policy"
)

// TestReplayNeverSilent replays real trajectories on the model wire with
// every exploration phase in a branch of a small budget (70 to 2,000
// tokens, so that branches end by their budget within a few results): no
// tool result reaches the model empty, a cut result always carries its
// notice with the recall handle, and the result that ends a branch says
// it was force-returned (the notice reserve keeps room for it).
func TestReplayNeverSilent(t *testing.T) {
	trs := loadTrajectories(t)[:4]
	base, err := tokens.NewCounter(policy.Tokens{})
	if err != nil {
		t.Fatal(err)
	}
	counter := &memoCounter{c: base, m: map[string]int{}}
	ctx := context.Background()
	opt := modelwire.Options{Count: counter.CountText}
	budgets := []int{70, 150, 400, 2000}
	cuts := 0
	for ti, tr := range trs {
		m, tool, now := replayManager(t, counter, tr.ID)
		var c convo
		c.add(map[string]any{"role": "user", "content": tr.Task})
		inBranch, budget := false, 0
		for i, step := range tr.Steps {
			out := step.Output
			if out == "" {
				out = "(no output)"
			}
			where := fmt.Sprintf("%s step %d", tr.ID, i)
			if !inBranch && exploring(step.Command) {
				*now = now.Add(2 * time.Minute)
				budget = budgets[(ti+i)%len(budgets)]
				c.call("mcp__foldproxy__branch_create", map[string]any{"description": "explore"}, tool(fold.ToolCreate,
					map[string]any{"description": "explore: " + clip(step.Command, 100), "budget": budget}), false)
				inBranch = true
			}
			id := c.call("Bash", map[string]any{"command": step.Command}, out, false)
			res, err := modelwire.Apply(ctx, modelwire.Anthropic, c.request(), m.ModelState(), opt)
			if err != nil {
				t.Fatalf("%s: Apply: %v", where, err)
			}
			got, ok := toolResultText(t, res.Body, id)
			if !ok {
				continue // folded out with its closed branch
			}
			if strings.TrimSpace(got) == "" {
				t.Fatalf("%s: the result reached the model empty", where)
			}
			if res.Cut > 0 && inBranch {
				cuts++
				if !strings.Contains(got, "[foldproxy]") || !strings.Contains(got, "branch_recall") {
					t.Fatalf("%s: a cut result without its notice: %q", where, clip(got, 300))
				}
				if budget >= 150 && !strings.Contains(got, "force-returned") {
					t.Fatalf("%s: the result that ended a branch of %d tokens does not say so: %q", where, budget, clip(got, 300))
				}
				inBranch = false // force-returned: the agent goes on in the main thread
				continue
			}
			if inBranch && (i+1 == len(tr.Steps) || !exploring(tr.Steps[i+1].Command)) {
				msg := "explored: " + clip(step.Command, 60)
				c.call("mcp__foldproxy__branch_return", map[string]any{"message": msg}, tool(fold.ToolReturn, map[string]any{"message": msg}), false)
				inBranch = false
			}
		}
		m.Close()
	}
	if cuts == 0 {
		t.Fatal("no result was cut: the replay proved nothing")
	}
	t.Logf("%d trajectories, %d cut results, each with its notice", len(trs), cuts)
}

// replayManager returns a fold Manager with one open session for a
// replayed trajectory, a function that calls a fold tool in that session
// and returns its answer's text, and the Manager's clock, which the caller
// moves (two minutes per branch keeps the creation rate limit away).
func replayManager(t testing.TB, counter fold.Counter, id string) (*fold.Manager, func(name string, args any) string, *time.Time) {
	t.Helper()
	ctx := context.Background()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m, err := fold.NewManager(ctx, fold.Options{Store: store.NewMemStore(), Counter: counter, PruneInterval: -1,
		Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	sess := "s-" + id
	if err := m.OpenSession(ctx, fold.SessionRecord{ID: sess, Transport: "http"}); err != nil {
		t.Fatal(err)
	}
	tool := func(name string, args any) string {
		raw, _ := json.Marshal(args)
		out, err := m.CallTool(ctx, sess, name, raw)
		if err != nil {
			t.Fatalf("%s: %s: %v", id, name, err)
		}
		var r struct{ Content []struct{ Text string } }
		if err := json.Unmarshal(out, &r); err != nil || len(r.Content) == 0 {
			t.Fatalf("%s: %s answered %s", id, name, out)
		}
		return r.Content[0].Text
	}
	return m, tool, &now
}

// toolResultText returns the text of the tool_result for id in a forwarded
// Anthropic request, and whether it is there.
func toolResultText(t testing.TB, body []byte, id string) (string, bool) {
	t.Helper()
	var req struct {
		Messages []struct {
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		t.Fatalf("forwarded request: %v", err)
	}
	for _, m := range req.Messages {
		var blocks []struct {
			Type      string          `json:"type"`
			ToolUseID string          `json:"tool_use_id"`
			Content   json.RawMessage `json:"content"`
		}
		if json.Unmarshal(m.Content, &blocks) != nil {
			continue
		}
		for _, b := range blocks {
			if b.Type != "tool_result" || b.ToolUseID != id {
				continue
			}
			var s string
			if json.Unmarshal(b.Content, &s) == nil {
				return s, true
			}
			var parts []struct{ Text string }
			_ = json.Unmarshal(b.Content, &parts)
			var all []string
			for _, p := range parts {
				all = append(all, p.Text)
			}
			return strings.Join(all, "\n"), true
		}
	}
	return "", false
}
