package e2e

// Automatic folding with a real OpenAI-style client: OpenCode (pinned in
// e2e/package.json), its openai provider pointed at foldproxy's model
// front (the Responses API) and no MCP entry, reads 32 files with its own
// bash tool in front of the scripted model server. The model must receive
// stubs for the stale results, read one back with the recall tool
// foldproxy adds, get the original exactly, and OpenCode must print the
// final answer.

import (
	"bytes"
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

var reOutputStub = regexp.MustCompile(`^\[foldproxy: folded bash "[^"]*" \([0-9,]+ tokens(, [a-z]+)?\); branch_recall with handle "(af~[0-9]{18})"\]$`)

func TestOpenCodeAutoFold(t *testing.T) {
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
	bash := func(id string, i int) map[string]any {
		return toolUse(id, "bash", map[string]any{"command": fmt.Sprintf("cat f%02d.txt", i), "description": "show a file"})
	}
	turns := []map[string]any{{"name": "step01", "match": []string{"PROMPT-READ"}, "content": []any{bash("call_af_01", 1)}}}
	for i := 2; i <= files; i++ {
		turns = append(turns, map[string]any{"name": fmt.Sprintf("step%02d", i), "match": []string{fmt.Sprintf("END-OF-FILE-%02d", i-1)},
			"content": []any{bash(fmt.Sprintf("call_af_%02d", i), i)}})
	}
	turns = append(turns, map[string]any{"name": "recall", "match": []string{fmt.Sprintf("END-OF-FILE-%02d", files)},
		"capture": `branch_recall with handle \\"(af~[0-9]{18})\\"`,
		"content": []any{toolUse("call_af_recall", "branch_recall", map[string]any{"handle": "$CAPTURE"})}})
	turns = append(turns, map[string]any{"name": "final", "match": []string{"next_offset"},
		"content": []any{map[string]any{"type": "text", "text": "FINAL-ANSWER-7d3"}}})
	model := startModelServer(t, map[string]any{"turns": turns})
	base := startFoldproxyModel(t, map[string]any{}, map[string]any{"model": map[string]any{"openaiURL": model.url}}, t.TempDir())
	oc, _ := json.Marshal(map[string]any{"$schema": "https://opencode.ai/config.json",
		"provider": map[string]any{"openai": map[string]any{"options": map[string]any{"baseURL": base + "/v1"}}}})
	if err := os.WriteFile(filepath.Join(work, "opencode.json"), oc, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, opencodeBin(t), "run", "-m", "openai/gpt-5.1", "PROMPT-READ: read the 32 files")
	cmd.Dir = work
	cmd.Env = opencodeEnv(t)
	if out := runAgentCmd(t, cmd); !bytes.Contains(out, []byte("FINAL-ANSWER-7d3")) {
		t.Errorf("opencode printed %q, want the final answer", out)
	}

	type item struct {
		Type   string          `json:"type"`
		CallID string          `json:"call_id"`
		Output json.RawMessage `json:"output"`
	}
	outputs := func(r modelRecord) map[string]string {
		var req struct {
			Input []item `json:"input"`
		}
		if err := json.Unmarshal(r.Body, &req); err != nil {
			t.Fatalf("request %d: %v", r.Seq, err)
		}
		m := map[string]string{}
		for _, it := range req.Input {
			if it.Type != "function_call_output" {
				continue
			}
			var s string
			if json.Unmarshal(it.Output, &s) != nil {
				var parts []struct{ Text string }
				_ = json.Unmarshal(it.Output, &parts)
				var ts []string
				for _, p := range parts {
					ts = append(ts, p.Text)
				}
				s = strings.Join(ts, "\n")
			}
			m[it.CallID] = s
		}
		return m
	}
	byTurn := map[string]modelRecord{}
	shown := map[string]string{}
	played := 0
	for _, r := range model.records(t) {
		if r.Invalid != "" {
			t.Errorf("request %d %s was invalid: %s", r.Seq, r.Path, r.Invalid)
		}
		if r.Path != "/v1/responses" || r.Turn == "fallback" {
			continue
		}
		played++
		byTurn[r.Turn] = r
		for id, text := range outputs(r) {
			if _, seen := shown[id]; !seen && !strings.HasPrefix(text, "[foldproxy:") {
				shown[id] = text
			}
		}
	}
	if played != files+2 {
		recs := model.records(t)
		last := recs[len(recs)-1]
		var tl struct {
			Tools []struct{ Name, Type string } `json:"tools"`
			Input []json.RawMessage             `json:"input"`
		}
		_ = json.Unmarshal(last.Body, &tl)
		t.Logf("last items: %.600s", tl.Input[len(tl.Input)-2:])
		t.Fatalf("the model played %d turns, want %d; the last request (%s) holds %d stubs and the tools %v; capture %v", played, files+2, last.Turn,
			bytes.Count(last.Body, []byte("[foldproxy: folded")), tl.Tools, regexp.MustCompile(`branch_recall with handle \\"(af~[0-9]{18})\\"`).Find(last.Body) != nil)
	}
	if !bytes.Contains(byTurn["step01"].Body, []byte(`"name":"branch_recall"`)) {
		t.Fatal("the first request lacks the recall tool foldproxy adds")
	}
	stubs := map[string]string{}
	for id, text := range outputs(byTurn["recall"]) {
		if m := reOutputStub.FindStringSubmatch(text); m != nil {
			stubs[m[2]] = id
			if id == fmt.Sprintf("call_af_%02d", files) {
				t.Errorf("the newest result %s was folded", id)
			}
		}
	}
	if len(stubs) < files/2 {
		t.Errorf("%d of %d results folded by the last request", len(stubs), files)
	}
	var page struct {
		Handle string `json:"handle"`
		Text   string `json:"text"`
		Done   bool   `json:"done"`
	}
	if err := json.Unmarshal([]byte(outputs(byTurn["final"])["call_af_recall"]), &page); err != nil {
		t.Fatalf("the recall's answer is not a page: %v", err)
	}
	id := stubs[page.Handle]
	if id == "" || !page.Done || page.Text != shown[id] || shown[id] == "" {
		t.Fatalf("the recall of %s (%s) read %.120q, want what the model was shown: %.120q", page.Handle, id, page.Text, shown[id])
	}
	t.Logf("%d requests, %d results folded, the recall of %s (%s) exact", played, len(stubs), page.Handle, id)
}
