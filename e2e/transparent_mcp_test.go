package e2e

// Remote MCP servers in transparent mode (issue 9): real clients (the
// official TypeScript SDK client and mcp-remote) reach server-everything,
// served over TLS on loopback in streamable-HTTP and SSE mode, through
// foldproxy as their HTTPS_PROXY. foldproxy intercepts the server's host,
// runs each tools/call through the MCP front's intercept chain (a planted
// secret is scrubbed, the tokens charged to the branch the client made
// with the fold tools foldproxy added to the server's tools/list), and
// passes the client's own Authorization and session through.

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client/transport"

	"github.com/foldproxy/foldproxy/intercept/secretgen"
)

// tlsFront is the test's TLS terminator in front of a plain-HTTP origin
// (server-everything speaks plain HTTP): https://localhost:PORT with the
// test PKI's certificate. It records the Authorization and Mcp-Session-Id
// of every request it relays.
type tlsFront struct {
	url  string // https://localhost:PORT
	mu   sync.Mutex
	seen []http.Header
}

func startTLSFront(t testing.TB, pki testPKI, origin string) *tlsFront {
	t.Helper()
	ou, err := url.Parse(origin)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.LoadX509KeyPair(pki.certFile, pki.keyFile)
	if err != nil {
		t.Fatal(err)
	}
	f := &tlsFront{}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(&url.URL{Scheme: "http", Host: ou.Host})
			pr.Out.Host = ou.Host
		},
		FlushInterval: -1,
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.seen = append(f.seen, http.Header{"Authorization": r.Header.Values("Authorization"), "Mcp-Session-Id": r.Header.Values("Mcp-Session-Id"),
			"Path": {r.Method + " " + r.URL.Path + "?" + r.URL.RawQuery}})
		f.mu.Unlock()
		rp.ServeHTTP(w, r)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	f.url = fmt.Sprintf("https://localhost:%d", srv.Listener.Addr().(*net.TCPAddr).Port)
	return f
}

// headers are the requests the front relayed.
func (f *tlsFront) headers() []http.Header {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]http.Header(nil), f.seen...)
}

// githubSecret is a GitHub token from secretgen (the rule the scrubber
// must catch: github-pat).
func githubSecret(t testing.TB) (secret, rule string) {
	t.Helper()
	for _, s := range secretgen.Generate(rand.New(rand.NewPCG(9, 9))) {
		if s.RuleID == "github-pat" {
			return s.Value, s.RuleID
		}
	}
	t.Fatal("secretgen has no github-pat secret")
	return "", ""
}

// remoteSetup is server-everything in mode behind the TLS front, and
// foldproxy intercepting it.
type remoteSetup struct {
	front  *tlsFront
	url    string // the server's URL as the client is configured with it
	fp     transparentProxy
	secret string
	rule   string
	token  string // the client's own bearer token
}

func setupRemote(t *testing.T, mode string) remoteSetup {
	t.Helper()
	pki := newTestPKI(t)
	origin := startEverythingHTTP(t, mode)
	front := startTLSFront(t, pki, origin)
	ou, _ := url.Parse(origin)
	remote := front.url + ou.Path
	fp := startTransparent(t, map[string]any{
		"proxy": map[string]any{
			"interceptHosts": []string{},
			"allowPorts":     []int{portOf(t, front.url)},
			"extraRootsFile": pki.caFile,
			"mcp":            []map[string]any{{"url": remote, "name": "everything"}},
		},
	})
	secret, rule := githubSecret(t)
	return remoteSetup{front: front, url: remote, fp: fp, secret: secret, rule: rule, token: "client-oauth-token-" + mode + "-5b9e1c"}
}

// check verifies what the server, the audit log and foldproxy's files show
// after a client echoed the secret inside branch.
// sid is the client's MCP session id, when it has one.
func (s remoteSetup) check(t *testing.T, branch, echoed, sid string) {
	t.Helper()
	if strings.Contains(echoed, s.secret) || !strings.Contains(echoed, "[REDACTED:"+s.rule+"]") {
		t.Errorf("the echo the client got = %q: want the secret replaced by [REDACTED:%s]", echoed, s.rule)
	}
	// The client's own credentials reached the server on every MCP request.
	var mcpReqs int
	var sids []string // the client's session ids, as the server saw them
	for _, h := range s.front.headers() {
		p := h.Get("Path")
		_, path, _ := strings.Cut(p, " ")
		path, query, _ := strings.Cut(path, "?")
		if sid := h.Get("Mcp-Session-Id"); sid != "" {
			sids = append(sids, sid)
		}
		if _, legacy, ok := strings.Cut(query, "sessionId="); ok {
			sids = append(sids, legacy)
		}
		if path == "/mcp" || path == "/sse" || strings.HasPrefix(path, "/message") {
			mcpReqs++
			if got := h.Get("Authorization"); got != "Bearer "+s.token {
				t.Errorf("%s reached the server with Authorization %q, want the client's own", p, got)
			}
		}
	}
	if mcpReqs == 0 {
		t.Fatal("the server saw no MCP request")
	}
	// The echo was charged to the branch, scrubbed, in the audit log.
	var found bool
	for _, r := range auditRecords(t, filepath.Join(s.fp.state, "audit.jsonl"), "call") {
		if r["upstream"] != "everything" || r["tool"] != "echo" {
			continue
		}
		found = true
		if r["branch"] != branch {
			t.Errorf("echo charged to %v, want the client's branch %s", r["branch"], branch)
		}
		if tok, _ := r["result_tokens"].(float64); tok <= 0 {
			t.Errorf("echo's audit record counts no tokens: %v", r)
		}
		if used, _ := r["budget_used"].(float64); used <= 0 {
			t.Errorf("echo's audit record shows no budget used: %v", r)
		}
		red, _ := r["redactions"].(map[string]any)
		if n, _ := red[s.rule].(float64); n < 1 {
			t.Errorf("echo's audit record shows no %s redaction: %v", s.rule, r)
		}
	}
	if !found {
		t.Fatal("no audit record of the echo call: it did not go through the intercept chain")
	}
	// Nothing foldproxy wrote holds the secret or the client's token or
	// session id: not its files, not its log (at debug level).
	if sid != "" && !slices.Contains(sids, sid) {
		t.Errorf("the server never saw the client's session id %s", sid)
	}
	if len(sids) == 0 {
		t.Fatal("the server saw no session id: the test checks none")
	}
	holds := func(data string) bool {
		if strings.Contains(data, s.secret) || strings.Contains(data, s.token) {
			return true
		}
		for _, id := range sids {
			if strings.Contains(data, id) {
				return true
			}
		}
		return false
	}
	if holds(s.fp.proc.out.String()) {
		t.Error("foldproxy's log holds the secret, the client's token or its session id")
	}
	err := filepath.Walk(s.fp.state, func(path string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() || info.Mode()&os.ModeSocket != 0 {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if holds(string(data)) {
			t.Errorf("%s holds the secret, the client's token or its session id", path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestTransparentRemoteMCPTypeScriptSDK(t *testing.T) {
	for _, mode := range []string{"streamableHttp", "sse"} {
		t.Run(mode, func(t *testing.T) {
			s := setupRemote(t, mode)
			ctx := testContext(t, 60*time.Second)
			sdk := filepath.Join(nodeModules(t), "@modelcontextprotocol", "sdk")
			script := filepath.Join(repoDir, "e2e", "testdata", "ts_remote_client.mjs")
			tsMode := "http"
			if mode == "sse" {
				tsMode = "sse"
			}
			cmd := exec.CommandContext(ctx, nodeBin(t), script, sdk, tsMode, s.url)
			cmd.Env = []string{
				"PATH=" + os.Getenv("PATH"),
				"HOME=" + t.TempDir(),
				"HTTPS_PROXY=" + s.fp.proxyURL,
				"NODE_USE_ENV_PROXY=1",
				"NODE_EXTRA_CA_CERTS=" + s.fp.caFile(),
				"SECRET=" + s.secret,
				"AUTH=Bearer " + s.token,
			}
			var stderr syncBuffer
			cmd.Stderr = &stderr
			dumpOnFailure(t, "ts client stderr", &stderr)
			outb, err := cmd.Output()
			if err != nil {
				t.Fatalf("the TypeScript client failed: %v", err)
			}
			var out struct {
				Tools     []string `json:"tools"`
				Branch    string   `json:"branch"`
				Echo      []string `json:"echo"`
				Status    string   `json:"status"`
				Returned  string   `json:"returned"`
				SessionID string   `json:"sessionId"`
			}
			if err := json.Unmarshal(outb, &out); err != nil {
				t.Fatalf("the client's report %q: %v", outb, err)
			}
			t.Logf("the client saw: %s", outb)
			for _, want := range []string{"echo", "branch_create", "branch_return", "branch_status", "branch_recall"} {
				if !slices.Contains(out.Tools, want) {
					t.Errorf("tools/list as the client saw it lacks %s: %v", want, out.Tools)
				}
			}
			if out.Branch == "" || !strings.Contains(out.Status, out.Branch) || !strings.Contains(out.Returned, "tokens_used") {
				t.Errorf("fold tools over the proxy: branch %q, status %q, return %q", out.Branch, out.Status, out.Returned)
			}
			s.check(t, out.Branch, strings.Join(out.Echo, "\n"), out.SessionID)
		})
	}
}

func TestTransparentRemoteMCPRemoteBridge(t *testing.T) {
	for _, mode := range []string{"streamableHttp", "sse"} {
		t.Run(mode, func(t *testing.T) {
			s := setupRemote(t, mode)
			strategy := "http-only"
			if mode == "sse" {
				strategy = "sse-only"
			}
			bridge := filepath.Join(nodeModules(t), "mcp-remote", "dist", "proxy.js")
			env := []string{
				"HOME=" + t.TempDir(),
				"HTTPS_PROXY=" + s.fp.proxyURL,
				"NODE_EXTRA_CA_CERTS=" + s.fp.caFile(),
				"AUTH_HEADER=Bearer " + s.token,
			}
			tr := envStdioTransport(t, "mcp-remote", env, nodeBin(t), bridge, s.url,
				"--enable-proxy", "--transport", strategy, "--header", "Authorization:${AUTH_HEADER}")
			p := connect(t, "mcp-remote "+mode, tr, nil)
			ctx := testContext(t, 60*time.Second)
			created, res := p.callText(ctx, t, "branch_create", map[string]any{"description": "echo through mcp-remote", "budget": 4000})
			if res.IsError {
				t.Fatalf("branch_create through mcp-remote: %s", created)
			}
			var c struct {
				BranchID string `json:"branch_id"`
			}
			if err := json.Unmarshal([]byte(created), &c); err != nil || c.BranchID == "" {
				t.Fatalf("branch_create answer %q: %v", created, err)
			}
			echoed, _ := p.callText(ctx, t, "echo", map[string]any{"message": "the key is " + s.secret})
			status, _ := p.callText(ctx, t, "branch_status", map[string]any{})
			if !strings.Contains(status, c.BranchID) {
				t.Errorf("branch_status through mcp-remote: %s", status)
			}
			s.check(t, c.BranchID, echoed, "")
			if mode == "streamableHttp" {
				// A server-to-client request inside a call: the server's
				// sampling request reaches the client's agent through the
				// proxy and mcp-remote, its answer goes back, and the
				// call's result carries it.
				sampled, res := p.callText(ctx, t, "trigger-sampling-request", map[string]any{"prompt": "say the reply", "maxTokens": 20})
				if res.IsError || !strings.Contains(sampled, samplingReply) {
					t.Errorf("sampling through the proxy: %q (isError %v), want the agent's reply %q", sampled, res.IsError, samplingReply)
				}
			}
		})
	}
}

// envStdioTransport is stdioTransport with extra environment variables.
func envStdioTransport(t testing.TB, name string, env []string, command string, args ...string) *transport.Stdio {
	t.Helper()
	stderr := &syncBuffer{}
	dumpOnFailure(t, name+" stderr", stderr)
	var started *exec.Cmd
	t.Cleanup(func() {
		if started != nil {
			_ = killGroup(started)
		}
	})
	return transport.NewStdioWithOptions(command, nil, args, transport.WithCommandFunc(
		func(ctx context.Context, command string, _ []string, args []string) (*exec.Cmd, error) {
			cmd := exec.CommandContext(ctx, command, args...)
			cmd.Env = append(os.Environ(), env...)
			cmd.Stderr = stderr
			ownProcessGroup(cmd)
			cmd.Cancel = func() error { return killGroup(cmd) }
			started = cmd
			return cmd, nil
		}))
}

// TestTransparentClaudeCodeRemoteMCP: the real Claude Code CLI with a
// remote MCP server in its own config (an http entry, as a user adds one
// with OAuth), HTTPS_PROXY set to foldproxy and nothing else changed. The
// model (scripted, over TLS, intercepted as the model host) makes a branch
// with the fold tools foldproxy added to that server, echoes a secret
// through it and returns: the echo reaches the model scrubbed and charged
// to the branch, and after the return the model wire folds the branch out
// of the conversation.
func TestTransparentClaudeCodeRemoteMCP(t *testing.T) {
	pki := newTestPKI(t)
	origin := startEverythingHTTP(t, "streamableHttp")
	front := startTLSFront(t, pki, origin)
	remote := front.url + "/mcp"
	secret, rule := githubSecret(t)
	const (
		summary = "SUMMARY-REMOTE the echo worked"
		final   = "FINAL-REMOTE done."
	)
	script := map[string]any{"turns": []map[string]any{
		{"name": "create", "match": []string{"PROMPT-GO"}, "content": []any{
			toolUse("toolu_r_01", "mcp__everything__branch_create", map[string]any{"description": "echo a key", "budget": 6000})}},
		{"name": "echo", "match": []string{"toolu_r_01"}, "content": []any{
			toolUse("toolu_r_02", "mcp__everything__echo", map[string]any{"message": "ECHOMARK the key is " + secret})}},
		{"name": "return", "match": []string{"toolu_r_02"}, "content": []any{
			toolUse("toolu_r_03", "mcp__everything__branch_return", map[string]any{"message": summary})}},
		// Unfolded, the last message holds branch_return's result; folded,
		// branch_create's with the summary in it.
		{"name": "final-unfolded", "match": []string{"toolu_r_03"}, "content": []any{map[string]any{"type": "text", "text": final}}},
		{"name": "final", "match": []string{"toolu_r_01", summary}, "content": []any{map[string]any{"type": "text", "text": final}}},
	}}
	model := startModelServer(t, script, "-tls-cert", pki.certFile, "-tls-key", pki.keyFile)
	modelPort := portOf(t, model.url)
	fp := startTransparent(t, map[string]any{
		"proxy": map[string]any{
			"interceptHosts": []string{fmt.Sprintf("localhost:%d", modelPort)},
			"allowPorts":     []int{modelPort, portOf(t, front.url)},
			"extraRootsFile": pki.caFile,
			"mcp":            []map[string]any{{"url": remote, "name": "everything"}},
		},
	})

	ctx := testContext(t, 120*time.Second)
	cfg, _ := json.Marshal(map[string]any{"mcpServers": map[string]any{"everything": map[string]any{"type": "http", "url": remote}}})
	cmd := exec.CommandContext(ctx, claudeBin(t), "-p", "PROMPT-GO: echo a key", "--output-format", "json",
		"--mcp-config", writeFile(t, "claude-mcp.json", cfg), "--strict-mcp-config", "--allowedTools", "mcp__everything")
	cmd.Dir = t.TempDir()
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + t.TempDir(),
		"HTTPS_PROXY=" + fp.proxyURL,
		"NODE_EXTRA_CA_CERTS=" + fp.caFile(),
		"ANTHROPIC_BASE_URL=" + fmt.Sprintf("https://localhost:%d", modelPort),
		"ANTHROPIC_API_KEY=dummy",
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
		"DISABLE_AUTOUPDATER=1",
		// -p starts the first request before remote MCP servers connect
		// unless told to wait.
		"MCP_CONNECTION_NONBLOCKING=false",
		// and waits up to 60 s for it (the most it honours; 30 s by
		// default), which a loaded machine starting node can need.
		"MCP_TIMEOUT=60000",
	}
	var stdout, stderr syncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	ownProcessGroup(cmd)
	err := cmd.Run()
	_ = killGroup(cmd)
	if err != nil {
		t.Fatalf("claude -p through HTTPS_PROXY: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	var res struct {
		Result  string `json:"result"`
		IsError bool   `json:"is_error"`
	}
	if err := json.Unmarshal([]byte(stdout.String()), &res); err != nil || res.IsError || res.Result != final {
		t.Errorf("claude's result = %+v (%v), want %q\n%s", res, err, final, stdout.String())
	}

	byTurn := map[string]anthropicRequest{}
	var turns []string
	for _, r := range model.records(t) {
		if r.Path == "/v1/messages" && len(byTurn) == 0 {
			var req struct {
				Tools []struct {
					Name string `json:"name"`
				} `json:"tools"`
			}
			_ = json.Unmarshal(r.Body, &req)
			t.Logf("request %d (%s) offers %d tools: %v", r.Seq, r.Turn, len(req.Tools), req.Tools)
		}
		if r.Path != "/v1/messages" || r.Turn == "fallback" {
			continue
		}
		byTurn[r.Turn] = parseAnthropic(t, r)
		turns = append(turns, r.Turn)
	}
	if strings.Join(turns, ",") != "create,echo,return,final" {
		t.Fatalf("the model played %v, want create, echo, return, then final on the folded conversation", turns)
	}
	// Before the fold the model saw the echo, scrubbed.
	echo, ok := byTurn["return"].toolResultText(t, "toolu_r_02")
	if !ok || !strings.Contains(echo, "ECHOMARK") || strings.Contains(echo, secret) || !strings.Contains(echo, "[REDACTED:"+rule+"]") {
		t.Errorf("the echo as the model saw it = %q, %v: want it with the key redacted", echo, ok)
	}
	// After the return, the branch is folded out.
	body := string(byTurn["final"].rec.Body)
	if strings.Contains(body, "ECHOMARK") || strings.Contains(body, "toolu_r_02") {
		t.Error("the final request still holds the branch's echo: not folded")
	}
	var created struct {
		BranchID string `json:"branch_id"`
	}
	text, _ := byTurn["echo"].toolResultText(t, "toolu_r_01")
	if err := json.Unmarshal([]byte(text), &created); err != nil || created.BranchID == "" {
		t.Fatalf("branch_create's answer as the model saw it: %q", text)
	}
	// The echo went through the intercept chain, charged to that branch.
	var charged bool
	for _, r := range auditRecords(t, filepath.Join(fp.state, "audit.jsonl"), "call") {
		if r["upstream"] == "everything" && r["tool"] == "echo" && r["branch"] == created.BranchID {
			charged = true
		}
	}
	if !charged {
		t.Errorf("no audit record of the echo charged to %s", created.BranchID)
	}
	if n := len(auditRecords(t, filepath.Join(fp.state, "audit.jsonl"), "model")); n < 4 {
		t.Errorf("%d model records in the audit log: the model requests did not all go through the model front", n)
	}
}
