package e2e

// The model wire end to end: the real Claude Code CLI, headless, with
// foldproxy as its model endpoint (ANTHROPIC_BASE_URL) and as its MCP
// server, in front of the scripted model server (servers/model), the one
// stand-in allowed on the model wire. The script plays the model's side of
// a session with two branches; the test asserts on what the model received.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// modelRecord is one request as the scripted model server recorded it
// (servers/model's Record).
type modelRecord struct {
	Seq     int64               `json:"seq"`
	Method  string              `json:"method"`
	Path    string              `json:"path"`
	Query   string              `json:"query"`
	Headers map[string][]string `json:"headers"`
	Body    []byte              `json:"body"`
	Turn    string              `json:"turn"`
	Invalid string              `json:"invalid"`
}

func (r modelRecord) header(k string) string {
	for hk, v := range r.Headers {
		if strings.EqualFold(hk, k) && len(v) > 0 {
			return v[0]
		}
	}
	return ""
}

// modelServer is a running scripted model server.
type modelServer struct {
	url    string // http://127.0.0.1:PORT
	record string // its record file
}

// startModelServer runs servers/model with script (encoded as JSON) on a
// free loopback port, with extraArgs added to its flags (-tls-cert...).
func startModelServer(t testing.TB, script any, extraArgs ...string) *modelServer {
	t.Helper()
	dir := t.TempDir()
	b, err := json.MarshalIndent(script, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	scriptPath := filepath.Join(dir, "script.json")
	if err := os.WriteFile(scriptPath, b, 0o600); err != nil {
		t.Fatal(err)
	}
	rec := filepath.Join(dir, "requests.jsonl")
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	p := startProcess(t, "model server", exec.Command(helperBin(t, "model"), append([]string{"-listen", addr, "-script", scriptPath, "-record", rec}, extraArgs...)...))
	waitListening(testContext(t, 30*time.Second), t, p, addr)
	return &modelServer{url: "http://" + addr, record: rec}
}

// records reads every request the server has recorded so far.
func (m *modelServer) records(t testing.TB) []modelRecord {
	t.Helper()
	f, err := os.Open(m.record)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []modelRecord
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<20), 256<<20)
	for sc.Scan() {
		var r modelRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("record file %s: %v", m.record, err)
		}
		out = append(out, r)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// claudeBin is Claude Code's native binary from e2e/node_modules.
func claudeBin(t testing.TB) string {
	t.Helper()
	return npmScript(t, "@anthropic-ai/claude-code-linux-x64", "claude")
}

// runClaude runs "claude -p prompt --output-format json" in dir with
// foldproxy as its model endpoint and MCP server, HOME an empty folder and
// nothing of the caller's environment but PATH, and returns its stdout.
func runClaude(ctx context.Context, t testing.TB, dir, baseURL, mcpURL, prompt string) []byte {
	t.Helper()
	return runClaudeToken(ctx, t, dir, baseURL, mcpURL, "", prompt)
}

// runClaudeToken is runClaude with foldproxy's token, when not "": in the
// MCP entry's Authorization header, and in X-Foldproxy-Token on model
// requests (ANTHROPIC_CUSTOM_HEADERS), as the README says.
func runClaudeToken(ctx context.Context, t testing.TB, dir, baseURL, mcpURL, token, prompt string) []byte {
	t.Helper()
	entry := map[string]any{"type": "http", "url": mcpURL}
	if token != "" {
		entry["headers"] = map[string]string{"Authorization": "Bearer " + token}
	}
	cfg, err := json.Marshal(map[string]any{"mcpServers": map[string]any{"foldproxy": entry}})
	if err != nil {
		t.Fatal(err)
	}
	mcpConfig := writeFile(t, "claude-mcp.json", cfg)
	cmd := exec.CommandContext(ctx, claudeBin(t), "-p", prompt, "--output-format", "json",
		"--mcp-config", mcpConfig, "--strict-mcp-config",
		// As root, --dangerously-skip-permissions is refused: allow the
		// tools the script calls instead.
		"--allowedTools", "Read,Bash,mcp__foldproxy")
	cmd.Dir = dir
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + t.TempDir(),
		"ANTHROPIC_BASE_URL=" + baseURL,
		"ANTHROPIC_API_KEY=dummy",
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
		"DISABLE_AUTOUPDATER=1",
		// claude -p connects its MCP servers in the background and may
		// send its first request before they are connected; the test
		// waits for that event rather than racing it.
		"MCP_CONNECTION_NONBLOCKING=false",
		// and waits up to 60 s for it (the most it honours; 30 s by
		// default), which a loaded machine starting node can need.
		"MCP_TIMEOUT=60000",
	}
	if token != "" {
		cmd.Env = append(cmd.Env, "ANTHROPIC_CUSTOM_HEADERS=X-Foldproxy-Token: "+token)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	ownProcessGroup(cmd)
	err = cmd.Run()
	_ = killGroup(cmd) // whatever it left behind
	if err != nil {
		t.Fatalf("claude -p: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.Bytes(), stderr.Bytes())
	}
	return stdout.Bytes()
}

// startFoldproxyModel runs foldproxy on a free loopback port with the
// given mcpServers and settings (model.anthropicURL pointing at the
// scripted model server), its state in stateDir, and returns its base URL.
func startFoldproxyModel(t testing.TB, servers map[string]any, settings map[string]any, stateDir string) string {
	t.Helper()
	cfg := writeConfig(t, servers, settings)
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	p := startProcess(t, "foldproxy --listen "+addr, exec.Command(proxyBin(t), "serve", "--config", cfg, "--listen", addr, "--state", stateDir))
	waitListening(testContext(t, 60*time.Second), t, p, addr)
	return "http://" + addr
}

// anthropicRequest is a recorded Messages request, split into its parts
// with their original bytes.
type anthropicRequest struct {
	rec      modelRecord
	system   json.RawMessage
	tools    json.RawMessage
	messages []json.RawMessage
}

func parseAnthropic(t testing.TB, r modelRecord) anthropicRequest {
	t.Helper()
	var top struct {
		System   json.RawMessage   `json:"system"`
		Tools    json.RawMessage   `json:"tools"`
		Messages []json.RawMessage `json:"messages"`
	}
	if err := json.Unmarshal(r.Body, &top); err != nil {
		t.Fatalf("request %d (%s): %v", r.Seq, r.Turn, err)
	}
	return anthropicRequest{rec: r, system: top.System, tools: top.Tools, messages: top.Messages}
}

// cacheControl matches a cache_control marker as Claude Code writes it.
// Claude Code moves its message breakpoint to the newest message on every
// turn; the marker is not part of the cached content, so the prefix
// comparisons leave it out and compare every other byte.
var cacheControl = regexp.MustCompile(`,"cache_control":\{[^{}]*\}`)

func withoutCacheControl(b []byte) string { return cacheControl.ReplaceAllString(string(b), "") }

// lastBreakpoint returns the index of the message holding the request's
// last cache_control breakpoint, -1 when its messages hold none.
func (a anthropicRequest) lastBreakpoint() int {
	for i := len(a.messages) - 1; i >= 0; i-- {
		if cacheControl.Match(a.messages[i]) {
			return i
		}
	}
	return -1
}

// prefixHit reports whether cur repeats prev's cached prefix byte for byte
// (cache_control markers aside): tools, system, and every message up to and
// including the one holding prev's last breakpoint. That is what decides
// whether the API reads cur's prompt from the cache prev wrote.
func prefixHit(prev, cur anthropicRequest) bool {
	if withoutCacheControl(prev.tools) != withoutCacheControl(cur.tools) ||
		withoutCacheControl(prev.system) != withoutCacheControl(cur.system) {
		return false
	}
	bp := prev.lastBreakpoint()
	if bp >= len(cur.messages) {
		return false
	}
	for i := 0; i <= bp; i++ {
		if withoutCacheControl(prev.messages[i]) != withoutCacheControl(cur.messages[i]) {
			return false
		}
	}
	return true
}

// messageIndex returns the index of the first message containing s, -1 if none.
func (a anthropicRequest) messageIndex(s string) int {
	for i, m := range a.messages {
		if bytes.Contains(m, []byte(s)) {
			return i
		}
	}
	return -1
}

// toolResultText returns the text of the tool_result answering id, and
// whether there is one.
func (a anthropicRequest) toolResultText(t testing.TB, id string) (string, bool) {
	t.Helper()
	for _, raw := range a.messages {
		var m struct {
			Content json.RawMessage `json:"content"`
		}
		if json.Unmarshal(raw, &m) != nil {
			continue
		}
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
			var parts []struct {
				Text string `json:"text"`
			}
			if err := json.Unmarshal(b.Content, &parts); err != nil {
				t.Fatalf("tool_result %s: content %s", id, b.Content)
			}
			var sb strings.Builder
			for _, p := range parts {
				sb.WriteString(p.Text)
			}
			return sb.String(), true
		}
	}
	return "", false
}

func toolUse(id, name string, input map[string]any) map[string]any {
	return map[string]any{"type": "tool_use", "id": id, "name": name, "input": input}
}

// TestClaudeCodeFoldsOnTheModelWire runs a two-branch session of the real
// Claude Code through foldproxy and checks what the model received:
//   - after branch_return, none of the branch's tool output (built-in Read
//     and Bash, an MCP tool of server-filesystem, branch_status) is in the
//     request, and the return message is, in place of branch_create's result;
//   - every request repeats the previous one's messages up to its newest
//     branch point byte for byte (cache_control markers aside), and the
//     cache prefix hit rate misses only where a fold happened;
//   - every request is valid (the model server checks as the API does);
//   - the streamed answer reached Claude Code intact;
//   - the built-in results were charged to the branch (branch_status), and
//     a Read overrunning a small budget was cut with a recall handle and
//     force-returned its branch, then folded too;
//   - credentials and headers reached the model untouched.
func TestClaudeCodeFoldsOnTheModelWire(t *testing.T) {
	ctx := testContext(t, 90*time.Second)
	work := t.TempDir()
	writeWork := func(name, text string) string {
		p := filepath.Join(work, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	small := writeWork("small.txt", "alpha file READMARK-1\nline two\n")
	bashFile := writeWork("b.txt", "bash file BASHMARK-2\n")
	mcpFile := writeWork("m.txt", "mcp file MCPMARK-3\n")
	var big strings.Builder
	for i := range 600 {
		fmt.Fprintf(&big, "line %04d of the big file BIGMARK with some padding words to make it larger\n", i)
	}
	bigFile := writeWork("big.txt", big.String())

	const (
		summary = "SUMMARY-OK the three files hold markers 1, 2 and 3"
		final   = "All done: FINAL-ANSWER ✓ — ünïcödé, \"quotes\", a tab\tand\nsecond line."
	)
	script := map[string]any{"turns": []map[string]any{
		{"name": "create", "match": []string{"PROMPT-GO"}, "content": []any{
			map[string]any{"type": "text", "text": "I will look at the files in a branch."},
			toolUse("toolu_e2e_01", "mcp__foldproxy__branch_create", map[string]any{"description": "inspect the files", "budget": 6000})}},
		{"name": "read", "match": []string{"toolu_e2e_01"}, "content": []any{
			toolUse("toolu_e2e_02", "Read", map[string]any{"file_path": small})}},
		{"name": "bash", "match": []string{"toolu_e2e_02"}, "content": []any{
			toolUse("toolu_e2e_03", "Bash", map[string]any{"command": "cat " + bashFile, "description": "show b.txt"})}},
		{"name": "mcp", "match": []string{"toolu_e2e_03"}, "content": []any{
			toolUse("toolu_e2e_04", "mcp__foldproxy__fs__read_text_file", map[string]any{"path": mcpFile})}},
		{"name": "status", "match": []string{"toolu_e2e_04"}, "content": []any{
			toolUse("toolu_e2e_05", "mcp__foldproxy__branch_status", map[string]any{})}},
		{"name": "return", "match": []string{"toolu_e2e_05"}, "content": []any{
			toolUse("toolu_e2e_06", "mcp__foldproxy__branch_return", map[string]any{"message": summary})}},
		{"name": "create2", "match": []string{"toolu_e2e_06"}, "content": []any{
			toolUse("toolu_e2e_07", "mcp__foldproxy__branch_create", map[string]any{"description": "read the big file", "budget": 1000})}},
		// After the fold, the last message holds branch_create's result with
		// the return message in it: the summary selects the next turn.
		{"name": "create2", "match": []string{"toolu_e2e_01", summary}, "content": []any{
			toolUse("toolu_e2e_07", "mcp__foldproxy__branch_create", map[string]any{"description": "read the big file", "budget": 1000})}},
		{"name": "readbig", "match": []string{"toolu_e2e_07"}, "content": []any{
			toolUse("toolu_e2e_08", "Read", map[string]any{"file_path": bigFile})}},
		{"name": "status2", "match": []string{"toolu_e2e_08"}, "content": []any{
			toolUse("toolu_e2e_09", "mcp__foldproxy__branch_status", map[string]any{})}},
		{"name": "final", "match": []string{"toolu_e2e_09"}, "content": []any{
			map[string]any{"type": "text", "text": final}}},
	}}
	model := startModelServer(t, script)
	state := t.TempDir()
	base := startFoldproxyModel(t,
		map[string]any{"fs": stdioEntry(nodeBin(t), filesystemScript(t), work)},
		map[string]any{"model": map[string]any{"anthropicURL": model.url}}, state)

	out := runClaude(ctx, t, work, base, base+"/mcp", "PROMPT-GO: inspect the files")
	var res struct {
		Type    string `json:"type"`
		Subtype string `json:"subtype"`
		IsError bool   `json:"is_error"`
		Result  string `json:"result"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("claude's stdout is not its JSON result: %v\n%s", err, out)
	}
	if res.IsError || res.Subtype != "success" || res.Result != final {
		t.Errorf("claude's result = %+v\nwant the streamed answer intact: %q", res, final)
	}

	recs := model.records(t)
	var reqs []anthropicRequest
	byTurn := map[string]anthropicRequest{}
	var turns []string
	session := ""
	for _, r := range recs {
		if r.Invalid != "" {
			t.Errorf("request %d %s %s was invalid: %s", r.Seq, r.Method, r.Path, r.Invalid)
		}
		if r.Path != "/v1/messages" {
			t.Logf("request %d: %s %s?%s (%s)", r.Seq, r.Method, r.Path, r.Query, r.Turn)
			continue
		}
		if r.header("X-Api-Key") != "dummy" || r.header("Anthropic-Version") == "" ||
			!strings.Contains(r.header("Anthropic-Beta"), "prompt-caching") || r.header("X-Foldproxy-Token") != "" {
			t.Errorf("request %d: headers not passed through untouched: %v", r.Seq, r.Headers)
		}
		if s := r.header("X-Claude-Code-Session-Id"); session == "" {
			session = s
		} else if s != session {
			t.Errorf("request %d: session id %q, want %q", r.Seq, s, session)
		}
		if r.Turn == "fallback" {
			t.Logf("request %d: a side request answered by the fallback", r.Seq)
			continue
		}
		a := parseAnthropic(t, r)
		reqs = append(reqs, a)
		turns = append(turns, r.Turn)
		byTurn[r.Turn] = a
	}
	wantTurns := []string{"create", "read", "bash", "mcp", "status", "return", "create2", "readbig", "status2", "final"}
	if strings.Join(turns, ",") != strings.Join(wantTurns, ",") {
		t.Fatalf("the model played %v, want %v", turns, wantTurns)
	}

	// While branch 1 is open, its tool output reaches the model (so the
	// absence checks below can fail).
	open := byTurn["return"]
	for id, marker := range map[string]string{"toolu_e2e_02": "READMARK-1", "toolu_e2e_03": "BASHMARK-2", "toolu_e2e_04": "MCPMARK-3"} {
		if text, ok := open.toolResultText(t, id); !ok || !strings.Contains(text, marker) {
			t.Errorf("before the fold, the result of %s = %q, %v: want it to hold %s", id, text, ok, marker)
		}
	}
	// Built-in results are charged: branch_status inside the branch shows
	// the Read and Bash results on its budget (the MCP read only once).
	statusText, _ := open.toolResultText(t, "toolu_e2e_05")
	checkCharged(t, statusText)

	// After branch_return, the span is folded.
	for _, turn := range []string{"create2", "readbig", "status2", "final"} {
		a := byTurn[turn]
		body := string(a.rec.Body)
		for _, gone := range []string{"READMARK-1", "BASHMARK-2", "MCPMARK-3", "toolu_e2e_02", "toolu_e2e_03", "toolu_e2e_04", "toolu_e2e_05", "toolu_e2e_06"} {
			if strings.Contains(body, gone) {
				t.Errorf("request %s: %q is still in the conversation after the fold", turn, gone)
			}
		}
		if text, ok := a.toolResultText(t, "toolu_e2e_01"); !ok || !strings.Contains(text, summary) {
			t.Errorf("request %s: branch_create's result = %q, %v: want the return message %q", turn, text, ok, summary)
		}
	}

	// The Read of the big file overran branch 2's budget: cut, with a
	// notice naming a recall handle, in the request that first held it.
	cut, ok := byTurn["status2"].toolResultText(t, "toolu_e2e_08")
	switch {
	case !ok:
		t.Error("request status2 lacks the big Read's result")
	case !strings.Contains(cut, "line 0000") || strings.Contains(cut, "line 0599") || len(cut) >= big.Len():
		t.Errorf("the big Read's result was not cut: %d bytes (the file has %d)", len(cut), big.Len())
	case !strings.Contains(cut, "[foldproxy]") || !strings.Contains(cut, "branch_recall"):
		t.Errorf("the cut result carries no notice with a recall handle: ...%s", cut[max(0, len(cut)-400):])
	}
	// ... and force-returned the branch: the main thread's status says so,
	// and the next request folds branch 2 as well.
	status2, _ := byTurn["final"].toolResultText(t, "toolu_e2e_09")
	if !strings.Contains(status2, `"forced"`) && !strings.Contains(status2, "force") {
		t.Errorf("branch_status after the cut does not show branch 2 force-returned:\n%s", status2)
	}
	if body := string(byTurn["final"].rec.Body); strings.Contains(body, "BIGMARK") || strings.Contains(body, "toolu_e2e_08") {
		t.Error("request final still holds the force-returned branch's Read")
	}

	// Prefix stability: each request repeats the previous one's messages
	// up to its newest branch point byte for byte.
	for i := 1; i < len(reqs); i++ {
		prev, cur := reqs[i-1], reqs[i]
		bp := max(prev.messageIndex(`"toolu_e2e_07","name"`), prev.messageIndex(`"toolu_e2e_01","name"`))
		for j := 0; j <= bp; j++ {
			if j >= len(cur.messages) || withoutCacheControl(prev.messages[j]) != withoutCacheControl(cur.messages[j]) {
				t.Errorf("request %s: message %d (before the branch point %d) differs from request %s's", turns[i], j, bp, turns[i-1])
				break
			}
		}
		if withoutCacheControl(prev.system) != withoutCacheControl(cur.system) || withoutCacheControl(prev.tools) != withoutCacheControl(cur.tools) {
			t.Errorf("request %s: system or tools differ from request %s's", turns[i], turns[i-1])
		}
	}
	// Cache prefix hit rate across the session: a miss only where a fold
	// took the span that held the previous breakpoint.
	hits, misses := 0, []string{}
	for i := 1; i < len(reqs); i++ {
		if prefixHit(reqs[i-1], reqs[i]) {
			hits++
		} else {
			misses = append(misses, turns[i])
		}
	}
	t.Logf("cache prefix hit rate: %d/%d = %.2f (misses at %v)", hits, len(reqs)-1, float64(hits)/float64(len(reqs)-1), misses)
	if strings.Join(misses, ",") != "create2,final" {
		t.Errorf("cache prefix misses at %v, want only at the two folds (create2, final)", misses)
	}

	// Metrics and audit: one record per model request the model answered,
	// the folds counted.
	modelCalls := 0
	for _, r := range recs {
		if strings.HasPrefix(r.Path, "/v1/messages") && r.Invalid == "" {
			modelCalls++
		}
	}
	// The front records a request once the answer is written, which may be
	// a moment after Claude Code has read it: wait for the count.
	want := fmt.Sprintf(`foldproxy_model_requests_total{dialect="anthropic",outcome="ok"} %d`, modelCalls)
	var page []byte
	for {
		resp, err := http.Get(base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		page, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(page), want) {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("/metrics lacks %s", want)
		case <-time.After(20 * time.Millisecond):
		}
	}
	if !regexp.MustCompile(`foldproxy_model_folded_branches_total\{dialect="anthropic"\} [1-9]`).Match(page) {
		t.Error("/metrics counts no folded branch")
	}
	audit, err := os.ReadFile(filepath.Join(state, "audit.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(audit), `"kind":"model"`); n < modelCalls {
		t.Errorf("the audit log holds %d model records, want at least %d", n, modelCalls)
	}
}

// checkCharged checks branch_status's answer inside branch 1: the built-in
// Read and Bash results are charged to it by the model wire, and the MCP
// read once, by the MCP wire, so that the branch's usage is exactly the
// sum of the three.
func checkCharged(t *testing.T, statusText string) {
	t.Helper()
	var st struct {
		Tree struct {
			Branches []struct {
				Description string         `json:"description"`
				BudgetUsed  int            `json:"budget_used"`
				UsageByTool map[string]int `json:"usage_by_tool"`
			} `json:"branches"`
		} `json:"tree"`
	}
	if err := json.Unmarshal([]byte(statusText), &st); err != nil || len(st.Tree.Branches) != 1 {
		t.Fatalf("branch_status answer is not the tree with one branch (%v):\n%s", err, statusText)
	}
	b := st.Tree.Branches[0]
	sum := 0
	for _, n := range b.UsageByTool {
		sum += n
	}
	if b.UsageByTool["model/Read"] <= 0 || b.UsageByTool["model/Bash"] <= 0 || b.UsageByTool["fs/read_text_file"] <= 0 || len(b.UsageByTool) != 3 || b.BudgetUsed != sum {
		t.Errorf("branch 1's usage = %d by tool %v: want the Read and Bash results charged on the model wire and the MCP read once, summing to the budget used\n%s",
			b.BudgetUsed, b.UsageByTool, statusText)
	}
}

// TestClaudeCodeWithFoldproxyToken: with foldproxy's own token configured,
// Claude Code reaches both fronts as the README says (the MCP entry's
// Authorization header, X-Foldproxy-Token on model requests), its API key
// still goes to the model, and foldproxy's token does not; a model request
// without the token is refused.
func TestClaudeCodeWithFoldproxyToken(t *testing.T) {
	ctx := testContext(t, 60*time.Second)
	const token = "fp-e2e-token-7c1d"
	script := map[string]any{"turns": []map[string]any{
		{"name": "status", "match": []string{"PROMPT-TOKEN"}, "content": []any{
			toolUse("toolu_tok_01", "mcp__foldproxy__branch_status", map[string]any{})}},
		{"name": "final", "match": []string{"toolu_tok_01"}, "content": []any{
			map[string]any{"type": "text", "text": "TOKEN-OK"}}},
	}}
	model := startModelServer(t, script)
	base := startFoldproxyModel(t, map[string]any{"replay": replayEntry(t)},
		map[string]any{"authToken": token, "model": map[string]any{"anthropicURL": model.url}}, t.TempDir())

	out := runClaudeToken(ctx, t, t.TempDir(), base, base+"/mcp", token, "PROMPT-TOKEN")
	var res struct {
		IsError bool   `json:"is_error"`
		Result  string `json:"result"`
	}
	if err := json.Unmarshal(out, &res); err != nil || res.IsError || res.Result != "TOKEN-OK" {
		t.Fatalf("claude's result %s (%v), want TOKEN-OK", out, err)
	}
	var turns []string
	for _, r := range model.records(t) {
		if r.Path != "/v1/messages" {
			continue
		}
		turns = append(turns, r.Turn)
		if r.header("X-Api-Key") != "dummy" || r.header("X-Foldproxy-Token") != "" || strings.Contains(string(r.Body), token) {
			t.Errorf("request %d: the API key did not pass or foldproxy's token leaked to the model: %v", r.Seq, r.Headers)
		}
		if r.Turn == "final" {
			if text, ok := parseAnthropic(t, r).toolResultText(t, "toolu_tok_01"); !ok || !strings.Contains(text, "root-") {
				t.Errorf("branch_status through the MCP front with the token: %q", text)
			}
		}
	}
	if strings.Join(turns, ",") != "status,final" {
		t.Errorf("the model played %v, want status, final", turns)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/messages", strings.NewReader(`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"x"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Api-Key", "dummy")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a model request without foldproxy's token: %d, want 401", resp.StatusCode)
	}
}
