package e2e

// Automatic folding with the real Claude Code CLI, headless: an agent that
// never calls a fold tool reads 32 files with its built-in Bash tool
// through foldproxy's model front (no MCP entry: the model wire alone), in
// front of the scripted model server. The model must receive stubs for the
// stale results, read one back with the recall tool foldproxy adds, get the
// original exactly, and Claude Code must get the final streamed answer
// intact.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// runClaudeModelOnly runs "claude -p prompt" in dir with foldproxy as its
// model endpoint and no MCP server.
func runClaudeModelOnly(ctx context.Context, t testing.TB, dir, baseURL, prompt string) []byte {
	t.Helper()
	cmd := exec.CommandContext(ctx, claudeBin(t), "-p", prompt, "--output-format", "json",
		"--strict-mcp-config", "--allowedTools", "Bash,Read")
	cmd.Dir = dir
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + t.TempDir(),
		"ANTHROPIC_BASE_URL=" + baseURL,
		"ANTHROPIC_API_KEY=dummy",
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
		"DISABLE_AUTOUPDATER=1",
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	ownProcessGroup(cmd)
	err := cmd.Run()
	_ = killGroup(cmd)
	if err != nil {
		t.Fatalf("claude -p: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.Bytes(), stderr.Bytes())
	}
	return stdout.Bytes()
}

var reStubHandle = regexp.MustCompile(`^\[foldproxy: folded Bash "[^"]*" \([0-9,]+ tokens(, [a-z]+)?\); branch_recall with handle "(af~[0-9]{18})"\]$`)

func TestClaudeCodeAutoFold(t *testing.T) {
	const files = 32
	ctx := testContext(t, 5*time.Minute)
	work := t.TempDir()
	for i := 1; i <= files; i++ {
		var b strings.Builder
		for l := 0; l < 40; l++ {
			fmt.Fprintf(&b, "file %02d line %02d: the quick brown fox jumps over the lazy dog %d times\n", i, l, i*l)
		}
		fmt.Fprintf(&b, "END-OF-FILE-%02d\n", i)
		if err := os.WriteFile(filepath.Join(work, fmt.Sprintf("f%02d.txt", i)), []byte(b.String()), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	const final = "All 32 files are read: FINAL-ANSWER-7d3 ✓"
	var turns []map[string]any
	bash := func(id, cmd string) map[string]any {
		return toolUse(id, "Bash", map[string]any{"command": cmd, "description": "show a file"})
	}
	turns = append(turns, map[string]any{"name": "step01", "match": []string{"Read the 32 files"},
		"content": []any{bash("toolu_af_01", "cat f01.txt")}})
	for i := 2; i <= files; i++ {
		turns = append(turns, map[string]any{"name": fmt.Sprintf("step%02d", i), "match": []string{fmt.Sprintf("END-OF-FILE-%02d", i-1)},
			"content": []any{bash(fmt.Sprintf("toolu_af_%02d", i), fmt.Sprintf("cat f%02d.txt", i))}})
	}
	// The model reads back the oldest stub it was given.
	turns = append(turns, map[string]any{"name": "recall", "match": []string{fmt.Sprintf("END-OF-FILE-%02d", files)},
		"capture": `branch_recall with handle \\"(af~[0-9]{18})\\"`,
		"content": []any{toolUse("toolu_af_recall", "branch_recall", map[string]any{"handle": "$CAPTURE"})}})
	turns = append(turns, map[string]any{"name": "final", "match": []string{"next_offset"},
		"content": []any{map[string]any{"type": "text", "text": final}}})
	model := startModelServer(t, map[string]any{"turns": turns})
	base := startFoldproxyModel(t, map[string]any{}, map[string]any{"model": map[string]any{"anthropicURL": model.url}}, t.TempDir())

	out := runClaudeModelOnly(ctx, t, work, base, "Read the 32 files, one at a time.")
	var res struct {
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

	byTurn := map[string]anthropicRequest{}
	var reqs []anthropicRequest
	for _, r := range model.records(t) {
		if r.Invalid != "" {
			t.Errorf("request %d %s was invalid: %s", r.Seq, r.Path, r.Invalid)
		}
		if r.Path != "/v1/messages" || r.Turn == "fallback" {
			continue
		}
		a := parseAnthropic(t, r)
		byTurn[r.Turn] = a
		reqs = append(reqs, a)
	}
	if len(reqs) != files+2 {
		var top map[string]json.RawMessage
		_ = json.Unmarshal(reqs[len(reqs)-1].rec.Body, &top)
		var keys []string
		for k, v := range top {
			if k != "messages" && k != "system" && k != "tools" {
				keys = append(keys, k+"="+string(v))
			} else {
				keys = append(keys, k)
			}
		}
		t.Fatalf("the model played %d turns, want %d; the last request's members: %v", len(reqs), files+2, keys)
	}
	if !strings.Contains(string(reqs[0].tools), `"name":"branch_recall"`) {
		t.Fatal("the first request lacks the recall tool foldproxy adds")
	}
	// What the model was shown of each file before any fold.
	shown := map[string]string{}
	for _, a := range reqs {
		for i := 1; i <= files; i++ {
			id := fmt.Sprintf("toolu_af_%02d", i)
			if text, ok := a.toolResultText(t, id); ok && !strings.HasPrefix(text, "[foldproxy:") {
				if _, seen := shown[id]; !seen {
					shown[id] = text
				}
			}
		}
	}
	// The request that recalls: stale results are stubs, the newest not.
	rec := byTurn["recall"]
	stubs := map[string]string{} // handle -> tool-use id
	for i := 1; i <= files; i++ {
		id := fmt.Sprintf("toolu_af_%02d", i)
		text, ok := rec.toolResultText(t, id)
		if !ok {
			t.Fatalf("no result of %s", id)
		}
		if m := reStubHandle.FindStringSubmatch(text); m != nil {
			stubs[m[2]] = id
			if i == files {
				t.Errorf("the newest result %s was folded", id)
			}
		} else if !strings.Contains(text, fmt.Sprintf("END-OF-FILE-%02d", i)) {
			t.Errorf("result %s is neither whole nor a stub: %.100q", id, text)
		}
	}
	if len(stubs) < files/2 {
		t.Errorf("%d of %d results folded by the last request: want the stale ones", len(stubs), files)
	}
	// The recall answers the call with the original, exactly.
	fin := byTurn["final"]
	page, ok := fin.toolResultText(t, "toolu_af_recall")
	if !ok {
		t.Fatal("no result of the recall call")
	}
	var got struct {
		Handle string `json:"handle"`
		Text   string `json:"text"`
		Done   bool   `json:"done"`
	}
	if err := json.Unmarshal([]byte(page), &got); err != nil {
		t.Fatalf("the recall's answer is not a page: %v: %.200q", err, page)
	}
	id := stubs[got.Handle]
	if id == "" || !got.Done || got.Text != shown[id] || shown[id] == "" {
		t.Fatalf("the recall of %s (%s) read %.120q, want what the model was shown: %.120q", got.Handle, id, got.Text, shown[id])
	}
	if strings.Contains(string(fin.rec.Body), "No such tool available") {
		t.Error("Claude Code's own error for the recall call reached the model")
	}
	// Folds come in batches; between them the cached prefix holds.
	hits, moves := 0, 0
	for i := 1; i < len(reqs); i++ {
		if prefixHit(reqs[i-1], reqs[i]) {
			hits++
		} else {
			moves++
		}
	}
	if moves >= len(stubs) {
		t.Errorf("the prefix moved %d times for %d folds: want batches", moves, len(stubs))
	}
	t.Logf("%d requests, %d results folded, prefix held on %d of %d successive requests, recall of %s (%s) exact", len(reqs), len(stubs), hits, len(reqs)-1, got.Handle, id)
}
