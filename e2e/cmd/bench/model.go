package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"time"
)

// runModel measures section 7: the latency foldproxy's model front adds to
// the first streamed byte of a Messages API answer, against sending the
// same request straight to the scripted model server (e2e/servers/model),
// in the same run. Two requests of Claude Code's shape built from the
// trajectory data: one whose conversation holds a returned branch (the
// context manager folds it: the forwarded request is smaller) and one with
// no branch (scanned and forwarded unchanged).
func runModel(ctx context.Context, e *env, res *results) error {
	const sec = "7 model front"
	calls, warm := 40, 5
	if e.quick {
		calls, warm = 10, 2
	}
	modelAddr, stopModel, err := startBackground(ctx, "model server", "", e.model, "-listen", "{addr}", "-chunk", "64")
	if err != nil {
		return err
	}
	defer stopModel()
	cfg, err := e.writeConfig("model.json", map[string]any{"replay": e.replayEntry()},
		map[string]any{"model": map[string]any{"anthropicURL": "http://" + modelAddr}})
	if err != nil {
		return err
	}
	state, err := e.stateDir("model")
	if err != nil {
		return err
	}
	proxyAddr, stopProxy, err := startBackground(ctx, "foldproxy", "/healthz", e.proxy, "serve", "--config", cfg, "--listen", "{addr}", "--state", state, "--log-level", "warn")
	if err != nil {
		return err
	}
	defer stopProxy()

	// A branch created and returned over foldproxy's MCP front, so that the
	// conversation's branch_create result names a branch the state knows.
	hc := &http.Client{Timeout: 60 * time.Second}
	mcp := &httpPeer{hc: hc, url: "http://" + proxyAddr + "/mcp"}
	if err := mcp.open(ctx); err != nil {
		return err
	}
	created, err := mcp.callTool(ctx, "branch_create", map[string]any{"description": "read the test output"})
	if err != nil {
		return err
	}
	createdText, branchID, err := branchOf(created)
	if err != nil {
		return err
	}
	returned, err := mcp.callTool(ctx, "branch_return", map[string]any{"message": "The failing test is test_parse; the fix is in parser.py line 42."})
	if err != nil {
		return err
	}
	returnedText, _, _ := branchOf(returned)

	outs, err := loadOutputs(e.data)
	if err != nil {
		return err
	}
	cases := []struct {
		label string
		body  []byte
	}{
		{"returned branch (folded)", claudeShapedRequest(outs, createdText, returnedText)},
		{"no branch (unchanged)", claudeShapedRequest(outs, "", "")},
	}
	direct := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	through := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	sides := []struct {
		name string
		hc   *http.Client
		url  string
	}{
		{"direct", direct, "http://" + modelAddr + "/v1/messages?beta=true"},
		{"through foldproxy", through, "http://" + proxyAddr + "/v1/messages?beta=true"},
	}
	for _, c := range cases {
		e.log.Info("model front", "case", c.label, "bytes", len(c.body), "calls", calls, "rounds", e.rounds, "branch", branchID)
		var st [2]roundStats
		for i, s := range sides {
			if _, err := firstBytes(ctx, s.hc, s.url, c.body, warm); err != nil {
				return fmt.Errorf("warm-up %s: %w", sides[i].name, err)
			}
		}
		for r := 0; r < e.rounds; r++ {
			order := []int{0, 1}
			if r%2 == 1 {
				order = []int{1, 0}
			}
			for _, i := range order {
				samples, err := firstBytes(ctx, sides[i].hc, sides[i].url, c.body, calls)
				if err != nil {
					return fmt.Errorf("%s: %w", sides[i].name, err)
				}
				st[i].add(samples)
			}
		}
		d50, p50 := st[0].P50(), st[1].P50()
		d99, p99 := st[0].P99(), st[1].P99()
		res.add(row{Section: sec, Metric: "first byte p50, " + c.label, Value: ms(p50), Baseline: ms(d50) + " direct",
			Ratio: ratio(float64(p50), float64(d50)), Num: msf(p50), Base: msf(d50), Unit: "ms",
			Note: fmt.Sprintf("+%s; %d KB Claude Code-shaped request, %d calls x %d rounds", ms(p50-d50), len(c.body)/1000, calls, e.rounds)})
		res.add(row{Section: sec, Metric: "first byte p99, " + c.label, Value: ms(p99), Baseline: ms(d99) + " direct",
			Ratio: ratio(float64(p99), float64(d99)), Num: msf(p99), Base: msf(d99), Unit: "ms"})
	}
	return nil
}

// branchOf returns the text of a fold tool's result and the branch_id in it.
func branchOf(result json.RawMessage) (string, string, error) {
	var r struct {
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
	}
	if err := json.Unmarshal(result, &r); err != nil || len(r.Content) == 0 {
		return "", "", fmt.Errorf("fold tool result %s: no text", truncate(string(result), 200))
	}
	var b struct {
		BranchID string `json:"branch_id"`
	}
	_ = json.Unmarshal([]byte(r.Content[0].Text), &b)
	return r.Content[0].Text, b.BranchID, nil
}

// claudeShapedRequest builds a streamed Messages request the way Claude
// Code 2.1.197 shapes it (system blocks with cache_control, tools, the
// prompt, assistant tool_use and user tool_result turns, the breakpoint on
// the newest message), its tool results taken from the trajectory outputs.
// With createdText, a branch spans the middle turns: branch_create answered
// with createdText, eight tool results, branch_return answered with
// returnedText.
func claudeShapedRequest(outs []string, createdText, returnedText string) []byte {
	type block = map[string]any
	var msgs []map[string]any
	id := 0
	out := 0
	next := func() string {
		for {
			s := outs[out%len(outs)]
			out++
			if len(s) > 200 {
				if len(s) > 6000 {
					s = s[:6000]
				}
				return s
			}
		}
	}
	turn := func(name string, input map[string]any, result string) {
		id++
		tid := fmt.Sprintf("toolu_bench_%03d", id)
		msgs = append(msgs,
			map[string]any{"role": "assistant", "content": []block{{"type": "tool_use", "id": tid, "name": name, "input": input}}},
			map[string]any{"role": "user", "content": []block{{"tool_use_id": tid, "type": "tool_result", "content": result}}})
	}
	msgs = append(msgs, map[string]any{"role": "user", "content": []block{
		{"type": "text", "text": "<system-reminder>\nToday's date is 2026-11-23.\n</system-reminder>\n"},
		{"type": "text", "text": "Fix the failing test in this repository."}}})
	for range 4 {
		turn("Bash", map[string]any{"command": "ls -R", "description": "list"}, next())
	}
	if createdText != "" {
		turn("mcp__foldproxy__branch_create", map[string]any{"description": "read the test output"}, createdText)
		for range 8 {
			turn("Bash", map[string]any{"command": "pytest -x", "description": "run the tests"}, next())
		}
		turn("mcp__foldproxy__branch_return", map[string]any{"message": "The failing test is test_parse."}, returnedText)
	} else {
		for range 10 {
			turn("Bash", map[string]any{"command": "pytest -x", "description": "run the tests"}, next())
		}
	}
	turn("Read", map[string]any{"file_path": "/repo/parser.py"}, next())
	// Claude Code's breakpoint: the last block of the newest message.
	last := msgs[len(msgs)-1]["content"].([]block)
	last[len(last)-1]["cache_control"] = map[string]any{"type": "ephemeral"}

	tools := []map[string]any{}
	for _, n := range []string{"Agent", "Bash", "Edit", "Read", "Write", "WebFetch", "TaskCreate", "TaskUpdate",
		"mcp__foldproxy__branch_create", "mcp__foldproxy__branch_return", "mcp__foldproxy__branch_status", "mcp__foldproxy__branch_recall"} {
		tools = append(tools, map[string]any{"name": n, "description": strings.Repeat("Tool "+n+" does its work. ", 40),
			"input_schema": map[string]any{"type": "object", "properties": map[string]any{"x": map[string]any{"type": "string"}}}})
	}
	req := map[string]any{
		"model":    "claude-opus-4-8",
		"messages": msgs,
		"system": []block{
			{"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.197;"},
			{"type": "text", "text": "You are a Claude agent.", "cache_control": map[string]any{"type": "ephemeral"}},
			{"type": "text", "text": strings.Repeat("You are an interactive agent that helps users with software engineering tasks. ", 200), "cache_control": map[string]any{"type": "ephemeral"}},
		},
		"tools":      tools,
		"max_tokens": 64000,
		"thinking":   map[string]any{"type": "adaptive"},
		"stream":     true,
	}
	b, _ := json.Marshal(req)
	return b
}

// firstBytes posts body n times and returns, for each, the time from the
// start of the request to the first byte of the streamed answer; it reads
// every answer to its end.
func firstBytes(ctx context.Context, hc *http.Client, url string, body []byte, n int) ([]time.Duration, error) {
	out := make([]time.Duration, 0, n)
	one := make([]byte, 1)
	for range n {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Api-Key", "bench")
		req.Header.Set("Anthropic-Version", "2023-06-01")
		t0 := time.Now()
		resp, err := hc.Do(req)
		if err != nil {
			return nil, err
		}
		if _, err := io.ReadFull(resp.Body, one); err != nil {
			resp.Body.Close()
			return nil, fmt.Errorf("reading the first byte: %w", err)
		}
		d := time.Since(t0)
		rest, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return nil, err
		}
		if resp.StatusCode != http.StatusOK || !bytes.Contains(rest, []byte("message_stop")) {
			return nil, fmt.Errorf("HTTP %d: %s", resp.StatusCode, truncate(string(one)+string(rest), 300))
		}
		out = append(out, d)
	}
	return out, nil
}

// startBackground runs command, its "{addr}" argument replaced by a free
// loopback address, and waits until it answers HTTP there (200 on probe,
// or any answer when probe is ""). It returns the address and a function
// that stops the process.
func startBackground(ctx context.Context, name, probe string, command string, args ...string) (string, func(), error) {
	port, err := freePort()
	if err != nil {
		return "", nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	for i, a := range args {
		if a == "{addr}" {
			args[i] = addr
		}
	}
	stderr := &tailBuffer{max: 16 << 10}
	cmd := exec.Command(command, args...)
	cmd.Stderr = stderr
	ownGroup(cmd)
	if err := cmd.Start(); err != nil {
		return "", nil, fmt.Errorf("%s: %w", name, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop := func() {
		_ = terminate(cmd)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = killGroup(cmd)
			<-exited
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + probe)
		if err == nil {
			resp.Body.Close()
			if probe == "" || resp.StatusCode == http.StatusOK {
				return addr, stop, nil
			}
		}
		select {
		case err := <-exited:
			return "", nil, fmt.Errorf("%s exited: %v%s", name, err, stderr.tail())
		case <-ctx.Done():
			stop()
			return "", nil, ctx.Err()
		default:
		}
		if time.Now().After(deadline) {
			stop()
			return "", nil, fmt.Errorf("%s did not answer on %s%s", name, addr, stderr.tail())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
