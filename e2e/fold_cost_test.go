package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/foldproxy/foldproxy/e2e/cost"
	"github.com/foldproxy/foldproxy/intercept/tokens"
	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
)

// Issue 10: what foldproxy's own words cost the agent, measured exactly
// (o200k_base) over the real tool definitions and the real answers of the
// real binary, with package cost (which the bench's "cost" section uses
// too). These are fixed bounds on deterministic token counts.

// bareConnect starts and initializes an mcp-go client that declares no
// client capabilities (no roots, sampling or elicitation), as a minimal
// agent does.
func bareConnect(t testing.TB, name string, tr transport.Interface) *peer {
	t.Helper()
	p := &peer{name: name, agent: newAgent(), notes: newRecorder()}
	p.Client = client.NewClient(tr, client.WithProtocolVersion(protocolVersion))
	p.OnNotification(p.notes.add)
	life, stop := context.WithCancel(context.Background())
	if err := p.Start(life); err != nil {
		stop()
		t.Fatalf("%s: starting the client: %v", name, err)
	}
	t.Cleanup(func() { _ = p.Close(); stop() })
	ctx := testContext(t, 60*time.Second)
	if _, err := p.Initialize(ctx, mcp.InitializeRequest{Params: mcp.InitializeParams{
		ProtocolVersion: protocolVersion,
		ClientInfo:      mcp.Implementation{Name: "foldproxy-e2e-bare", Version: "1.0.0"},
	}}); err != nil {
		t.Fatalf("%s: initialize: %v", name, err)
	}
	return p
}

// modelTokens counts a tools/call result as a model is shown it
// (cost.ModelTokens).
func modelTokens(t testing.TB, c *tokens.Counter, r foldReply) int {
	t.Helper()
	n, err := cost.ModelTokens(c, r.raw)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// measureCatalogue lists tools direct and through foldproxy (one upstream
// named up) with clients that declare no capabilities.
func measureCatalogue(ctx context.Context, t *testing.T, up string, entry map[string]any, command string, args ...string) cost.Catalogue {
	t.Helper()
	c := foldCounter(t)
	direct := bareConnect(t, "direct "+up, stdioTransport(t, "direct "+up, command, args...))
	cfg := foldProxyConfig(t, map[string]any{up: entry}, map[string]any{}, false)
	proxied := bareConnect(t, "foldproxy "+up, stdioTransport(t, "foldproxy", proxyBin(t), "serve", "--config", cfg, "--state", t.TempDir()))

	dItems, err := cost.List(ctx, direct.raw, "tools/list", "tools")
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, it := range dItems {
		n, err := nameOf(it)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, up+"__"+n)
	}
	foldWaitTools(ctx, t, proxied, want...)
	pItems, err := cost.List(ctx, proxied.raw, "tools/list", "tools")
	if err != nil {
		t.Fatal(err)
	}
	cc, err := cost.MeasureCatalogue(c, up, dItems, pItems)
	if err != nil {
		t.Fatal(err)
	}
	return cc
}

// checkCatalogue applies the bounds and logs the figures.
func checkCatalogue(t *testing.T, cc cost.Catalogue) {
	t.Helper()
	for _, p := range cc.Problems() {
		t.Error(p)
	}
	t.Log(cc)
}

func TestFoldCostCatalogueEverything(t *testing.T) {
	ctx := testContext(t, 90*time.Second)
	cc := measureCatalogue(ctx, t, "ev", everythingStdioEntry(t), nodeBin(t), everythingScript(t), "stdio")
	checkCatalogue(t, cc)
	// server-everything adds these only for a client that declares roots,
	// sampling and elicitation; this one declares none.
	for _, n := range []string{"get-roots-list", "trigger-sampling-request", "trigger-elicitation-request"} {
		if _, ok := cc.Proxied[n]; ok {
			t.Errorf("foldproxy lists ev__%s to a client that declared no roots, sampling or elicitation", n)
		}
	}
}

func TestFoldCostCatalogueFilesystem(t *testing.T) {
	ctx := testContext(t, 90*time.Second)
	dir := t.TempDir()
	cc := measureCatalogue(ctx, t, "fs", stdioEntry(nodeBin(t), filesystemScript(t), dir), nodeBin(t), filesystemScript(t), dir)
	checkCatalogue(t, cc)
}

// TestFoldCostBranch measures what a branch costs its parent besides its
// message and return value: the branch_create and branch_return answers
// as the model sees them, for a branch under the main thread and a nested
// one, with and without a return value.
func TestFoldCostBranch(t *testing.T) {
	ctx := testContext(t, 90*time.Second)
	c := foldCounter(t)
	cfg := foldProxyConfig(t, map[string]any{"replay": replayEntry(t)}, map[string]any{"rootBudget": 200000}, false)
	p := startFoldProxy(ctx, t, cfg, "replay__emit")

	msg := "Found it: intercept/budget.go cuts at the remaining budget; the notice names the handle. No test fails."
	cases := []struct {
		name  string
		rv    any
		outer bool // nested under another branch
	}{
		{"message only", nil, false},
		{"with a return value", map[string]any{"files": []string{"intercept/budget.go"}, "ok": true}, false},
		{"nested", "a string value", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			outer := ""
			if tc.outer {
				var o struct {
					BranchID string `json:"branch_id"`
				}
				foldMust(ctx, t, p, "branch_create", map[string]any{"description": "outer", "inject_memories": false}, &o)
				outer = o.BranchID
				defer foldMust(ctx, t, p, "branch_return", map[string]any{"branch_id": outer, "message": "done"}, nil)
			}
			var cr struct {
				BranchID string `json:"branch_id"`
			}
			// The same task each time: the earlier branch's lesson would be
			// injected (content, bounded by the replay tests), not the
			// fixed cost measured here.
			create := foldMust(ctx, t, p, "branch_create", map[string]any{"description": "find where results are cut", "inject_memories": false}, &cr)
			if r := foldCall(ctx, t, p, "replay__emit", map[string]any{"bytes": 2000}); r.isError {
				t.Fatalf("emit: %s", r.text())
			}
			args := map[string]any{"branch_id": cr.BranchID, "message": msg}
			if tc.rv != nil {
				args["return_value"] = tc.rv
			}
			var rr struct {
				ReturnValue json.RawMessage `json:"return_value"`
			}
			ret := foldMust(ctx, t, p, "branch_return", args, &rr)
			if tc.rv != nil {
				want, _ := json.Marshal(tc.rv)
				var got, exp any
				_ = json.Unmarshal(rr.ReturnValue, &got)
				_ = json.Unmarshal(want, &exp)
				if fmt.Sprint(got) != fmt.Sprint(exp) {
					t.Errorf("return_value came back as %s, want the JSON value %s", rr.ReturnValue, want)
				}
			}
			bc, err := cost.BranchCost(c, create.raw, ret.raw, msg, tc.rv)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("branch_create answer %d tokens, branch_return answer %d tokens; fixed cost besides the message (%d) and return value (%d): %d tokens\ncreate: %s\nreturn: %s",
				bc.Create, bc.Return, bc.Message, bc.Value, bc.Fixed, create.raw, ret.raw)
			if bc.Fixed > cost.MaxBranchFixedCost {
				t.Errorf("a branch costs its parent %d tokens besides its message and return value, above the bound of %d", bc.Fixed, cost.MaxBranchFixedCost)
			}
		})
	}
}

// TestFoldCutTypeScriptSDK: a read cut inside a branch reaches the official
// TypeScript SDK client (the one Claude Code uses) without a validation
// error, although server-filesystem's tools declare an outputSchema; the
// text the model is shown carries the cut notice and its handle; and
// branch_recall returns the rest of the file exactly, once.
func TestFoldCutTypeScriptSDK(t *testing.T) {
	ctx := testContext(t, 90*time.Second)
	dir := t.TempDir()
	var b strings.Builder
	for i := range 3000 {
		fmt.Fprintf(&b, "line %d: the quick brown fox jumps over the lazy dog\n", i)
	}
	file := writeFileIn(t, dir, "big.txt", b.String())
	cfg := foldProxyConfig(t, map[string]any{"fs": stdioEntry(nodeBin(t), filesystemScript(t), dir)}, map[string]any{}, true)
	sdk := filepath.Join(nodeModules(t), "@modelcontextprotocol", "sdk")
	script := filepath.Join(repoDir, "e2e", "testdata", "ts_cut_client.mjs")
	cmd := exec.CommandContext(ctx, nodeBin(t), script, sdk, proxyBin(t), cfg, t.TempDir(), file, "2000")
	var stderr syncBuffer
	cmd.Stderr = &stderr
	dumpOnFailure(t, "ts client stderr", &stderr)
	outb, err := cmd.Output()
	if err != nil {
		t.Fatalf("the TypeScript client failed: %v", err)
	}
	var out struct {
		OutputSchema bool     `json:"outputSchema"`
		Error        string   `json:"error"`
		IsError      bool     `json:"isError"`
		Texts        []string `json:"texts"`
		Handle       string   `json:"handle"`
		Rest         *string  `json:"rest"`
	}
	if err := json.Unmarshal(outb, &out); err != nil {
		t.Fatalf("the client's report %q: %v", outb, err)
	}
	if !out.OutputSchema {
		t.Fatalf("read_text_file lists no outputSchema: the test would prove nothing")
	}
	if out.Error != "" {
		t.Fatalf("the SDK client refused the cut result: %s", out.Error)
	}
	if !out.IsError || len(out.Texts) != 2 || !strings.Contains(out.Texts[1], "result cut at") || out.Handle == "" || !strings.Contains(out.Texts[1], out.Handle) {
		t.Fatalf("the cut result as the client saw it: isError %v, texts %q; want the cut text, then a notice naming the handle", out.IsError, out.Texts)
	}
	if out.Rest == nil {
		t.Fatalf("no recall of %s", out.Handle)
	}
	if got := out.Texts[0] + *out.Rest; got != b.String() {
		t.Errorf("kept text (%d bytes) + recalled rest (%d bytes) differs from the file (%d bytes) at byte %d", len(out.Texts[0]), len(*out.Rest), b.Len(), firstDiff(got, b.String()))
	}
}

// writeFileIn writes a file in dir and returns its path.
func writeFileIn(t testing.TB, dir, name, data string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestFoldRootBudgetSaysSo: with fold.rootBudget set, the main thread's
// results are cut at its limit with a notice that says so and what to do;
// the results after it are refused with an error that says the same and
// keeps each whole under a handle; a branch opened before the limit still
// works, and the main thread hears its return (it keeps the answers'
// share). No result arrives empty without a word.
func TestFoldRootBudgetSaysSo(t *testing.T) {
	ctx := testContext(t, 90*time.Second)
	c := foldCounter(t)
	const rootBudget = 2000
	cfg := foldProxyConfig(t, map[string]any{"replay": replayEntry(t)}, map[string]any{"rootBudget": rootBudget}, true)
	p := startFoldProxy(ctx, t, cfg, "replay__emit")

	var cr foldCreated
	create := foldMust(ctx, t, p, "branch_create", map[string]any{"description": "open before the limit", "budget": 1500}, &cr)
	used, cutAt := modelTokens(t, c, create), -1
	root := foldSessionTree(ctx, t, p).Tree.BranchID
	for i := range 30 {
		// The open branch is the innermost: the main thread's calls name it.
		r := foldCall(ctx, t, p, "replay__emit", map[string]any{"bytes": 1200, "branch_id": root})
		if r.isError {
			if cutAt < 0 {
				t.Fatalf("call %d refused before any cut: %s", i, r.text())
			}
			msg := r.text()
			m := cutHandleRE.FindStringSubmatch(msg)
			if m == nil || !strings.Contains(msg, "the main thread has reached its token budget (fold.rootBudget, 2,000 tokens)") || !strings.Contains(msg, "raise fold.rootBudget") {
				t.Fatalf("call %d after the limit: the refusal %q does not say why, where the result is, and what to do", i, msg)
			}
			// The whole result is kept, and the open branch reads it.
			var pg foldPage
			foldMust(ctx, t, p, "branch_recall", map[string]any{"handle": m[1], "max_tokens": 50}, &pg)
			if pg.TotalBytes < 1200 || pg.Text == "" {
				t.Errorf("the refused result's handle holds %d bytes, page %q", pg.TotalBytes, pg.Text)
			}
			break
		}
		n := resultTokens(t, c, r.raw)
		used += n
		if used > rootBudget {
			t.Fatalf("call %d: the main thread has received %d tokens, over its budget of %d", i, used, rootBudget)
		}
		last := r.texts[len(r.texts)-1]
		if strings.Contains(last, "result cut at") {
			if !strings.Contains(last, "the main thread has reached its token budget (fold.rootBudget)") || !strings.Contains(last, "raise fold.rootBudget") || cutHandleRE.FindStringSubmatch(last) == nil {
				t.Fatalf("call %d: the main thread's cut notice %q does not say it is at its limit and what to do", i, last)
			}
			cutAt = i
			continue
		}
		if cutAt >= 0 {
			t.Fatalf("call %d: a result after the limit was delivered: %s", i, truncate(r.text(), 200))
		}
		if strings.Join(r.texts, "") == "" {
			t.Fatalf("call %d: an empty result", i)
		}
	}
	if cutAt < 0 {
		t.Fatalf("the main thread never reached its limit of %d tokens (%d received)", rootBudget, used)
	}
	// The branch opened before the limit works on and returns.
	if r := foldCall(ctx, t, p, "replay__emit", map[string]any{"bytes": 1200, "branch_id": cr.BranchID}); r.isError || strings.Contains(r.text(), "result cut at") {
		t.Fatalf("the branch's result: isError %v, %s", r.isError, truncate(r.text(), 300))
	}
	ret := foldMust(ctx, t, p, "branch_return", map[string]any{"branch_id": cr.BranchID, "message": "done"}, nil)
	used += modelTokens(t, c, ret)
	if st := foldSessionTree(ctx, t, p).Tree; st.BudgetUsed > rootBudget || st.BudgetUsed < used {
		t.Errorf("the main thread used %d of %d; the client counted at least %d", st.BudgetUsed, rootBudget, used)
	}
}

// TestFoldTinyBranchSaysWhy: a branch created with less than even the
// short cut notice gets its result refused with an error that says why and
// names the handle keeping all of it (through the real binary); the branch
// ends, and the handle reads back the whole result.
func TestFoldTinyBranchSaysWhy(t *testing.T) {
	ctx := testContext(t, 90*time.Second)
	cfg := foldProxyConfig(t, map[string]any{"replay": replayEntry(t)}, map[string]any{}, true)
	p := startFoldProxy(ctx, t, cfg, "replay__emit")
	var cr foldCreated
	foldMust(ctx, t, p, "branch_create", map[string]any{"description": "too small", "budget": 5}, &cr)
	r := foldCall(ctx, t, p, "replay__emit", map[string]any{"bytes": 1200, "branch_id": cr.BranchID})
	m := cutHandleRE.FindStringSubmatch(r.text())
	if !r.isError || m == nil || !strings.Contains(r.text(), "fewer than a cut notice needs") || !strings.Contains(r.text(), "force-returned") {
		t.Fatalf("isError %v, %q: want a refusal that says why and names the handle", r.isError, r.text())
	}
	rest, _ := recallAll(ctx, t, p, m[1])
	direct := foldCall(ctx, t, p, "replay__emit", map[string]any{"bytes": 1200}) // the main thread, unlimited
	if string(rest) != direct.text() {
		t.Errorf("the handle holds %d bytes, the result is %d", len(rest), len(direct.text()))
	}
	if st := foldStatus(ctx, t, p, cr.BranchID); st.Status != "forced" || st.BudgetUsed != 0 {
		t.Errorf("branch %s with %d used, want forced with 0", st.Status, st.BudgetUsed)
	}
}

// TestPluginSkillCost measures what the Claude Code plugin's skill costs
// the agent (o200k_base): its name and description sit in every request's
// list of skills; its body is read once, when the agent uses the skill.
// Both are kept under fixed bounds.
func TestPluginSkillCost(t *testing.T) {
	c := foldCounter(t)
	data, err := os.ReadFile(filepath.Join(repoDir, "cmd", "foldproxy", "plugin", "skills", "context-folding", "SKILL.md"))
	if err != nil {
		t.Fatal(err)
	}
	front, body, ok := strings.Cut(strings.TrimPrefix(string(data), "---\n"), "\n---\n")
	if !ok {
		t.Fatalf("SKILL.md has no front matter:\n%s", data)
	}
	var desc string
	for _, l := range strings.Split(front, "\n") {
		if v, ok := strings.CutPrefix(l, "description: "); ok {
			desc = v
		}
	}
	listed, read := c.CountText("context-folding: "+desc), c.CountText(body)
	t.Logf("plugin skill: %d tokens listed in every request (name and description), %d tokens when read", listed, read)
	if desc == "" || listed > 60 || read > 550 {
		t.Errorf("the skill costs %d tokens listed (bound 60) and %d read (bound 550)", listed, read)
	}
}
