package e2e

// The live page (/ui) in a real headless Chromium, driven over the
// DevTools protocol: during an end-to-end session of the real Claude Code
// through foldproxy, the figures the page shows equal those of
// "foldproxy report --json" on the same audit log, and a screenshot is
// kept as an artifact.

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/websocket"
)

// chromiumBin is Debian's chromium (.ci/run installs it).
func chromiumBin(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no chromium on PATH: install Debian's chromium package (apt-get install chromium), as .ci/run does")
	return ""
}

// cdp is a minimal client of the DevTools protocol: one command at a time,
// events skipped.
type cdp struct {
	ws   *websocket.Conn
	next int
}

// startChromium runs headless Chromium with a fresh profile and connects
// to its DevTools endpoint.
func startChromium(ctx context.Context, t *testing.T) *cdp {
	t.Helper()
	cmd := exec.Command(chromiumBin(t), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
		"--disable-component-update", "--disable-sync", "--no-first-run", "--user-data-dir="+t.TempDir(),
		"--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0", "--remote-allow-origins=http://127.0.0.1", "about:blank")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	ownProcessGroup(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	t.Cleanup(func() { _ = killGroup(cmd); _ = cmd.Wait() })
	found := make(chan string, 1)
	go func() {
		re := regexp.MustCompile(`DevTools listening on (ws://\S+)`)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				found <- m[1]
			}
		}
		close(found)
	}()
	var wsURL string
	select {
	case u, ok := <-found:
		if !ok {
			t.Fatal("chromium exited before its DevTools endpoint listened")
		}
		wsURL = u
	case <-ctx.Done():
		t.Fatal("chromium's DevTools endpoint did not listen")
	}
	ws, err := websocket.Dial(wsURL, "", "http://127.0.0.1")
	if err != nil {
		t.Fatalf("connecting to chromium's DevTools at %s: %v", wsURL, err)
	}
	t.Cleanup(func() { ws.Close() })
	return &cdp{ws: ws}
}

// call sends one command (of session, "" for the browser) and returns its
// result.
func (c *cdp) call(ctx context.Context, session, method string, params any) (json.RawMessage, error) {
	c.next++
	id := c.next
	msg := map[string]any{"id": id, "method": method, "params": params}
	if session != "" {
		msg["sessionId"] = session
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = c.ws.SetDeadline(dl)
	}
	if err := websocket.JSON.Send(c.ws, msg); err != nil {
		return nil, fmt.Errorf("%s: %w", method, err)
	}
	for {
		var resp struct {
			ID     int             `json:"id"`
			Result json.RawMessage `json:"result"`
			Error  *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := websocket.JSON.Receive(c.ws, &resp); err != nil {
			return nil, fmt.Errorf("%s: %w", method, err)
		}
		if resp.ID != id {
			continue // an event
		}
		if resp.Error != nil {
			return nil, fmt.Errorf("%s: %s", method, resp.Error.Message)
		}
		return resp.Result, nil
	}
}

// eval evaluates a JavaScript expression in the page and decodes its value.
func (c *cdp) eval(ctx context.Context, session, expr string, v any) error {
	res, err := c.call(ctx, session, "Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true})
	if err != nil {
		return err
	}
	var r struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		Exception *struct {
			Text string `json:"text"`
		} `json:"exceptionDetails"`
	}
	if err := json.Unmarshal(res, &r); err != nil {
		return err
	}
	if r.Exception != nil {
		return errors.New(r.Exception.Text)
	}
	return json.Unmarshal(r.Result.Value, v)
}

// TestUIPageInChromium plays a branch of the real Claude Code through
// foldproxy (one of its files holds a secret), then loads /ui in headless
// Chromium while the server runs, and checks that every figure the page
// shows for the sessions, folds, compression, largest results and
// redactions equals "foldproxy report --json" on the same audit log, that
// the branch tree shows the branch's budget and status, and that the
// secret is nowhere on the page. The screenshot goes to
// $FOLDPROXY_E2E_ARTIFACTS (default bin/e2e-artifacts)/ui.png.
func TestUIPageInChromium(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	p := newBranchPlay(t)
	const secret = "AKIAIOSFODNN7EXAMPL3"
	if err := os.WriteFile(p.remote, []byte("remote file "+p.marks[1]+"\naws_access_key_id = "+secret+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	model := startModelServer(t, p.script("mcp__foldproxy__", "Read", map[string]any{"file_path": p.local}))
	state := t.TempDir()
	base := startFoldproxyModel(t, map[string]any{"fs": p.fsServer(t)}, map[string]any{"model": map[string]any{"anthropicURL": model.url}}, state)
	out := runClaude(ctx, t, p.work, base, base+"/mcp", "PROMPT-BRANCH: read the files")
	claudeResult(t, out)
	p.checkFolded(t, model.records(t), "/v1/messages")

	// The page, in Chromium.
	c := startChromium(ctx, t)
	res, err := c.call(ctx, "", "Target.createTarget", map[string]any{"url": "about:blank"})
	if err != nil {
		t.Fatal(err)
	}
	var target struct {
		TargetID string `json:"targetId"`
	}
	_ = json.Unmarshal(res, &target)
	res, err = c.call(ctx, "", "Target.attachToTarget", map[string]any{"targetId": target.TargetID, "flatten": true})
	if err != nil {
		t.Fatal(err)
	}
	var attached struct {
		SessionID string `json:"sessionId"`
	}
	_ = json.Unmarshal(res, &attached)
	sess := attached.SessionID
	if _, err := c.call(ctx, sess, "Emulation.setDeviceMetricsOverride", map[string]any{"width": 1280, "height": 1600, "deviceScaleFactor": 1, "mobile": false}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.call(ctx, sess, "Page.navigate", map[string]any{"url": base + "/ui"}); err != nil {
		t.Fatal(err)
	}
	for {
		var loaded string
		if err := c.eval(ctx, sess, `(document.body && document.body.dataset.loaded) || ""`, &loaded); err == nil && loaded != "" {
			break
		}
		select {
		case <-ctx.Done():
			var status string
			_ = c.eval(context.Background(), sess, `(document.getElementById("status")||{}).textContent||""`, &status)
			t.Fatalf("the page did not render its data: %q", status)
		case <-time.After(100 * time.Millisecond):
		}
	}
	var shown map[string]string
	var raw string
	if err := c.eval(ctx, sess, `JSON.stringify(Object.fromEntries([...document.querySelectorAll("[data-figure]")].map(e => [e.dataset.figure, e.textContent])))`, &raw); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(raw), &shown); err != nil {
		t.Fatal(err)
	}
	var text string
	if err := c.eval(ctx, sess, `document.body.innerText`, &text); err != nil {
		t.Fatal(err)
	}
	shot, err := c.call(ctx, sess, "Page.captureScreenshot", map[string]any{"format": "png", "captureBeyondViewport": true})
	if err != nil {
		t.Fatal(err)
	}
	var png struct {
		Data string `json:"data"`
	}
	_ = json.Unmarshal(shot, &png)
	img, err := base64.StdEncoding.DecodeString(png.Data)
	if err != nil || len(img) < 1000 {
		t.Fatalf("screenshot: %d bytes, %v", len(img), err)
	}
	dir := os.Getenv("FOLDPROXY_E2E_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join(repoDir, "bin", "e2e-artifacts")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ui.png"), img, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot of the page: %s", filepath.Join(dir, "ui.png"))

	// The report of the same audit log.
	rep := exec.CommandContext(ctx, proxyBin(t), "report", "--audit", filepath.Join(state, "audit.jsonl"), "--json")
	repOut, err := rep.Output()
	if err != nil {
		t.Fatalf("foldproxy report --json: %v", err)
	}
	var report struct {
		Sessions []struct {
			Session   string `json:"session"`
			Calls     int    `json:"calls"`
			Result    int    `json:"result_tokens"`
			Delivered int    `json:"delivered_tokens"`
			Cuts      int    `json:"cuts"`
			Branches  int    `json:"branches"`
		} `json:"sessions"`
		Branches []struct {
			Session   string `json:"session"`
			Branch    string `json:"branch"`
			Depth     int    `json:"depth"`
			Status    string `json:"status"`
			Delivered int    `json:"delivered_tokens"`
			Returned  int    `json:"returned_tokens"`
		} `json:"branches"`
		Compression struct {
			Inside   int `json:"tokens_inside_branches"`
			Returned int `json:"tokens_returned"`
		} `json:"compression"`
		Largest []struct {
			Result    int `json:"result_tokens"`
			Delivered int `json:"delivered_tokens"`
		} `json:"largest_results"`
		Redactions []struct {
			Rule  string `json:"rule"`
			Count int    `json:"count"`
		} `json:"redactions"`
		Model struct {
			Sessions []struct {
				Session    string  `json:"session"`
				Requests   int     `json:"requests"`
				Received   int     `json:"tokens_received"`
				Forwarded  int     `json:"tokens_forwarded"`
				Folds      int     `json:"folds"`
				Input      int     `json:"usage_input"`
				CacheRead  int     `json:"usage_cache_read"`
				CacheWrite int     `json:"usage_cache_write"`
				Output     int     `json:"usage_output"`
				Billed     float64 `json:"billed_input"`
			} `json:"sessions"`
			Folds []struct {
				Handle string `json:"handle"`
				Tokens int    `json:"tokens"`
			} `json:"folds"`
		} `json:"model"`
	}
	if err := json.Unmarshal(repOut, &report); err != nil {
		t.Fatal(err)
	}
	want := map[string]int{
		"compression/inside":   report.Compression.Inside,
		"compression/returned": report.Compression.Returned,
	}
	for _, s := range report.Sessions {
		f := "session/" + s.Session + "/"
		want[f+"calls"], want[f+"result_tokens"], want[f+"delivered_tokens"], want[f+"cuts"], want[f+"branches"] = s.Calls, s.Result, s.Delivered, s.Cuts, s.Branches
	}
	folds := 0
	for _, b := range report.Branches {
		if b.Depth > 0 && b.Status != "" && b.Status != "active" {
			f := "fold/" + b.Session + "/" + b.Branch + "/"
			want[f+"hidden"], want[f+"returned"] = b.Delivered, b.Returned
			folds++
		}
	}
	for i, r := range report.Largest {
		f := "largest/" + strconv.Itoa(i) + "/"
		want[f+"result_tokens"], want[f+"delivered_tokens"] = r.Result, r.Delivered
	}
	for _, r := range report.Redactions {
		want["redaction/"+r.Rule] = r.Count
	}
	for _, s := range report.Model.Sessions {
		f := "model/" + s.Session + "/"
		want[f+"requests"], want[f+"received"], want[f+"forwarded"], want[f+"folds"] = s.Requests, s.Received, s.Forwarded, s.Folds
		want[f+"input"], want[f+"cache_read"], want[f+"cache_write"], want[f+"output"] = s.Input, s.CacheRead, s.CacheWrite, s.Output
		want[f+"billed"] = int(math.Round(s.Billed))
	}
	for _, a := range report.Model.Folds {
		want["autofold/"+a.Handle+"/tokens"] = a.Tokens
	}
	if len(report.Sessions) == 0 || folds != 1 || len(report.Redactions) == 0 || len(report.Largest) == 0 || len(report.Model.Sessions) == 0 || report.Model.Sessions[0].Input == 0 {
		t.Fatalf("the session left too little to compare: %d sessions, %d folds, %d redaction rules, %d results:\n%s",
			len(report.Sessions), folds, len(report.Redactions), len(report.Largest), repOut)
	}
	for k, w := range want {
		got, ok := shown[k]
		n, err := strconv.Atoi(strings.ReplaceAll(got, ",", ""))
		if !ok || err != nil || n != w {
			t.Errorf("the page shows %s = %q, the report %d", k, got, w)
		}
	}
	// The branch tree, live from the store: the branch with the budget it
	// was created with, returned.
	budgets := 0
	for k, v := range shown {
		if strings.HasPrefix(k, "branch/b-") && strings.HasSuffix(k, "/budget") {
			budgets++
			id := strings.TrimSuffix(k, "/budget")
			if v != "6,000" || shown[id+"/status"] != "returned" {
				t.Errorf("the tree shows %s with budget %q and status %q, want 6,000 and returned", id, v, shown[id+"/status"])
			}
		}
	}
	if budgets != 1 {
		t.Errorf("the tree shows %d branches, want 1: %v", budgets, shown)
	}
	if strings.Contains(text, secret) || strings.Contains(string(repOut), secret) {
		t.Error("the secret is on the page or in the report")
	}
}
