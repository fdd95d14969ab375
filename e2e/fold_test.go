package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/foldproxy/foldproxy/e2e/trajectory"
	"github.com/foldproxy/foldproxy/intercept/tokens"
	"github.com/foldproxy/foldproxy/policy"
)

// Issue 3: the fold contract end to end. The fold tools are used through
// the proxy exactly as an agent uses them: tools/call with an mcp-go
// client, the JSON answers read from structuredContent (or the text).

// foldReply is one tools/call answer as the client received it.
type foldReply struct {
	raw     json.RawMessage // the result, byte for byte
	isError bool
	texts   []string // the text content blocks, in order
	sc      json.RawMessage
}

// text joins the reply's text blocks.
func (r foldReply) text() string { return strings.Join(r.texts, "\n") }

// decode reads the answer of a fold tool into v: its structuredContent, or
// the JSON text when there is none.
func (r foldReply) decode(t testing.TB, v any) {
	t.Helper()
	if r.isError {
		t.Fatalf("decoding a fold answer: the call failed: %s", r.text())
	}
	src := r.sc
	if (len(src) == 0 || string(src) == "null") && len(r.texts) > 0 {
		src = json.RawMessage(r.texts[0]) // notices may follow the answer
	}
	if err := json.Unmarshal(src, v); err != nil {
		t.Fatalf("decoding a fold answer %s: %v", truncate(string(src), 500), err)
	}
}

// foldCallRaw calls a tool through p and returns the answer exactly as it
// arrived. A JSON-RPC error is returned as an error.
func foldCallRaw(ctx context.Context, p *peer, name string, args map[string]any) (foldReply, error) {
	if args == nil {
		args = map[string]any{}
	}
	raw, err := p.raw(ctx, "tools/call", map[string]any{"name": name, "arguments": args})
	if err != nil {
		return foldReply{}, err
	}
	var body struct {
		IsError bool `json:"isError"`
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
		StructuredContent json.RawMessage `json:"structuredContent"`
	}
	if err := json.Unmarshal(raw, &body); err != nil {
		return foldReply{}, fmt.Errorf("%s: the result is not a CallToolResult: %w: %s", name, err, truncate(string(raw), 300))
	}
	r := foldReply{raw: raw, isError: body.IsError, sc: body.StructuredContent}
	for _, c := range body.Content {
		if c.Type == "text" {
			r.texts = append(r.texts, c.Text)
		}
	}
	return r, nil
}

// foldCall is foldCallRaw failing the test on a JSON-RPC error.
func foldCall(ctx context.Context, t testing.TB, p *peer, name string, args map[string]any) foldReply {
	t.Helper()
	r, err := foldCallRaw(ctx, p, name, args)
	if err != nil {
		t.Fatalf("calling %s: %v", name, err)
	}
	return r
}

// foldMust calls a fold tool that must succeed and decodes its answer.
func foldMust(ctx context.Context, t testing.TB, p *peer, name string, args map[string]any, v any) foldReply {
	t.Helper()
	r := foldCall(ctx, t, p, name, args)
	if r.isError {
		t.Fatalf("%s %v: refused: %s", name, args, r.text())
	}
	if v != nil {
		r.decode(t, v)
	}
	return r
}

// The fold tools' answers, as far as the tests read them.
type (
	foldCreated struct {
		BranchID        string    `json:"branch_id"`
		Depth           int       `json:"depth"`
		Budget          int       `json:"budget"`
		ParentRemaining *int      `json:"parent_remaining"`
		TimeoutSeconds  float64   `json:"timeout_seconds"`
		Dependencies    []foldDep `json:"dependencies"`
	}
	foldDep struct {
		BranchID    string          `json:"branch_id"`
		Status      string          `json:"status"`
		Reason      string          `json:"reason"`
		Message     string          `json:"message"`
		ReturnValue json.RawMessage `json:"return_value"`
	}
	foldReturned struct {
		TokensUsed            int             `json:"tokens_used"`
		Message               string          `json:"message"`
		ReturnValue           json.RawMessage `json:"return_value"`
		ChildrenForceReturned []string        `json:"children_force_returned"`
		ParentRemaining       *int            `json:"parent_remaining"`
	}
	foldView struct {
		BranchID        string         `json:"branch_id"`
		Status          string         `json:"status"`
		Reason          string         `json:"reason"`
		BudgetTotal     int            `json:"budget_total"`
		BudgetUsed      int            `json:"budget_used"`
		Depth           int            `json:"depth"`
		Parent          string         `json:"parent"`
		Children        []string       `json:"children"`
		DependsOn       []string       `json:"depends_on"`
		Deadline        string         `json:"deadline"`
		UsageByTool     map[string]int `json:"usage_by_tool"`
		UsageByUpstream map[string]int `json:"usage_by_upstream"`
		Calls           int            `json:"calls"`
		Cuts            []string       `json:"cuts"`
		Summary         string         `json:"summary"`
		Message         string         `json:"message"`
		Branches        []*foldView    `json:"branches"`
	}
	foldTree struct {
		Session        string    `json:"session"`
		Innermost      string    `json:"innermost_branch"`
		ActiveBranches int       `json:"active_branches"`
		Tree           *foldView `json:"tree"`
	}
	foldPage struct {
		Handle     string `json:"handle"`
		Offset     int    `json:"offset"`
		NextOffset int    `json:"next_offset"`
		Done       bool   `json:"done"`
		TotalBytes int    `json:"total_bytes"`
		Tokens     int    `json:"tokens"`
		Text       string `json:"text"`
		TextBase64 string `json:"text_base64"`
	}
)

// foldWaitTools waits until tools/list names every one of tools: the
// upstreams start in the background.
func foldWaitTools(ctx context.Context, t testing.TB, p *peer, tools ...string) {
	t.Helper()
	var names []string
	for {
		items, err := p.rawList(ctx, "tools/list", "tools")
		if err != nil {
			t.Fatalf("tools/list: %v", err)
		}
		names = names[:0]
		for _, it := range items {
			if n, err := nameOf(it); err == nil {
				names = append(names, n)
			}
		}
		missing := slices.DeleteFunc(slices.Clone(tools), func(x string) bool { return slices.Contains(names, x) })
		if len(missing) == 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("tools %v did not appear in tools/list: %v (it lists %v)", missing, ctx.Err(), names)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// startFoldProxy starts foldproxy over stdio on cfg and waits until
// tools/list carries tools.
func startFoldProxy(ctx context.Context, t testing.TB, cfg string, tools ...string) *peer {
	t.Helper()
	p := startProxyStdio(t, cfg, nil)
	foldWaitTools(ctx, t, p, tools...)
	return p
}

// foldStatus returns branch_status of one branch.
func foldStatus(ctx context.Context, t testing.TB, p *peer, branch string) foldView {
	t.Helper()
	var v foldView
	foldMust(ctx, t, p, "branch_status", map[string]any{"branch_id": branch}, &v)
	return v
}

// foldSessionTree returns branch_status of the whole session.
func foldSessionTree(ctx context.Context, t testing.TB, p *peer) foldTree {
	t.Helper()
	var tr foldTree
	foldMust(ctx, t, p, "branch_status", nil, &tr)
	if tr.Tree == nil {
		t.Fatalf("branch_status without a branch has no tree")
	}
	return tr
}

// foldCounter is the o200k_base counter the proxy uses by default.
func foldCounter(t testing.TB) *tokens.Counter {
	t.Helper()
	c, err := tokens.NewCounter(policy.Tokens{})
	if err != nil {
		t.Fatalf("token counter: %v", err)
	}
	if c.Encoding() != "o200k_base" {
		t.Fatalf("the default counter's encoding is %s, want o200k_base", c.Encoding())
	}
	return c
}

// resultTokens counts a tools/call result as the proxy counts what the
// agent receives.
func resultTokens(t testing.TB, c *tokens.Counter, raw json.RawMessage) int {
	t.Helper()
	n, _, err := c.CountResult("tools/call", raw, -1)
	if err != nil {
		t.Fatalf("counting a result: %v: %s", err, truncate(string(raw), 300))
	}
	return n
}

// foldProxyConfig writes a config with the given upstreams and fold
// settings; scrubbing stays on unless noScrub.
func foldProxyConfig(t testing.TB, servers map[string]any, foldSet map[string]any, noScrub bool) string {
	t.Helper()
	settings := map[string]any{"fold": foldSet}
	if noScrub {
		settings["scrub"] = map[string]any{"disabled": true}
	}
	return writeConfig(t, servers, settings)
}

// replayEntry runs the replay helper server on the trajectories the repository holds.
func replayEntry(t testing.TB) map[string]any {
	t.Helper()
	return stdioEntry(helperBin(t, "replay"), "-data", trajectoriesPath(t))
}

// trajectoriesPath is the trajectories file under e2e/testdata (a copy of
// the real agent tool output described in its README).
func trajectoriesPath(t testing.TB) string {
	t.Helper()
	p := filepath.Join(repoDir, filepath.FromSlash(trajectory.File))
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("the trajectories: %v", err)
	}
	return p
}

func loadTrajectories(t testing.TB) []trajectory.Trajectory {
	t.Helper()
	trajs, err := trajectory.Load(trajectoriesPath(t))
	if err != nil {
		t.Fatal(err)
	}
	return trajs
}

// isNotice reports whether a text block is one of foldproxy's notices.
func isNotice(s string) bool { return strings.HasPrefix(s, "[foldproxy]") }

// cutHandleRE finds the handle in a cut notice (the full or the short form).
var cutHandleRE = regexp.MustCompile(`branch_recall(?: with handle)? "([^"]+)"`)

// recallAll pages through a cut remainder with branch_recall and returns it
// and the number of pages.
func recallAll(ctx context.Context, t testing.TB, p *peer, handle string) ([]byte, int) {
	t.Helper()
	var out []byte
	offset := 0
	for pages := 1; ; pages++ {
		if pages > 10_000 {
			t.Fatalf("branch_recall %s: no end after 10000 pages", handle)
		}
		var pg foldPage
		foldMust(ctx, t, p, "branch_recall", map[string]any{"handle": handle, "offset": offset}, &pg)
		if pg.Offset != offset {
			t.Fatalf("branch_recall %s offset %d: the page says offset %d", handle, offset, pg.Offset)
		}
		chunk := []byte(pg.Text)
		if pg.TextBase64 != "" {
			var err error
			if chunk, err = base64.StdEncoding.DecodeString(pg.TextBase64); err != nil {
				t.Fatalf("branch_recall %s: text_base64: %v", handle, err)
			}
		}
		if pg.NextOffset-offset != len(chunk) {
			t.Fatalf("branch_recall %s offset %d: next_offset %d but the page holds %d bytes", handle, offset, pg.NextOffset, len(chunk))
		}
		out = append(out, chunk...)
		if pg.Done {
			if len(out) != pg.TotalBytes {
				t.Fatalf("branch_recall %s: %d bytes read, total_bytes %d", handle, len(out), pg.TotalBytes)
			}
			return out, pages
		}
		if pg.NextOffset <= offset {
			t.Fatalf("branch_recall %s: no progress at offset %d", handle, offset)
		}
		offset = pg.NextOffset
	}
}

// distinctiveLines returns up to n of the longest lines of a file that are
// long enough to be unmistakable.
func distinctiveLines(text string, n int) []string {
	var lines []string
	seen := map[string]bool{}
	for _, l := range strings.Split(text, "\n") {
		l = strings.TrimSpace(l)
		if len(l) >= 24 && !seen[l] {
			seen[l] = true
			lines = append(lines, l)
		}
	}
	slices.SortStableFunc(lines, func(a, b string) int { return len(b) - len(a) })
	return lines[:min(n, len(lines))]
}

// TestFoldBranchKeepsFilesOutOfRoot: a branch reads ten files of this
// repository through server-filesystem; the root receives the create and
// return answers only, under 500 tokens and without a line of the files,
// while the branch is charged what it read.
func TestFoldBranchKeepsFilesOutOfRoot(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	c := foldCounter(t)
	cfg := foldProxyConfig(t, map[string]any{
		"fs": stdioEntry(nodeBin(t), filesystemScript(t), repoDir),
	}, map[string]any{"defaultTimeout": "60s"}, false)
	p := startFoldProxy(ctx, t, cfg, "fs__read_text_file")

	files := []string{
		"fold/doc.go", "intercept/doc.go", "proxy/doc.go", "policy/doc.go", "upstreams/doc.go",
		"e2e/doc.go", "fold/timers.go", "fold/limits.go", "fold/batch.go", "Makefile",
	}
	contents := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(repoDir, filepath.FromSlash(f)))
		if err != nil {
			t.Fatal(err)
		}
		contents[f] = string(b)
	}
	notesBefore := len(p.notes.all())

	// Everything the root receives: the create answer, the return answer,
	// and any notification that arrives meanwhile.
	var rootRaw []json.RawMessage
	var cr foldCreated
	r := foldMust(ctx, t, p, "branch_create", map[string]any{
		"description": "read ten files of the repository", "budget": 32768,
	}, &cr)
	rootRaw = append(rootRaw, r.raw)
	if cr.BranchID == "" || cr.Depth != 1 || cr.Budget != 32768 {
		t.Fatalf("branch_create answer %+v: want a branch id, depth 1, budget 32768", cr)
	}

	var inBranch []string // what the branch received, as text
	branchTokens := 0
	for _, f := range files {
		r := foldCall(ctx, t, p, "fs__read_text_file", map[string]any{"path": filepath.Join(repoDir, filepath.FromSlash(f))})
		if r.isError {
			t.Fatalf("read_text_file %s: %s", f, r.text())
		}
		if !strings.Contains(r.text(), strings.TrimSpace(contents[f])) {
			t.Errorf("read_text_file %s did not deliver the file: %s", f, truncate(r.text(), 300))
		}
		inBranch = append(inBranch, r.text())
		branchTokens += resultTokens(t, c, r.raw)
	}

	var st foldView
	sr := foldMust(ctx, t, p, "branch_status", map[string]any{"branch_id": cr.BranchID}, &st)
	if st.Status != "active" || st.Calls != len(files) || st.BudgetUsed != branchTokens || st.BudgetUsed < 2000 {
		t.Errorf("branch_status before the return: status %s, %d calls, %d tokens used; want active, %d calls, %d tokens (counted by the client)",
			st.Status, st.Calls, st.BudgetUsed, len(files), branchTokens)
	}
	if got := st.UsageByTool["fs/read_text_file"]; got != branchTokens {
		t.Errorf("usage_by_tool fs/read_text_file = %d, want %d (usage %v)", got, branchTokens, st.UsageByTool)
	}

	branchTokens += modelTokens(t, c, sr) // the branch pays for the answer about it
	msg := "Read the ten files: package docs for fold, intercept, proxy, policy, upstreams and e2e, the fold timers, limits and batch code, and the Makefile. Nothing is broken."
	var rr foldReturned
	r = foldMust(ctx, t, p, "branch_return", map[string]any{"branch_id": cr.BranchID, "message": msg}, &rr)
	rootRaw = append(rootRaw, r.raw)
	if rr.Message != msg || rr.TokensUsed != branchTokens {
		t.Errorf("branch_return answer %+v: want success, the message as sent, tokens_used %d", rr, branchTokens)
	}

	rootTokens, answerTokens := 0, 0
	var rootText strings.Builder
	var parts []string
	for i, raw := range rootRaw {
		n := resultTokens(t, c, raw)
		parts = append(parts, fmt.Sprintf("%s answer %d tokens", []string{"branch_create", "branch_return"}[i], n))
		rootTokens += n
		answerTokens += n
		rootText.Write(raw)
		rootText.WriteString(flattenRaw(t, raw))
	}
	for _, n := range p.notes.all()[notesBefore:] {
		rootTokens += c.CountText(n.Method) + c.CountText(string(n.Params))
		rootText.WriteString(string(n.Params))
	}
	t.Logf("the branch received %d tokens in %d calls; the root received %d tokens (%s)", branchTokens, len(files), rootTokens, strings.Join(parts, ", "))
	if rootTokens >= 500 {
		t.Errorf("the root received %d tokens for the whole branch (%s; counted as the proxy counts a result: the text content plus the structuredContent JSON), want fewer than 500",
			rootTokens, strings.Join(parts, ", "))
	}
	root := rootText.String()
	for _, f := range files {
		lines := distinctiveLines(contents[f], 3)
		if len(lines) == 0 {
			t.Fatalf("%s has no distinctive line to look for", f)
		}
		for _, l := range lines {
			if !strings.Contains(strings.Join(inBranch, "\n"), l) {
				t.Errorf("the branch never received %q of %s: the check below would prove nothing", l, f)
			}
			if strings.Contains(root, l) {
				t.Errorf("the root received a line of %s: %q", f, l)
			}
		}
	}

	// The branch is closed and charged; the root paid for the answers
	// only (the status answers about the closed branch included).
	st = foldStatus(ctx, t, p, cr.BranchID)
	if st.Status != "returned" || st.BudgetUsed != branchTokens {
		t.Errorf("branch_status after the return: %s with %d tokens, want returned with %d", st.Status, st.BudgetUsed, branchTokens)
	}
	// The root paid exactly for the two answers it received.
	tree := foldSessionTree(ctx, t, p)
	if tree.Tree.BudgetUsed != answerTokens+tree.Tree.UsageByTool["foldproxy/branch_status"] || tree.Tree.UsageByTool["foldproxy/branch_create"]+tree.Tree.UsageByTool["foldproxy/branch_return"] != answerTokens {
		t.Errorf("the root was charged %d tokens (usage %v); want %d, the create and return answers it received", tree.Tree.BudgetUsed, tree.Tree.UsageByTool, answerTokens)
	}
}

// TestFoldReplayBudgets replays recorded trajectories, each in its own
// branch with a small budget: the tokens a branch receives never pass its
// budget and equal what branch_status reports; every cut names a handle
// whose pages give back the rest byte for byte; a closed branch refuses
// further calls.
func TestFoldReplayBudgets(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	c := foldCounter(t)
	trajs := loadTrajectories(t)
	cfg := foldProxyConfig(t, map[string]any{"replay": replayEntry(t)}, map[string]any{
		"createsPerMinute": 1000, "defaultTimeout": "60s", "recallPageTokens": 512,
		"maxActivePerSession": 50,
	}, true)
	p := startFoldProxy(ctx, t, cfg, "replay__run", "replay__emit")

	root := foldSessionTree(ctx, t, p).Tree.BranchID
	// Small budgets too: a branch ends within a few results, close to its
	// notice reserve.
	budgets := []int{300, 500, 800, 1200, 2000, 70, 120}
	const branches = 14
	cuts, multiPage, forced, refused := 0, 0, 0, 0
	for i := range branches {
		tr := trajs[(i*5)%len(trajs)]
		budget := budgets[i%len(budgets)]
		t.Run(fmt.Sprintf("%s/budget-%d", tr.ID, budget), func(t *testing.T) {
			var cr foldCreated
			foldMust(ctx, t, p, "branch_create", map[string]any{
				"description": "replay " + tr.ID, "budget": budget, "parent_branch_id": root,
				"inject_memories": false, // the client counts what the branch receives from the replay only
			}, &cr)
			used := 0
			closed := false
			for step := range tr.Steps {
				if closed {
					break
				}
				want := tr.Steps[step].Output
				r := foldCall(ctx, t, p, "replay__run", map[string]any{"trajectory": tr.ID, "step": step, "branch_id": cr.BranchID})
				if r.isError {
					// The last resort, when the branch's status answers took
					// it below even the shortest notice: the result is
					// refused with an error that says why and names the
					// handle keeping all of it, and the branch ends.
					m := cutHandleRE.FindStringSubmatch(r.text())
					if m == nil || !strings.Contains(r.text(), "fewer than a cut notice needs") || !strings.Contains(r.text(), "force-returned") {
						t.Fatalf("step %d: refused while the branch is open, without saying why: %s", step, r.text())
					}
					if rest, _ := recallAll(ctx, t, p, m[1]); string(rest) != want {
						t.Errorf("step %d: the refused result's handle holds %d bytes, want the step's %d", step, len(rest), len(want))
					}
					if st := foldStatus(ctx, t, p, cr.BranchID); st.Status != "forced" || st.BudgetUsed != used {
						t.Errorf("step %d: after the refusal the branch is %s with %d used, want forced with %d", step, st.Status, st.BudgetUsed, used)
					}
					refused++
					forced++
					closed = true
					break
				}
				n := resultTokens(t, c, r.raw)
				used += n
				if used > budget {
					t.Errorf("step %d: the branch has received %d tokens, over its budget of %d", step, used, budget)
				}
				var body, notices []string
				for _, s := range r.texts {
					if isNotice(s) {
						notices = append(notices, s)
					} else {
						body = append(body, s)
					}
				}
				delivered := strings.Join(body, "")
				var handle string
				for _, s := range notices {
					if m := cutHandleRE.FindStringSubmatch(s); m != nil {
						handle = m[1]
					}
				}
				var st foldView
				sr := foldMust(ctx, t, p, "branch_status", map[string]any{"branch_id": cr.BranchID}, &st)
				if st.BudgetUsed != used {
					t.Errorf("step %d: branch_status budget_used %d, the client counted %d", step, st.BudgetUsed, used)
				}
				if st.Status == "active" { // the branch pays for the answer, up to what it has left
					used += min(modelTokens(t, c, sr), budget-used)
				}
				wasCut := len(st.Cuts) > 0 // a cut closes the branch: it is this step's
				switch {
				case handle != "":
					cuts++
					if !slices.Contains(st.Cuts, handle) {
						t.Errorf("step %d: the notice's handle %s is not among the branch's cuts %v", step, handle, st.Cuts)
					}
					rest, pages := recallAll(ctx, t, p, handle)
					if pages > 1 {
						multiPage++
					}
					if got := delivered + string(rest); got != want {
						t.Errorf("step %d: delivered (%d bytes) + recalled (%d bytes) differs from the step's output (%d bytes)\nfirst difference at byte %d",
							step, len(delivered), len(rest), len(want), firstDiff(got, want))
					}
					if len(body) > 1 {
						t.Errorf("step %d: a cut single-text result came back as %d text blocks", step, len(body))
					}
				case wasCut:
					// Never a silent result: a cut always names its handle.
					t.Errorf("step %d: the result was cut (branch cuts %v) but no notice names a handle; notices %q", step, st.Cuts, notices)
				default:
					if delivered == "" && want != "" && len(notices) == 0 {
						t.Errorf("step %d: an empty result without a notice", step)
					}
					if delivered != want {
						t.Errorf("step %d: an uncut result differs from the step's output (%d vs %d bytes, first difference at %d)",
							step, len(delivered), len(want), firstDiff(delivered, want))
					}
				}
				if st.Status != "active" {
					closed = true
					forced++
					if st.Status != "forced" || st.Reason != "budget exhausted" {
						t.Errorf("step %d: branch closed as %s (%s), want forced (budget exhausted)", step, st.Status, st.Reason)
					}
					if handle == "" && !wasCut && st.BudgetUsed != st.BudgetTotal {
						t.Errorf("step %d: branch forced without a cut at %d of %d tokens", step, st.BudgetUsed, st.BudgetTotal)
					}
				} else if handle != "" {
					t.Errorf("step %d: a result was cut but the branch is still %s", step, st.Status)
				}
			}
			if !closed {
				foldMust(ctx, t, p, "branch_return", map[string]any{"branch_id": cr.BranchID, "message": "replayed " + tr.ID}, nil)
				return
			}
			// A call after the forced return is refused, clearly, and the
			// upstream is not called.
			r, err := foldCallRaw(ctx, p, "replay__run", map[string]any{"trajectory": tr.ID, "step": 0, "branch_id": cr.BranchID})
			text := ""
			if err != nil {
				text = err.Error()
			} else {
				text = r.text()
			}
			if err == nil && !r.isError {
				t.Fatalf("a call to the force-returned branch was answered: %s", truncate(text, 300))
			}
			for _, want := range []string{"ErrBranchClosed", cr.BranchID, "budget exhausted", "parent"} {
				if !strings.Contains(text, want) {
					t.Errorf("the refusal %q does not mention %q", text, want)
				}
			}
			if st := foldStatus(ctx, t, p, cr.BranchID); st.BudgetUsed != used || st.BudgetUsed > budget {
				t.Errorf("after the refused call: budget_used %d, want %d (at most %d)", st.BudgetUsed, used, budget)
			}
		})
	}
	t.Logf("%d branches: %d forced, %d cut results, %d refused results, %d recalled over several pages", branches, forced, cuts, refused, multiPage)
	if cuts == 0 || forced == 0 || multiPage == 0 {
		t.Errorf("the replay did not exercise the limits: %d cuts, %d forced returns, %d multi-page recalls", cuts, forced, multiPage)
	}
}

// firstDiff returns the index of the first byte where a and b differ.
func firstDiff(a, b string) int {
	for i := 0; i < min(len(a), len(b)); i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestFoldNesting: branches nest to depth 3, depth 4 is refused, and
// returning a parent force-returns its active children deepest first.
func TestFoldNesting(t *testing.T) {
	ctx := testContext(t, 90*time.Second)
	cfg := foldProxyConfig(t, map[string]any{"replay": replayEntry(t)}, map[string]any{
		"createsPerMinute": 100, "defaultTimeout": "60s",
	}, false)
	p := startFoldProxy(ctx, t, cfg, "replay__run", "replay__emit")

	var ids []string
	parent := ""
	for depth := 1; depth <= 3; depth++ {
		args := map[string]any{"description": fmt.Sprintf("level %d", depth), "budget": 4000 - depth*1000}
		if depth == 2 {
			args["parent_branch_id"] = parent // explicit; the others default to the innermost
		}
		var cr foldCreated
		foldMust(ctx, t, p, "branch_create", args, &cr)
		wantParent := parent
		if depth == 1 {
			wantParent = foldSessionTree(ctx, t, p).Tree.BranchID
		}
		if st := foldStatus(ctx, t, p, cr.BranchID); cr.Depth != depth || st.Parent != wantParent {
			t.Fatalf("depth %d: created %+v under %s, want depth %d under %s", depth, cr, st.Parent, depth, wantParent)
		}
		// A call without branch_id goes to the innermost branch.
		if r := foldCall(ctx, t, p, "replay__emit", map[string]any{"bytes": 100 * depth}); r.isError {
			t.Fatalf("emit at depth %d: %s", depth, r.text())
		}
		ids = append(ids, cr.BranchID)
		parent = cr.BranchID
	}
	r := foldCall(ctx, t, p, "branch_create", map[string]any{"description": "level 4", "budget": 100})
	if !r.isError || !strings.Contains(r.text(), "ErrMaxDepthExceeded") || !strings.Contains(r.text(), "depth 4") {
		t.Errorf("a branch at depth 4: %q (isError %v), want an ErrMaxDepthExceeded refusal naming depth 4", r.text(), r.isError)
	}
	tree := foldSessionTree(ctx, t, p)
	if tree.ActiveBranches != 3 || tree.Innermost != ids[2] {
		t.Errorf("tree: %d active, innermost %s; want 3 active, innermost %s", tree.ActiveBranches, tree.Innermost, ids[2])
	}
	for i, id := range ids {
		st := foldStatus(ctx, t, p, id)
		if st.UsageByTool["replay/emit"] == 0 || st.Calls != 1+len(st.UsageByTool)-1 && st.UsageByTool["foldproxy/branch_status"] == 0 {
			t.Errorf("branch %d (%s): %d calls, usage %v; want its own emit call", i+1, id, st.Calls, st.UsageByTool)
		}
	}

	// Returning the depth-1 branch force-returns depth 3, then depth 2.
	var rr foldReturned
	foldMust(ctx, t, p, "branch_return", map[string]any{"branch_id": ids[0], "message": "done at the top"}, &rr)
	if want := []string{ids[2], ids[1]}; !slices.Equal(rr.ChildrenForceReturned, want) {
		t.Errorf("children_force_returned = %v, want deepest first %v", rr.ChildrenForceReturned, want)
	}
	for _, id := range ids[1:] {
		st := foldStatus(ctx, t, p, id)
		if st.Status != "forced" || st.Reason != "parent returning" || st.Summary == "" {
			t.Errorf("child %s after its ancestor returned: %s (%s), summary %q; want forced, parent returning, a summary", id, st.Status, st.Reason, st.Summary)
		}
	}
	if st := foldStatus(ctx, t, p, ids[0]); st.Status != "returned" {
		t.Errorf("the returned branch is %s", st.Status)
	}
	// The next call is the root's again.
	if r := foldCall(ctx, t, p, "replay__emit", map[string]any{"bytes": 10}); r.isError {
		t.Errorf("a call after every branch closed: %s", r.text())
	}
	if tree := foldSessionTree(ctx, t, p); tree.ActiveBranches != 0 || tree.Innermost != tree.Tree.BranchID {
		t.Errorf("after the return: %d active, innermost %s; want none, the root", tree.ActiveBranches, tree.Innermost)
	}
}

// TestFoldParallelAndDependsOn: two sub-agents work in parallel on one
// connection, each passing its branch_id, and each branch is charged its
// own calls only; a branch created with depends_on waits for the other
// branch and receives its message and return value.
func TestFoldParallelAndDependsOn(t *testing.T) {
	ctx := testContext(t, 90*time.Second)
	c := foldCounter(t)
	cfg := foldProxyConfig(t, map[string]any{"replay": replayEntry(t)}, map[string]any{
		"createsPerMinute": 100, "defaultTimeout": "60s", "dependsOnWait": "30s",
	}, false)
	p := startFoldProxy(ctx, t, cfg, "replay__run", "replay__emit")

	type worker struct {
		id      string
		kind    string
		bytes   int
		calls   int
		tokens  int
		errText string
	}
	workers := []*worker{{kind: "text", bytes: 700, calls: 6}, {kind: "log", bytes: 2300, calls: 4}}
	for i, w := range workers {
		var cr foldCreated
		foldMust(ctx, t, p, "branch_create", map[string]any{
			"description": fmt.Sprintf("sub-agent %d", i), "budget": 16000, "parent_branch_id": foldSessionTree(ctx, t, p).Tree.BranchID,
		}, &cr)
		w.id = cr.BranchID
	}
	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Go(func() {
			for range w.calls {
				r, err := foldCallRaw(ctx, p, "replay__emit", map[string]any{"bytes": w.bytes, "kind": w.kind, "branch_id": w.id})
				if err != nil || r.isError {
					w.errText = fmt.Sprintf("%v %s", err, r.text())
					return
				}
				n, _, err := c.CountResult("tools/call", r.raw, -1)
				if err != nil {
					w.errText = err.Error()
					return
				}
				w.tokens += n
			}
		})
	}
	wg.Wait()
	for i, w := range workers {
		if w.errText != "" {
			t.Fatalf("sub-agent %d: %s", i, w.errText)
		}
		st := foldStatus(ctx, t, p, w.id)
		// Besides its calls, a branch pays for the branch_status answers
		// about it (the tree answer goes to the innermost branch).
		status := st.UsageByTool["foldproxy/branch_status"]
		if st.UsageByTool["replay/emit"] != w.tokens || st.BudgetUsed != w.tokens+status || len(st.UsageByTool) > 2 {
			t.Errorf("sub-agent %d (%s): branch_status says %d calls, %d tokens (usage %v); it made %d calls and received %d tokens",
				i, w.id, st.Calls, st.BudgetUsed, st.UsageByTool, w.calls, w.tokens)
		}
	}
	if root := foldSessionTree(ctx, t, p).Tree; root.UsageByTool["replay/emit"] != 0 || root.UsageByUpstream["replay"] != 0 {
		t.Errorf("the root was charged the sub-agents' work: usage %v", root.UsageByTool)
	}

	// depends_on: the second branch's creation waits for the first's return.
	type created struct {
		reply foldReply
		err   error
	}
	done := make(chan created, 1)
	go func() {
		r, err := foldCallRaw(ctx, p, "branch_create", map[string]any{
			"description": "integrate the findings", "depends_on": []string{workers[0].id},
		})
		done <- created{r, err}
	}()
	// Give the dependent creation time to reach the proxy and wait; it
	// must not finish while the first branch is active.
	select {
	case got := <-done:
		t.Fatalf("branch_create with depends_on on an active branch finished at once: %v %s", got.err, got.reply.text())
	case <-time.After(time.Second):
	}
	const msg, value = "the emitter writes deterministic text", `{"lines":42}`
	foldMust(ctx, t, p, "branch_return", map[string]any{"branch_id": workers[0].id, "message": msg, "return_value": json.RawMessage(value)}, nil)
	var got created
	select {
	case got = <-done:
	case <-ctx.Done():
		t.Fatalf("branch_create with depends_on did not finish after its dependency returned")
	}
	if got.err != nil {
		t.Fatalf("branch_create with depends_on: %v", got.err)
	}
	var cr foldCreated
	got.reply.decode(t, &cr)
	if len(cr.Dependencies) != 1 {
		t.Fatalf("dependencies = %+v, want the one branch", cr.Dependencies)
	}
	if d := cr.Dependencies[0]; d.BranchID != workers[0].id || d.Status != "returned" || d.Message != msg || string(d.ReturnValue) != value {
		t.Errorf("dependency = %+v, want %s returned with message %q and return value %q", d, workers[0].id, msg, value)
	}
	if st := foldStatus(ctx, t, p, cr.BranchID); !slices.Equal(st.DependsOn, []string{workers[0].id}) {
		t.Errorf("depends_on of the new branch = %v", st.DependsOn)
	}
}

// TestFoldRateLimit: with the default createsPerMinute of 5, the sixth
// creation within a minute is refused with ErrRateLimited, saying when to
// retry.
func TestFoldRateLimit(t *testing.T) {
	ctx := testContext(t, 60*time.Second)
	cfg := foldProxyConfig(t, map[string]any{"replay": replayEntry(t)}, map[string]any{"defaultTimeout": "60s"}, false)
	p := startFoldProxy(ctx, t, cfg, "replay__run", "replay__emit")
	for i := range 5 {
		var cr foldCreated
		foldMust(ctx, t, p, "branch_create", map[string]any{"description": fmt.Sprintf("branch %d", i+1), "budget": 100}, &cr)
		// Returning keeps the active count low: only the rate limits.
		foldMust(ctx, t, p, "branch_return", map[string]any{"branch_id": cr.BranchID, "message": "ok"}, nil)
	}
	r := foldCall(ctx, t, p, "branch_create", map[string]any{"description": "one too many", "budget": 100})
	if !r.isError || !strings.Contains(r.text(), "ErrRateLimited") {
		t.Fatalf("the sixth branch_create within a minute: %q (isError %v), want an ErrRateLimited refusal", r.text(), r.isError)
	}
	if !regexp.MustCompile(`retry in \d+(m\d+)?s`).MatchString(r.text()) {
		t.Errorf("the refusal %q does not say when to retry", r.text())
	}
	if tree := foldSessionTree(ctx, t, p); len(tree.Tree.Children) != 5 {
		t.Errorf("the session has %d branches, want the 5 allowed", len(tree.Tree.Children))
	}
}
