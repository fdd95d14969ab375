//go:build drills

package e2e

// Operational drills (issue 5), behind the "drills" build tag so that
// "make test" does not run them: "make drills" does. Each drill runs the real
// binary on loopback, bounds every loop in count and time, stops by itself
// and logs its numbers on a line that starts with "DRILL". The only timing
// assertions are "does not hang" deadlines.
//
//	drill_kill_test.go   kill -9 under a load of calls and branch operations, then restart
//	drill_flaky_test.go  an upstream that crashes every third call
//	drill_soak_test.go   200 concurrent HTTP sessions, memory before and after
//	drill_fuzz_test.go   generated malformed frames into the stdio and HTTP fronts
//
// This file holds what they share: a foldproxy on an HTTP address and a
// state folder the drill owns (so that it can be restarted on it), a small
// streamable HTTP client that keeps full control of the session id, and
// readers for /proc and /metrics.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// drillProxy is a foldproxy serving streamable HTTP for a drill.
type drillProxy struct {
	p    *process
	addr string // 127.0.0.1:PORT
	url  string // http://127.0.0.1:PORT/mcp
}

// startDrillProxy runs "foldproxy serve --listen 127.0.0.1:PORT --state
// state" on a free port and waits until it accepts connections. The process
// group is killed when the test ends.
func startDrillProxy(t testing.TB, cfg, state string) *drillProxy {
	t.Helper()
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	cmd := exec.Command(proxyBin(t), "serve", "--config", cfg, "--listen", addr, "--state", state)
	p := startProcess(t, "foldproxy --listen "+addr, cmd)
	waitListening(testContext(t, 60*time.Second), t, p, addr)
	return &drillProxy{p: p, addr: addr, url: "http://" + addr + "/mcp"}
}

// pid is the proxy's process id.
func (d *drillProxy) pid() int { return d.p.cmd.Process.Pid }

// drillHTTPClient returns an HTTP client for loopback drills that keeps up to
// conns idle connections, so that concurrent sessions reuse them, and bounds
// every request at two minutes, so that no drill can wait for ever.
func drillHTTPClient(conns int) *http.Client {
	return &http.Client{
		Timeout: 2 * time.Minute,
		Transport: &http.Transport{
			Proxy:               nil, // loopback only, whatever the environment says
			MaxIdleConns:        conns,
			MaxIdleConnsPerHost: conns,
			IdleConnTimeout:     30 * time.Second,
			DisableCompression:  true,
		},
	}
}

// drillClient speaks streamable HTTP to foldproxy with a session id it
// controls, so that a drill can resume a session after a restart. Its
// methods are safe for concurrent use once initialize has returned.
type drillClient struct {
	hc  *http.Client
	url string
	sid string
	seq atomic.Int64
}

// rpcError is a JSON-RPC error object.
type rpcError struct {
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

func (e *rpcError) Error() string { return fmt.Sprintf("json-rpc error %d: %s", e.Code, e.Message) }

// rpcReply is one JSON-RPC message as the proxy writes it.
type rpcReply struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  string          `json:"method"`
	Result  json.RawMessage `json:"result"`
	Error   *rpcError       `json:"error"`
}

// httpReply is the raw answer to one POST.
type httpReply struct {
	status int
	ctype  string
	sid    string // the Mcp-Session-Id response header
	body   []byte
}

// post sends body to the MCP endpoint with the client's session id, if any.
func (c *drillClient) post(ctx context.Context, body []byte) (*httpReply, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if c.sid != "" {
		req.Header.Set("Mcp-Session-Id", c.sid)
		req.Header.Set("Mcp-Protocol-Version", protocolVersion)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("reading the response body: %w", err)
	}
	ct, _, _ := strings.Cut(resp.Header.Get("Content-Type"), ";")
	return &httpReply{status: resp.StatusCode, ctype: strings.TrimSpace(ct), sid: resp.Header.Get("Mcp-Session-Id"), body: b}, nil
}

// messages decodes the JSON-RPC messages of a reply: the JSON body (one
// message or an array) or the data fields of an event stream.
func (r *httpReply) messages() ([]json.RawMessage, error) {
	var raws []json.RawMessage
	switch r.ctype {
	case "application/json":
		raws = []json.RawMessage{bytes.TrimSpace(r.body)}
	case "text/event-stream":
		raws = sseData(r.body)
	default:
		return nil, fmt.Errorf("status %d with Content-Type %q: %s", r.status, r.ctype, truncate(string(r.body), 300))
	}
	var out []json.RawMessage
	for _, raw := range raws {
		if len(raw) > 0 && raw[0] == '[' {
			var items []json.RawMessage
			if err := json.Unmarshal(raw, &items); err != nil {
				return nil, fmt.Errorf("undecodable batch answer: %v: %s", err, truncate(string(raw), 300))
			}
			out = append(out, items...)
			continue
		}
		out = append(out, raw)
	}
	return out, nil
}

// sseData returns the data of every event of an event stream.
func sseData(body []byte) []json.RawMessage {
	var out []json.RawMessage
	var data []byte
	flush := func() {
		if len(data) > 0 {
			out = append(out, bytes.TrimSuffix(data, []byte{'\n'}))
		}
		data = nil
	}
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 0, 64<<10), 256<<20)
	for sc.Scan() {
		line := sc.Bytes()
		switch {
		case len(line) == 0:
			flush()
		case bytes.HasPrefix(line, []byte("data:")):
			d := bytes.TrimPrefix(bytes.TrimPrefix(line, []byte("data:")), []byte(" "))
			data = append(append(data, d...), '\n')
		}
	}
	flush()
	return out
}

// initialize opens a session and remembers its id.
func (c *drillClient) initialize(ctx context.Context) error {
	c.sid = ""
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":%q,"capabilities":{},"clientInfo":{"name":"foldproxy-drill","version":"1"}}}`, protocolVersion)
	r, err := c.post(ctx, []byte(body))
	if err != nil {
		return fmt.Errorf("initialize: %w", err)
	}
	if r.status != http.StatusOK || r.sid == "" {
		return fmt.Errorf("initialize: status %d, session id %q: %s", r.status, r.sid, truncate(string(r.body), 300))
	}
	c.sid = r.sid
	r, err = c.post(ctx, []byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}`))
	if err != nil {
		return fmt.Errorf("notifications/initialized: %w", err)
	}
	if r.status != http.StatusAccepted {
		return fmt.Errorf("notifications/initialized: status %d: %s", r.status, truncate(string(r.body), 300))
	}
	return nil
}

// rpc sends one request and returns its response. A transport failure or a
// malformed answer is the error; a JSON-RPC error is in the reply.
func (c *drillClient) rpc(ctx context.Context, method string, params any) (*rpcReply, error) {
	id := fmt.Sprintf("d-%d", c.seq.Add(1))
	body, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	if err != nil {
		return nil, err
	}
	r, err := c.post(ctx, body)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", method, err)
	}
	if r.status != http.StatusOK {
		return nil, fmt.Errorf("%s: status %d: %s", method, r.status, truncate(string(r.body), 300))
	}
	msgs, err := r.messages()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", method, err)
	}
	want := strconv.Quote(id)
	for _, raw := range msgs {
		var m rpcReply
		if err := json.Unmarshal(raw, &m); err != nil {
			return nil, fmt.Errorf("%s: undecodable message %v: %s", method, err, truncate(string(raw), 300))
		}
		if m.Method == "" && string(m.ID) == want {
			return &m, nil
		}
	}
	return nil, fmt.Errorf("%s: no response with id %s in %s", method, want, truncate(string(r.body), 500))
}

// toolOutcome is what a tools/call came back with.
type toolOutcome struct {
	text       string          // the text contents, joined by newlines
	structured json.RawMessage // structuredContent, if any
	isError    bool            // a tool error (isError: true)
	rpcErr     *rpcError       // a JSON-RPC error instead of a result
}

// answer is a fold tool's JSON answer: the structuredContent when there is
// one, else the text.
func (o *toolOutcome) answer() json.RawMessage {
	if len(o.structured) > 0 && string(o.structured) != "null" {
		return o.structured
	}
	return json.RawMessage(o.text)
}

// failed reports whether the call failed either way.
func (o *toolOutcome) failed() bool { return o.isError || o.rpcErr != nil }

// outText describes an outcome that may be nil (the call failed), for
// messages.
func outText(o *toolOutcome) string {
	if o == nil {
		return ""
	}
	return truncate(o.describe(), 500)
}

// describe is the text of the outcome, for messages.
func (o *toolOutcome) describe() string {
	if o.rpcErr != nil {
		return o.rpcErr.Error()
	}
	return o.text
}

// callTool calls a tool. The error is a transport failure or a malformed
// answer; tool and JSON-RPC errors are in the outcome.
func (c *drillClient) callTool(ctx context.Context, name string, args map[string]any) (*toolOutcome, error) {
	if args == nil {
		args = map[string]any{}
	}
	m, err := c.rpc(ctx, "tools/call", map[string]any{"name": name, "arguments": args})
	if err != nil {
		return nil, err
	}
	if m.Error != nil {
		return &toolOutcome{rpcErr: m.Error}, nil
	}
	var res struct {
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
		StructuredContent json.RawMessage `json:"structuredContent"`
		IsError           bool            `json:"isError"`
	}
	if err := json.Unmarshal(m.Result, &res); err != nil {
		return nil, fmt.Errorf("tools/call %s: result is not a CallToolResult (%v): %s", name, err, truncate(string(m.Result), 300))
	}
	var parts []string
	for _, c := range res.Content {
		if c.Type == "text" {
			parts = append(parts, c.Text)
		}
	}
	return &toolOutcome{text: strings.Join(parts, "\n"), structured: res.StructuredContent, isError: res.IsError}, nil
}

// waitTools waits until tools/list names every one of tools: the upstreams
// connect in the background after the proxy starts listening.
func (c *drillClient) waitTools(ctx context.Context, t testing.TB, tools ...string) {
	t.Helper()
	var last string
	for i := 0; i < 600; i++ {
		m, err := c.rpc(ctx, "tools/list", map[string]any{})
		if err == nil && m.Error == nil {
			missing := false
			for _, name := range tools {
				if !bytes.Contains(m.Result, []byte(strconv.Quote(name))) {
					missing = true
				}
			}
			if !missing {
				return
			}
			last = truncate(string(m.Result), 300)
		} else if err != nil {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			t.Fatalf("tools %v did not appear in tools/list: %v (last answer: %s)", tools, ctx.Err(), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
	t.Fatalf("tools %v did not appear in tools/list after 600 tries (last answer: %s)", tools, last)
}

// vmRSS returns the resident set size of process pid in KiB, from
// /proc/PID/status.
func vmRSS(pid int) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest)
			if len(f) == 0 {
				break
			}
			return strconv.Atoi(f[0])
		}
	}
	return 0, errors.New("no VmRSS line in /proc/PID/status")
}

// scrapeMetric returns the value of the sample of metric whose labels
// contain every one of labels (such as `upstream="flaky"`), and whether
// there is one, from a Prometheus text exposition at url.
func scrapeMetric(ctx context.Context, hc *http.Client, url, metric string, labels ...string) (float64, bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, false, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, false, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, false, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, false, fmt.Errorf("GET %s: status %d", url, resp.StatusCode)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		name, rest, ok := strings.Cut(line, "{")
		if !ok || name != metric {
			name, rest, ok = strings.Cut(line, " ")
			if !ok || name != metric || len(labels) > 0 {
				continue
			}
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			return v, err == nil, err
		}
		lbl, val, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		match := true
		for _, l := range labels {
			if !strings.Contains(lbl, l) {
				match = false
			}
		}
		if match {
			v, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
			return v, err == nil, err
		}
	}
	return 0, false, nil
}

// envInt returns the integer in the environment variable name, or def when
// it is unset or not a positive integer. Drills take their sizes from it so
// that a longer run by hand needs no edit.
func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// countLines counts the lines of text that contain every one of parts.
func countLines(text string, parts ...string) int {
	n := 0
	for line := range strings.SplitSeq(text, "\n") {
		all := true
		for _, p := range parts {
			if !strings.Contains(line, p) {
				all = false
				break
			}
		}
		if all {
			n++
		}
	}
	return n
}
