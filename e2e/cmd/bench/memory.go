package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// httpPeer is a lean streamable HTTP client: one MCP session, requests
// answered as JSON or as an event stream.
type httpPeer struct {
	hc      *http.Client
	url     string
	session string
	version string
	seq     int
}

// post sends one JSON-RPC message; for a request (id != 0) it returns the
// response's result.
func (h *httpPeer) post(ctx context.Context, method string, params any, notify bool) (json.RawMessage, error) {
	msg := map[string]any{"jsonrpc": "2.0", "method": method}
	if params != nil {
		msg["params"] = params
	}
	if !notify {
		h.seq++
		msg["id"] = h.seq
	}
	body, err := json.Marshal(msg)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if h.session != "" {
		req.Header.Set("Mcp-Session-Id", h.session)
	}
	if h.version != "" {
		req.Header.Set("MCP-Protocol-Version", h.version)
	}
	resp, err := h.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if notify {
		_, _ = io.Copy(io.Discard, resp.Body)
		if resp.StatusCode/100 != 2 {
			return nil, fmt.Errorf("%s: HTTP %d", method, resp.StatusCode)
		}
		return nil, nil
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 2000))
		return nil, fmt.Errorf("%s: HTTP %d: %s", method, resp.StatusCode, b)
	}
	if id := resp.Header.Get("Mcp-Session-Id"); id != "" {
		h.session = id
	}
	var raw []byte
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		raw, err = sseResponse(resp.Body, h.seq)
	} else {
		raw, err = io.ReadAll(resp.Body)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", method, err)
	}
	var ans struct {
		Result json.RawMessage `json:"result"`
		Error  *struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(raw, &ans); err != nil {
		return nil, fmt.Errorf("%s: %w in %q", method, err, truncate(string(raw), 200))
	}
	if ans.Error != nil {
		return nil, fmt.Errorf("%s: JSON-RPC error %d: %s", method, ans.Error.Code, ans.Error.Message)
	}
	return ans.Result, nil
}

// sseResponse reads an event stream until the response with id arrives.
func sseResponse(r io.Reader, id int) ([]byte, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 64<<20)
	var data []byte
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "data:"):
			data = append(data, strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " ")...)
		case line == "":
			if len(data) > 0 {
				var m struct {
					ID json.RawMessage `json:"id"`
				}
				if json.Unmarshal(data, &m) == nil && string(m.ID) == fmt.Sprint(id) {
					return data, nil
				}
			}
			data = data[:0]
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return nil, errors.New("event stream ended without the response")
}

// open performs initialize and notifications/initialized.
func (h *httpPeer) open(ctx context.Context) error {
	res, err := h.post(ctx, "initialize", map[string]any{
		"protocolVersion": "2025-06-18",
		"capabilities":    map[string]any{},
		"clientInfo":      map[string]any{"name": "foldproxy-bench", "version": "1.0.0"},
	}, false)
	if err != nil {
		return err
	}
	var init struct {
		ProtocolVersion string `json:"protocolVersion"`
	}
	if err := json.Unmarshal(res, &init); err != nil {
		return fmt.Errorf("initialize: %w", err)
	}
	if h.session == "" {
		return errors.New("initialize: no Mcp-Session-Id header")
	}
	h.version = init.ProtocolVersion
	_, err = h.post(ctx, "notifications/initialized", nil, true)
	return err
}

// callTool calls a tool and fails on a tool error.
func (h *httpPeer) callTool(ctx context.Context, name string, args map[string]any) (json.RawMessage, error) {
	res, err := h.post(ctx, "tools/call", map[string]any{"name": name, "arguments": args}, false)
	if err != nil {
		return nil, err
	}
	var r struct {
		IsError bool `json:"isError"`
	}
	if err := json.Unmarshal(res, &r); err != nil {
		return nil, err
	}
	if r.IsError {
		return nil, fmt.Errorf("%s: tool error: %s", name, truncate(string(res), 300))
	}
	return res, nil
}

// runMemory measures section 5: foldproxy's resident memory over HTTP with
// 1,000 sessions each holding 10 active branches.
func runMemory(ctx context.Context, e *env, res *results) error {
	const sec = "5 memory (HTTP)"
	sessions, perSession, workers := 1000, 10, 8
	if e.quick {
		sessions = 200
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	cfg, err := e.writeConfig("memory.json", map[string]any{"replay": e.replayEntry()}, benchSettings())
	if err != nil {
		return err
	}
	state, err := e.stateDir("memory")
	if err != nil {
		return err
	}
	stderr := &tailBuffer{max: 16 << 10}
	cmd := exec.Command(e.proxy, "serve", "--config", cfg, "--listen", addr, "--state", state, "--log-level", "warn")
	cmd.Stderr = stderr
	ownGroup(cmd)
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		_ = terminate(cmd)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			_ = killGroup(cmd)
			<-exited
		}
	}()
	pid := cmd.Process.Pid

	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: workers * 2}, Timeout: 60 * time.Second}
	url := "http://" + addr + "/mcp"
	// Wait for the front, then for the upstream to be in the catalogue.
	if err := waitMemoryFront(ctx, hc, addr, exited, stderr); err != nil {
		return err
	}
	time.Sleep(500 * time.Millisecond)
	before, err := procStatus(pid, "VmRSS", "VmHWM")
	if err != nil {
		return err
	}

	e.log.Info("memory: opening sessions", "sessions", sessions, "branches each", perSession, "workers", workers)
	t0 := time.Now()
	var next, done atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, workers)
	for w := range workers {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(sessions) {
					return
				}
				if err := memorySession(ctx, hc, url, int(i), perSession); err != nil {
					errs[w] = err
					return
				}
				if n := done.Add(1); n%200 == 0 {
					e.log.Info("memory: sessions open", "n", n)
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(t0)
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w%s", err, stderr.tail())
	}
	time.Sleep(500 * time.Millisecond)
	after, err := procStatus(pid, "VmRSS", "VmHWM")
	if err != nil {
		return err
	}
	branches := int64(sessions * perSession)
	delta := after["VmRSS"] - before["VmRSS"]
	note := fmt.Sprintf("%d sessions x %d branch_create in %.1fs (%d workers)", sessions, perSession, elapsed.Seconds(), workers)
	res.add(row{Section: sec, Metric: fmt.Sprintf("VmRSS with %d branches", branches), Value: mib(after["VmRSS"]),
		Baseline: mib(before["VmRSS"]) + " idle", Ratio: ratio(float64(after["VmRSS"]), float64(before["VmRSS"])),
		Num: float64(after["VmRSS"]) / (1 << 20), Base: float64(before["VmRSS"]) / (1 << 20), Unit: "MiB",
		Target: "<= 300 MB", Met: met(after["VmRSS"] <= 300e6), Note: note})
	res.add(row{Section: sec, Metric: "VmHWM (peak)", Value: mib(after["VmHWM"]), Baseline: mib(before["VmHWM"]) + " idle",
		Num: float64(after["VmHWM"]) / (1 << 20), Base: float64(before["VmHWM"]) / (1 << 20), Unit: "MiB"})
	res.add(row{Section: sec, Metric: "RSS growth per branch", Value: fmt.Sprintf("%.1f KiB", float64(delta)/1024/float64(branches)),
		Num: float64(delta) / 1024 / float64(branches), Unit: "KiB",
		Note: fmt.Sprintf("(after - idle) / %d; includes the %d HTTP sessions", branches, sessions)})
	return nil
}

// waitMemoryFront waits for the proxy on addr to answer /healthz, then
// for the replay upstream's tools in its catalogue; it gives up when the
// proxy exits or after a minute.
func waitMemoryFront(ctx context.Context, hc *http.Client, addr string, exited <-chan error, stderr *tailBuffer) error {
	url := "http://" + addr + "/mcp"
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := hc.Get("http://" + addr + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		select {
		case err := <-exited:
			return fmt.Errorf("foldproxy exited: %v%s", err, stderr.tail())
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("foldproxy did not answer on %s%s", addr, stderr.tail())
		}
		time.Sleep(20 * time.Millisecond)
	}
	probe := &httpPeer{hc: hc, url: url}
	if err := probe.open(ctx); err != nil {
		return fmt.Errorf("%w%s", err, stderr.tail())
	}
	for {
		raw, err := probe.post(ctx, "tools/list", map[string]any{}, false)
		if err != nil {
			return err
		}
		if strings.Contains(string(raw), `"replay__emit"`) {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("replay__emit never listed%s", stderr.tail())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// memorySession opens session i over HTTP and creates perSession
// sibling branches under its root.
func memorySession(ctx context.Context, hc *http.Client, url string, i, perSession int) error {
	h := &httpPeer{hc: hc, url: url}
	if err := h.open(ctx); err != nil {
		return fmt.Errorf("session %d: %w", i, err)
	}
	// Siblings under the root: without parent_branch_id a new
	// branch nests under the innermost active one, and depth is
	// capped. branch_status names the root.
	var root string
	{
		st, err := h.callTool(ctx, "branch_status", map[string]any{})
		var ans struct {
			Content []struct{ Text string } `json:"content"`
		}
		var tree struct {
			Tree struct {
				ID string `json:"branch_id"`
			} `json:"tree"`
		}
		if err != nil || json.Unmarshal(st, &ans) != nil || len(ans.Content) == 0 ||
			json.Unmarshal([]byte(ans.Content[0].Text), &tree) != nil || tree.Tree.ID == "" {
			return fmt.Errorf("session %d: branch_status: no tree in %s (%v)", i, truncate(string(st), 300), err)
		}
		root = tree.Tree.ID
	}
	for j := range perSession {
		args := map[string]any{"description": fmt.Sprintf("bench branch %d of session %d", j, i), "timeout_seconds": 600}
		args["parent_branch_id"] = root
		if _, err := h.callTool(ctx, "branch_create", args); err != nil {
			return fmt.Errorf("session %d, branch %d: %w", i, j, err)
		}
	}
	return nil
}
