package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/foldproxy/foldproxy/intercept"
)

// The audit test (issue 4): every request forwarded through the real
// binary leaves exactly one "call" record, already in the log when the
// response reaches the client (audit fsync "always"), with the right
// upstream, method, tool, outcome, branch and token counts; branch
// lifecycle events leave "branch" records.

// auditTail reads the records an audit log gained since the last read.
type auditTail struct {
	path string
	seen int
}

// next returns the records written since the previous call.
func (a *auditTail) next(t testing.TB) []intercept.Record {
	t.Helper()
	var all []intercept.Record
	err := intercept.ReadAudit([]string{a.path}, func(r intercept.Record) error {
		all = append(all, r)
		return nil
	})
	if err != nil {
		t.Fatalf("reading the audit log: %v", err)
	}
	if len(all) < a.seen {
		t.Fatalf("the audit log shrank from %d to %d records", a.seen, len(all))
	}
	out := all[a.seen:]
	a.seen = len(all)
	return out
}

// split separates call records from branch records.
func split(recs []intercept.Record) (calls, branches []intercept.Record) {
	for _, r := range recs {
		switch r.Kind {
		case intercept.KindCall:
			calls = append(calls, r)
		case intercept.KindBranch:
			branches = append(branches, r)
		}
	}
	return calls, branches
}

func describeRecords(recs []intercept.Record) string {
	var b strings.Builder
	for _, r := range recs {
		j, _ := json.Marshal(r)
		b.WriteString("\n  ")
		b.Write(j)
	}
	return b.String()
}

// wantCall is what one call record must say. Empty strings are checked
// too: a record of a fold tool has no upstream.
type wantCall struct {
	upstream, method, tool, outcome string
	branch                          string // "" for the session's root
	depth                           int
	// check checks the counts; nil checks nothing more.
	check func(r intercept.Record) error
}

// checkCall checks that recs hold exactly one call record, as want says,
// and returns it.
func checkCall(t *testing.T, step string, recs []intercept.Record, root string, want wantCall) intercept.Record {
	t.Helper()
	calls, _ := split(recs)
	if len(calls) != 1 {
		t.Errorf("%s: %d call records were in the log when the response arrived, want exactly 1:%s", step, len(calls), describeRecords(recs))
		if len(calls) == 0 {
			return intercept.Record{}
		}
	}
	r := calls[0]
	branch := want.branch
	if branch == "" {
		branch = root
	}
	if want.outcome == intercept.OutcomeRefused {
		branch = "" // refused before it could be charged
	}
	got := fmt.Sprintf("upstream=%q method=%q tool=%q outcome=%q branch=%q depth=%d", r.Upstream, r.Method, r.Tool, r.Outcome, r.Branch, r.Depth)
	exp := fmt.Sprintf("upstream=%q method=%q tool=%q outcome=%q branch=%q depth=%d", want.upstream, want.method, want.tool, want.outcome, branch, want.depth)
	if want.upstream == "" {
		// Fold tools run in no branch's charge: no branch is recorded.
		got = fmt.Sprintf("upstream=%q method=%q tool=%q outcome=%q", r.Upstream, r.Method, r.Tool, r.Outcome)
		exp = fmt.Sprintf("upstream=%q method=%q tool=%q outcome=%q", want.upstream, want.method, want.tool, want.outcome)
	}
	if got != exp {
		t.Errorf("%s: record\n  %s\nwant\n  %s", step, got, exp)
	}
	if r.Time.IsZero() {
		t.Errorf("%s: the record has no time", step)
	}
	if want.check != nil {
		if err := want.check(r); err != nil {
			t.Errorf("%s: %v:%s", step, err, describeRecords([]intercept.Record{r}))
		}
	}
	return r
}

// delivered checks the counts of a result delivered whole: arguments and
// result counted, and the agent received what the upstream sent.
func delivered(r intercept.Record) error {
	switch {
	case r.ResultTokens <= 0:
		return fmt.Errorf("result_tokens %d, want > 0", r.ResultTokens)
	case r.DeliveredTokens != r.ResultTokens:
		return fmt.Errorf("delivered_tokens %d, want result_tokens %d (delivered whole, no notice at the unlimited root)", r.DeliveredTokens, r.ResultTokens)
	case r.CutHandle != "":
		return fmt.Errorf("cut_handle %q on a result delivered whole", r.CutHandle)
	}
	return nil
}

// withArgs also requires counted arguments.
func withArgs(f func(intercept.Record) error) func(intercept.Record) error {
	return func(r intercept.Record) error {
		if r.ArgTokens <= 0 {
			return fmt.Errorf("arg_tokens %d, want > 0", r.ArgTokens)
		}
		return f(r)
	}
}

// redacted also requires at least n redactions.
func redacted(n int, f func(intercept.Record) error) func(intercept.Record) error {
	return func(r intercept.Record) error {
		got := 0
		for _, k := range r.Redactions {
			got += k
		}
		if got < n {
			return fmt.Errorf("%d redactions recorded, want at least %d", got, n)
		}
		return f(r)
	}
}

// findBranchEvent returns the branch record of event kind for branch id.
func findBranchEvent(recs []intercept.Record, event, id string) (intercept.Record, bool) {
	for _, r := range recs {
		if r.Kind == intercept.KindBranch && r.Event == event && r.Branch == id {
			return r, true
		}
	}
	return intercept.Record{}, false
}

// createBranch calls branch_create and returns the new branch's id.
func createBranch(ctx context.Context, t *testing.T, p *peer, args map[string]any) string {
	t.Helper()
	text, res := p.callText(ctx, t, "branch_create", args)
	if res.IsError {
		t.Fatalf("branch_create: %s", text)
	}
	var ans struct {
		BranchID string `json:"branch_id"`
	}
	if err := json.Unmarshal([]byte(text), &ans); err != nil || ans.BranchID == "" {
		t.Fatalf("branch_create answered %q (%v), want JSON with a branch_id", truncate(text, 300), err)
	}
	return ans.BranchID
}

func TestAuditRecordsEveryCall(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	dir := t.TempDir()
	auditPath, manifest := filepath.Join(dir, "audit.jsonl"), filepath.Join(dir, "manifest.json")
	cfg := leakConfig(t, map[string]any{
		"replay": replayEntry(t),
		"leaky":  leakyEntry(t, leakSeed, manifest),
	}, auditPath, true)
	run := startTappedStdio(t, cfg, nil)
	p := run.peer
	waitManifest(ctx, t, manifest)
	m := readPlanted(t, manifest, leakSeed)
	needles := m.needles()
	tail := &auditTail{path: auditPath}
	tail.next(t) // whatever start-up wrote

	// The root's id is that of the first forwarded call's branch.
	var root string
	calls := 0
	var batch []intercept.Record // the records of the last step
	step := func(name string, do func(), want wantCall) intercept.Record {
		t.Helper()
		do()
		calls++
		recs := tail.next(t)
		batch = recs
		if root == "" && want.upstream != "" && want.outcome != intercept.OutcomeRefused {
			if c, _ := split(recs); len(c) > 0 {
				root = c[0].Branch
				if root == "" {
					t.Fatalf("%s: the first forwarded call's record names no branch", name)
				}
			}
		}
		r := checkCall(t, name, recs, root, want)
		if leaks := findLeaks([]byte(describeRecords(recs)), needles); len(leaks) > 0 {
			t.Errorf("%s: the audit record holds planted secrets:\n%s", name, describeLeaks(m, leaks))
		}
		return r
	}
	tool := func(name string, args map[string]any, wantError bool) func() {
		return func() {
			text, res := p.callText(ctx, t, name, args)
			if res.IsError != wantError {
				t.Errorf("%s: isError %v, want %v: %s", name, res.IsError, wantError, truncate(text, 300))
			}
		}
	}

	step("tools/call ok", tool("replay__emit", map[string]any{"bytes": 2000, "kind": "text"}, false),
		wantCall{upstream: "replay", method: "tools/call", tool: "emit", outcome: intercept.OutcomeOK, check: withArgs(delivered)})
	step("tools/call error", tool("replay__run", map[string]any{"trajectory": "no-such-trajectory", "step": 0}, true),
		wantCall{upstream: "replay", method: "tools/call", tool: "run", outcome: intercept.OutcomeError, check: withArgs(delivered)})
	step("resources/read", func() {
		if _, err := p.ReadResource(ctx, mcp.ReadResourceRequest{Params: mcp.ReadResourceParams{URI: "leaky://secrets/plain"}}); err != nil {
			t.Errorf("resources/read: %v", err)
		}
	}, wantCall{upstream: "leaky", method: "resources/read", tool: "leaky://secrets/plain", outcome: intercept.OutcomeOK, check: redacted(len(m.Secrets), delivered)})
	step("prompts/get", func() {
		if _, err := p.GetPrompt(ctx, mcp.GetPromptRequest{Params: mcp.GetPromptParams{Name: "leaky__leaky_prompt", Arguments: map[string]string{"encoding": "plain"}}}); err != nil {
			t.Errorf("prompts/get: %v", err)
		}
	}, wantCall{upstream: "leaky", method: "prompts/get", tool: "leaky_prompt", outcome: intercept.OutcomeOK, check: redacted(len(m.Secrets), delivered)})
	step("json-rpc error", func() {
		_, err := p.CallTool(ctx, mcp.CallToolRequest{Params: mcp.CallToolParams{Name: "leaky__leak_rpc_error", Arguments: map[string]any{"encoding": "plain"}}})
		if err == nil {
			t.Errorf("leak_rpc_error: no JSON-RPC error")
		}
	}, wantCall{upstream: "leaky", method: "tools/call", tool: "leak_rpc_error", outcome: intercept.OutcomeError, check: func(r intercept.Record) error {
		if !strings.Contains(r.Error, redactedMarker) {
			return fmt.Errorf("error %q, want the upstream's message, scrubbed", r.Error)
		}
		if r.ResultTokens != 0 || r.DeliveredTokens != 0 {
			return fmt.Errorf("tokens %d/%d for a JSON-RPC error, want none", r.ResultTokens, r.DeliveredTokens)
		}
		return nil
	}})

	// A branch with a small budget: its first large result is cut and the
	// branch force-returned; the next call to it is refused.
	const budget = 300
	var small string
	cr := step("branch_create", func() {
		small = createBranch(ctx, t, p, map[string]any{"description": "audit: small budget", "budget": budget})
	}, wantCall{method: "tools/call", tool: "branch_create", outcome: intercept.OutcomeOK})
	if ev, ok := findBranchEvent(batch, "created", small); !ok {
		t.Errorf("branch_create: no \"created\" branch record for %s:%s", small, describeRecords(batch))
	} else if ev.Parent != root || ev.Depth != 1 || ev.BudgetTotal != budget || ev.Session != cr.Session {
		t.Errorf("created event: parent %q depth %d budget %d session %q, want %q 1 %d %q", ev.Parent, ev.Depth, ev.BudgetTotal, ev.Session, root, budget, cr.Session)
	}

	step("cut result", tool("replay__emit", map[string]any{"bytes": 40000, "kind": "text", "branch_id": small}, false),
		wantCall{upstream: "replay", method: "tools/call", tool: "emit", outcome: intercept.OutcomeCut, branch: small, depth: 1, check: func(r intercept.Record) error {
			switch {
			case r.CutHandle == "":
				return fmt.Errorf("no cut_handle")
			case r.DeliveredTokens <= 0 || r.DeliveredTokens > budget:
				return fmt.Errorf("delivered_tokens %d, want 1..%d", r.DeliveredTokens, budget)
			case r.ResultTokens < r.DeliveredTokens:
				// Counting stops past the cut point: result_tokens is a
				// floor of the whole, never below what was delivered.
				return fmt.Errorf("result_tokens %d, want at least delivered_tokens %d", r.ResultTokens, r.DeliveredTokens)
			case r.BudgetTotal != budget || r.BudgetUsed > budget:
				return fmt.Errorf("budget %d/%d, want at most %d of %d", r.BudgetUsed, r.BudgetTotal, budget, budget)
			}
			return nil
		}})
	if ev, ok := findBranchEvent(batch, "forced", small); !ok {
		t.Errorf("cut: no \"forced\" branch record for %s:%s", small, describeRecords(batch))
	} else if ev.Reason != "budget exhausted" || ev.Status == "" {
		t.Errorf("forced event: reason %q status %q, want \"budget exhausted\" and a status", ev.Reason, ev.Status)
	}
	if ev, ok := findBranchEvent(batch, "cut", small); !ok {
		t.Errorf("cut: no \"cut\" branch record for %s:%s", small, describeRecords(batch))
	} else if ev.Tokens <= 0 {
		t.Errorf("cut event: tokens %d, want the remainder's (> 0)", ev.Tokens)
	}

	step("refused: closed branch", tool("replay__emit", map[string]any{"bytes": 10, "kind": "text", "branch_id": small}, true),
		wantCall{upstream: "replay", method: "tools/call", tool: "emit", outcome: intercept.OutcomeRefused, check: func(r intercept.Record) error {
			if r.ResultTokens != 0 || r.DeliveredTokens != 0 {
				return fmt.Errorf("tokens %d/%d for a refused call, want none", r.ResultTokens, r.DeliveredTokens)
			}
			if !strings.Contains(r.Error, "refused") {
				return fmt.Errorf("error %q, want the refusal", r.Error)
			}
			return nil
		}})

	var done string
	step("branch_create 2", func() {
		done = createBranch(ctx, t, p, map[string]any{"description": "audit: returned"})
	}, wantCall{method: "tools/call", tool: "branch_create", outcome: intercept.OutcomeOK})
	if _, ok := findBranchEvent(batch, "created", done); !ok {
		t.Errorf("branch_create 2: no \"created\" branch record for %s:%s", done, describeRecords(batch))
	}
	step("branch_return", tool("branch_return", map[string]any{"branch_id": done, "message": "nothing to report"}, false),
		wantCall{method: "tools/call", tool: "branch_return", outcome: intercept.OutcomeOK})
	if ev, ok := findBranchEvent(batch, "returned", done); !ok {
		t.Errorf("branch_return: no \"returned\" branch record for %s:%s", done, describeRecords(batch))
	} else if ev.Parent != root || ev.Depth != 1 {
		t.Errorf("returned event: parent %q depth %d, want %q 1", ev.Parent, ev.Depth, root)
	}

	// One call record per request, all of one session.
	all := (&auditTail{path: auditPath}).next(t)
	callRecs, _ := split(all)
	if len(callRecs) != calls {
		t.Errorf("%d call records for %d requests:%s", len(callRecs), calls, describeRecords(callRecs))
	}
	for _, r := range callRecs {
		if r.Session == "" || r.Session != callRecs[0].Session {
			t.Errorf("call record of session %q, want all in %q", r.Session, callRecs[0].Session)
		}
	}
}
