package modelfront

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/foldproxy/foldproxy/fold/modelwire"
)

// modelNoBranches is a fold state that knows no branch: the context
// manager then forwards every request unchanged.
type modelNoBranches struct{}

func (modelNoBranches) Branch(context.Context, string) (modelwire.Branch, bool, error) {
	return modelwire.Branch{}, false, nil
}

func (modelNoBranches) ChargeResult(_ context.Context, _, _, _, text string) (modelwire.Decision, error) {
	return modelwire.Decision{Keep: len(text)}, nil
}

// modelEvents collects the events of the model front. The front sends an
// event once it is done with a request, log line included, but the agent
// may have its answer a moment before: last waits for the event.
type modelEvents struct {
	ch chan Event
}

func (m *modelEvents) ModelRequest(ev Event) { m.ch <- ev }

func (m *modelEvents) last(t *testing.T) Event {
	t.Helper()
	return <-m.ch
}

// modelUpstream is a fake model API that records what it receives and
// answers with serve.
type modelUpstream struct {
	srv   *httptest.Server
	mu    sync.Mutex
	got   []*http.Request
	body  [][]byte
	serve func(w http.ResponseWriter, r *http.Request)
}

func newModelUpstream(t *testing.T, serve func(w http.ResponseWriter, r *http.Request)) *modelUpstream {
	t.Helper()
	u := &modelUpstream{serve: serve}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		u.mu.Lock()
		u.got = append(u.got, r)
		u.body = append(u.body, b)
		u.mu.Unlock()
		u.serve(w, r)
	}))
	t.Cleanup(u.srv.Close)
	return u
}

func (u *modelUpstream) last(t *testing.T) (*http.Request, []byte) {
	t.Helper()
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.got) == 0 {
		t.Fatal("the model API received nothing")
	}
	return u.got[len(u.got)-1], u.body[len(u.body)-1]
}

func (u *modelUpstream) count() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.got)
}

// newModelTest serves the model front on a loopback test server, both
// model APIs pointing at up (nil: a closed port).
func newModelTest(t *testing.T, up *modelUpstream, tune func(*Options)) (string, *modelEvents, *modelLog) {
	t.Helper()
	target := "http://" + closedAddr(t)
	if up != nil {
		target = up.srv.URL
	}
	obs := &modelEvents{ch: make(chan Event, 100)}
	logs := &modelLog{}
	opts := Options{
		AnthropicURL: target,
		OpenAIURL:    target,
		Loopback:     true,
		State:        modelNoBranches{},
		Observer:     obs,
		Logger:       slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	if tune != nil {
		tune(&opts)
	}
	h, err := NewHandler(opts)
	if err != nil {
		t.Fatalf("NewHandler: %v", err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL, obs, logs
}

// modelLog is the front's log, safe for concurrent use.
type modelLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *modelLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *modelLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// closedAddr is a loopback address where nothing listens.
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func modelPost(t *testing.T, url, body string, hdr map[string]string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func readAll(t *testing.T, r io.Reader) []byte {
	t.Helper()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

const modelTestRequest = `{"model":"claude-x","max_tokens":10,"stream":true,"messages":[{"role":"user","content":"hi"}]}`

// TestModelStreamRelayedAsItArrives: the first event reaches the agent
// while the model API is still holding the second, so nothing waits for the
// whole answer, and the stream arrives byte for byte.
func TestModelStreamRelayedAsItArrives(t *testing.T) {
	first := "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\"}}\n\n"
	rest := "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"h\\u00e9\"}}\n\n" +
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
	release := make(chan struct{})
	up := newModelUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
		w.Header().Set("Request-Id", "req_123")
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, first)
		http.NewResponseController(w).Flush()
		<-release
		io.WriteString(w, rest)
	})
	url, obs, _ := newModelTest(t, up, nil)
	resp := modelPost(t, url+"/v1/messages?beta=true&x=%zz;y", modelTestRequest, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if got := resp.Header.Get("Request-Id"); got != "req_123" {
		t.Errorf("Request-Id = %q, want the model API's", got)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream; charset=utf-8" {
		t.Errorf("Content-Type = %q", ct)
	}
	br := bufio.NewReader(resp.Body)
	buf := make([]byte, len(first))
	if _, err := io.ReadFull(br, buf); err != nil {
		t.Fatalf("reading the first event: %v", err)
	}
	if string(buf) != first {
		t.Fatalf("first event = %q, want %q", buf, first)
	}
	close(release) // only now may the model API send the rest
	if got := string(readAll(t, br)); got != rest {
		t.Errorf("rest of the stream = %q, want %q", got, rest)
	}
	r, body := up.last(t)
	if r.URL.Path != "/v1/messages" || r.URL.RawQuery != "beta=true&x=%zz;y" {
		t.Errorf("forwarded to %s?%s, want /v1/messages?beta=true&x=%%zz;y", r.URL.Path, r.URL.RawQuery)
	}
	if string(body) != modelTestRequest {
		t.Errorf("forwarded body = %s, want the request unchanged (no branches)", body)
	}
	if ev := obs.last(t); ev.Outcome != OutcomeOK || ev.Dialect != "anthropic" || ev.Status != 200 {
		t.Errorf("event = %+v", ev)
	}
}

// TestModelHeadersPassThrough: credentials and every other header go to
// the model API untouched and come back the same way; foldproxy's own
// token header and hop-by-hop headers do not; no credential is logged.
func TestModelHeadersPassThrough(t *testing.T) {
	answer := `{"id":"msg_1","type":"message","content":[{"type":"text","text":"ok"}]}`
	up := newModelUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Anthropic-Ratelimit-Requests-Remaining", "99")
		w.Header().Add("Set-Cookie", "a=1")
		w.Header().Add("Set-Cookie", "b=2")
		io.WriteString(w, answer)
	})
	url, obs, logs := newModelTest(t, up, func(o *Options) { o.Token = "fp-token-1" })
	hdr := map[string]string{
		"X-Api-Key":                "sk-ant-secret-1",
		"Authorization":            "Bearer sk-oauth-secret-2",
		"Anthropic-Beta":           "prompt-caching-scope-2026-01-05,context-management-2025-06-27",
		"Anthropic-Version":        "2023-06-01",
		"X-Claude-Code-Session-Id": "sess-1",
		"User-Agent":               "claude-cli/2.1.197",
		TokenHeader:                "fp-token-1",
		"Connection":               "keep-alive, X-Hop",
		"X-Hop":                    "hop-value",
	}
	resp := modelPost(t, url+"/v1/messages", modelTestRequest, hdr)
	if got := string(readAll(t, resp.Body)); got != answer || resp.StatusCode != 200 {
		t.Fatalf("answer = %d %q, want 200 %q", resp.StatusCode, got, answer)
	}
	if got := resp.Header.Get("Anthropic-Ratelimit-Requests-Remaining"); got != "99" {
		t.Errorf("response header lost: %q", got)
	}
	if got := resp.Header.Values("Set-Cookie"); len(got) != 2 {
		t.Errorf("Set-Cookie = %q, want both", got)
	}
	r, _ := up.last(t)
	for k, v := range hdr {
		switch k {
		case TokenHeader, "Connection", "X-Hop":
			if got := r.Header.Get(k); got != "" {
				t.Errorf("%s reached the model API: %q", k, got)
			}
		default:
			if got := r.Header.Get(k); got != v {
				t.Errorf("%s = %q at the model API, want %q", k, got, v)
			}
		}
	}
	if got := r.Header.Get("X-Forwarded-For"); got != "" {
		t.Errorf("X-Forwarded-For = %q: foldproxy adds nothing", got)
	}
	obs.last(t) // the front is done with the request, its log written
	for _, secret := range []string{"sk-ant-secret-1", "sk-oauth-secret-2", "fp-token-1"} {
		if strings.Contains(logs.String(), secret) {
			t.Errorf("the log holds a credential %q:\n%s", secret, logs)
		}
	}
}

// TestModelUpstreamErrorsRelayed: the model API's own errors reach the
// agent as they are.
func TestModelUpstreamErrorsRelayed(t *testing.T) {
	answer := `{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}`
	up := newModelUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Retry-After", "7")
		w.WriteHeader(http.StatusTooManyRequests)
		io.WriteString(w, answer)
	})
	url, obs, _ := newModelTest(t, up, nil)
	resp := modelPost(t, url+"/v1/messages", modelTestRequest, nil)
	if got := string(readAll(t, resp.Body)); resp.StatusCode != 429 || got != answer || resp.Header.Get("Retry-After") != "7" {
		t.Errorf("got %d %q (Retry-After %q), want 429 %q", resp.StatusCode, got, resp.Header.Get("Retry-After"), answer)
	}
	if resp.Header.Get("X-Foldproxy-Error") != "" {
		t.Error("an error of the model API is marked as foldproxy's")
	}
	if ev := obs.last(t); ev.Outcome != OutcomeUpstreamError || ev.Status != 429 {
		t.Errorf("event = %+v", ev)
	}
}

// modelAPIError decodes an error in either dialect's shape.
type modelAPIError struct {
	Type  string `json:"type"`
	Error struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
}

func modelErrorOf(t *testing.T, resp *http.Response) modelAPIError {
	t.Helper()
	body := readAll(t, resp.Body)
	var e modelAPIError
	if err := json.Unmarshal(body, &e); err != nil || e.Error.Message == "" {
		t.Fatalf("error body %q is not a model API error: %v", body, err)
	}
	if resp.Header.Get("Content-Type") != "application/json" {
		t.Errorf("error Content-Type = %q", resp.Header.Get("Content-Type"))
	}
	return e
}

// TestModelUnreachable: no model API gives 502 in the dialect's own shape,
// naming the host, without the agent's credentials in the log.
func TestModelUnreachable(t *testing.T) {
	url, obs, logs := newModelTest(t, nil, nil)
	for _, tt := range []struct {
		path, wantTop, wantType string
	}{
		{"/v1/messages", "error", "api_error"},
		{"/v1/chat/completions", "", "server_error"},
		{"/v1/responses", "", "server_error"},
	} {
		resp := modelPost(t, url+tt.path, `{"model":"m","messages":[],"input":"x"}`, map[string]string{"X-Api-Key": "sk-unreach-secret"})
		if resp.StatusCode != http.StatusBadGateway {
			t.Errorf("%s: status %d, want 502", tt.path, resp.StatusCode)
		}
		e := modelErrorOf(t, resp)
		if e.Type != tt.wantTop || e.Error.Type != tt.wantType || !strings.Contains(e.Error.Message, "could not reach") ||
			!strings.Contains(e.Error.Message, "127.0.0.1") {
			t.Errorf("%s: error = %+v", tt.path, e)
		}
		if ev := obs.last(t); ev.Outcome != OutcomeUnreachable || ev.Status != 502 {
			t.Errorf("%s: event = %+v", tt.path, ev)
		}
	}
	if strings.Contains(logs.String(), "sk-unreach-secret") {
		t.Errorf("the log holds the API key:\n%s", logs)
	}
}

// TestModelRefusals: what foldproxy answers itself, each in the right
// dialect's shape, without reaching the model API.
func TestModelRefusals(t *testing.T) {
	up := newModelUpstream(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "{}") })
	url, _, _ := newModelTest(t, up, func(o *Options) { o.MaxRequestBytes = 2048 })
	tests := []struct {
		name, method, path, body string
		hdr                      map[string]string
		status                   int
		errType, says            string
	}{
		{"root probe", http.MethodGet, "/", "", nil, 404, "not_found_error", "not found"},
		{"root head", http.MethodHead, "/", "", nil, 404, "", ""},
		{"unknown path", http.MethodPost, "/v2/messages", modelTestRequest, nil, 404, "not_found_error", "/v2/messages"},
		{"GET messages", http.MethodGet, "/v1/messages", "", nil, 405, "invalid_request_error", "POST"},
		{"not JSON", http.MethodPost, "/v1/messages", `{"model":`, nil, 400, "invalid_request_error", "not valid JSON"},
		{"not JSON openai", http.MethodPost, "/v1/chat/completions", `nope`, nil, 400, "invalid_request_error", "not valid JSON"},
		{"too large", http.MethodPost, "/v1/messages", `{"x":"` + strings.Repeat("a", 4096) + `"}`, nil, 413, "request_too_large", "maxRequestBytes"},
		{"compressed", http.MethodPost, "/v1/messages", modelTestRequest, map[string]string{"Content-Encoding": "gzip"}, 415, "invalid_request_error", "gzip"},
		{"foreign host", http.MethodPost, "/v1/messages", modelTestRequest, map[string]string{"Host": "evil.example.com"}, 403, "permission_error", "loopback"},
		{"foreign origin", http.MethodPost, "/v1/messages", modelTestRequest, map[string]string{"Origin": "https://evil.example.com"}, 403, "permission_error", "Origin"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := up.count()
			req, err := http.NewRequest(tt.method, url+tt.path, strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range tt.hdr {
				if k == "Host" {
					req.Host = v
				} else {
					req.Header.Set(k, v)
				}
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != tt.status {
				t.Errorf("status %d, want %d", resp.StatusCode, tt.status)
			}
			if tt.method != http.MethodHead {
				e := modelErrorOf(t, resp)
				if e.Error.Type != tt.errType || !strings.Contains(e.Error.Message, tt.says) {
					t.Errorf("error = %+v, want type %s saying %q", e, tt.errType, tt.says)
				}
			}
			if up.count() != before {
				t.Error("the request reached the model API")
			}
		})
	}
}

// TestModelToken: with a token, model requests need it in
// TokenHeader; Authorization stays the model API's.
func TestModelToken(t *testing.T) {
	up := newModelUpstream(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "{}") })
	url, _, _ := newModelTest(t, up, func(o *Options) { o.Token = "fp-token-2"; o.Loopback = false })
	for _, hdr := range []map[string]string{
		nil,
		{"Authorization": "Bearer fp-token-2"},
		{TokenHeader: "wrong"},
	} {
		resp := modelPost(t, url+"/v1/messages", modelTestRequest, hdr)
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%v: status %d, want 401", hdr, resp.StatusCode)
			continue
		}
		if e := modelErrorOf(t, resp); e.Error.Type != "authentication_error" || !strings.Contains(e.Error.Message, TokenHeader) {
			t.Errorf("%v: error = %+v", hdr, e)
		}
	}
	if up.count() != 0 {
		t.Fatal("a request without the token reached the model API")
	}
	resp := modelPost(t, url+"/v1/chat/completions", `{"model":"m","messages":[]}`, map[string]string{TokenHeader: "fp-token-2", "Authorization": "Bearer sk-openai"})
	if resp.StatusCode != 200 {
		t.Fatalf("with the token: status %d", resp.StatusCode)
	}
	r, _ := up.last(t)
	if r.Header.Get("Authorization") != "Bearer sk-openai" || r.Header.Get(TokenHeader) != "" {
		t.Errorf("forwarded Authorization %q, %s %q", r.Header.Get("Authorization"), TokenHeader, r.Header.Get(TokenHeader))
	}
}

// TestModelRouting: each path goes to its model API, under the base URL's
// own path; other /v1 paths are relayed untouched.
func TestModelRouting(t *testing.T) {
	ant := newModelUpstream(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, `"anthropic"`) })
	oai := newModelUpstream(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, `"openai"`) })
	url, obs, _ := newModelTest(t, nil, func(o *Options) {
		o.AnthropicURL = ant.srv.URL + "/gw/anthropic"
		o.OpenAIURL = oai.srv.URL
	})
	tests := []struct {
		method, path string
		hdr          map[string]string
		want, upPath string
		dialect      string
	}{
		{"POST", "/v1/messages", nil, "anthropic", "/gw/anthropic/v1/messages", "anthropic"},
		{"POST", "/v1/messages/count_tokens", nil, "anthropic", "/gw/anthropic/v1/messages/count_tokens", "anthropic"},
		{"POST", "/v1/chat/completions", nil, "openai", "/v1/chat/completions", "openai-chat"},
		{"POST", "/v1/responses", nil, "openai", "/v1/responses", "openai-responses"},
		{"GET", "/v1/models", map[string]string{"Anthropic-Version": "2023-06-01"}, "anthropic", "/gw/anthropic/v1/models", "passthrough"},
		{"GET", "/v1/models", nil, "openai", "/v1/models", "passthrough"},
		{"POST", "/v1/messages/batches", nil, "anthropic", "/gw/anthropic/v1/messages/batches", "passthrough"},
	}
	for _, tt := range tests {
		var body io.Reader
		if tt.method == "POST" {
			body = strings.NewReader(modelTestRequest)
		}
		req, _ := http.NewRequest(tt.method, url+tt.path, body)
		for k, v := range tt.hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		got := string(readAll(t, resp.Body))
		resp.Body.Close()
		if got != `"`+tt.want+`"` {
			t.Errorf("%s %s went to %s, want %s", tt.method, tt.path, got, tt.want)
			continue
		}
		up := ant
		if tt.want == "openai" {
			up = oai
		}
		if r, _ := up.last(t); r.URL.Path != tt.upPath {
			t.Errorf("%s %s forwarded as %s, want %s", tt.method, tt.path, r.URL.Path, tt.upPath)
		}
		if ev := obs.last(t); ev.Dialect != tt.dialect {
			t.Errorf("%s %s: dialect %q, want %q", tt.method, tt.path, ev.Dialect, tt.dialect)
		}
	}
}

func TestNewModelHandlerValidates(t *testing.T) {
	ok := Options{AnthropicURL: "https://api.anthropic.com", OpenAIURL: "https://api.openai.com", Loopback: true, State: modelNoBranches{}}
	tests := []struct {
		name string
		tune func(*Options)
		says string
	}{
		{"no state", func(o *Options) { o.State = nil }, "State"},
		{"no token off loopback", func(o *Options) { o.Loopback = false }, "Token"},
		{"token with space", func(o *Options) { o.Token = " x" }, "Token"},
		{"bad anthropic url", func(o *Options) { o.AnthropicURL = "api.anthropic.com" }, "AnthropicURL"},
		{"bad openai url", func(o *Options) { o.OpenAIURL = "" }, "OpenAIURL"},
		{"bad origin", func(o *Options) { o.AllowedOrigins = []string{"x"} }, "AllowedOrigins"},
		{"negative size", func(o *Options) { o.MaxRequestBytes = -1 }, "MaxRequestBytes"},
	}
	for _, tt := range tests {
		o := ok
		tt.tune(&o)
		if _, err := NewHandler(o); err == nil || !strings.Contains(err.Error(), tt.says) {
			t.Errorf("%s: err = %v, want one naming %s", tt.name, err, tt.says)
		}
	}
	if _, err := NewHandler(ok); err != nil {
		t.Errorf("valid options: %v", err)
	}
}

// modelOneBranch knows one returned branch.
type modelOneBranch struct{ modelNoBranches }

func (modelOneBranch) Branch(_ context.Context, id string) (modelwire.Branch, bool, error) {
	if id != "b-1" {
		return modelwire.Branch{}, false, nil
	}
	return modelwire.Branch{ID: "b-1", Closed: true, Summary: "SUMMARY of the branch", Budget: 1000, Used: 10}, true, nil
}

// TestModelForwardsTheFold: what the model API receives is the context
// manager's output, and the event says what it did.
func TestModelForwardsTheFold(t *testing.T) {
	up := newModelUpstream(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, `{"type":"message"}`) })
	url, obs, _ := newModelTest(t, up, func(o *Options) { o.State = modelOneBranch{} })
	req := `{"model":"m","max_tokens":10,"messages":[` +
		`{"role":"user","content":"go"},` +
		`{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"mcp__foldproxy__branch_create","input":{"description":"d"}}]},` +
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"{\"branch_id\":\"b-1\"}"}]},` +
		`{"role":"assistant","content":[{"type":"tool_use","id":"t2","name":"Read","input":{"file_path":"/a"}}]},` +
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t2","content":"BRANCH-OUTPUT ` + strings.Repeat("words of a file ", 200) + `"}]},` +
		`{"role":"assistant","content":[{"type":"tool_use","id":"t3","name":"mcp__foldproxy__branch_return","input":{"message":"m"}}]},` +
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t3","content":"{\"success\":true,\"branch_id\":\"b-1\"}"}]},` +
		`{"role":"assistant","content":[{"type":"text","text":"ok"}]},` +
		`{"role":"user","content":"next"}]}`
	resp := modelPost(t, url+"/v1/messages", req, nil)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, readAll(t, resp.Body))
	}
	r, body := up.last(t)
	if strings.Contains(string(body), "BRANCH-OUTPUT") || !strings.Contains(string(body), "SUMMARY of the branch") {
		t.Errorf("forwarded body is not folded:\n%s", body)
	}
	if r.ContentLength != int64(len(body)) {
		t.Errorf("Content-Length %d for a %d-byte body", r.ContentLength, len(body))
	}
	ev := obs.last(t)
	if !ev.Changed || ev.Folded != 1 || ev.TokensAfter >= ev.TokensBefore || ev.Outcome != OutcomeOK {
		t.Errorf("event = %+v, want one branch folded and fewer tokens", ev)
	}
}

// TestModelScrubFailsClosed: a tool result the scrubber cannot scan never
// reaches the model API: the context manager withholds it.
func TestModelScrubFailsClosed(t *testing.T) {
	up := newModelUpstream(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "{}") })
	url, obs, _ := newModelTest(t, up, func(o *Options) {
		o.Wire.Scrub = func(context.Context, string) (string, error) { return "", errors.New("scan timed out") }
	})
	req := `{"model":"m","max_tokens":10,"messages":[` +
		`{"role":"user","content":"go"},` +
		`{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"Bash","input":{"command":"env"}}]},` +
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"AWS_SECRET=abc"}]}]}`
	resp := modelPost(t, url+"/v1/messages", req, nil)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, readAll(t, resp.Body))
	}
	_, fwd := up.last(t)
	if strings.Contains(string(fwd), "AWS_SECRET") || !strings.Contains(string(fwd), "withheld") {
		t.Errorf("forwarded:\n%s\nwant the unscanned result withheld", fwd)
	}
	if ev := obs.last(t); !ev.Changed {
		t.Errorf("event = %+v", ev)
	}
}

// modelBrokenState fails every lookup, as a store that cannot be read.
type modelBrokenState struct{ modelNoBranches }

func (modelBrokenState) Branch(context.Context, string) (modelwire.Branch, bool, error) {
	return modelwire.Branch{}, false, errors.New("store unreadable")
}

// TestModelStateFailureNotForwarded: when the fold state fails, budgets
// would not hold: the request is not forwarded and the agent hears why, in
// its dialect's shape.
func TestModelStateFailureNotForwarded(t *testing.T) {
	up := newModelUpstream(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "{}") })
	url, obs, _ := newModelTest(t, up, func(o *Options) { o.State = modelBrokenState{} })
	req := `{"model":"m","max_tokens":10,"messages":[` +
		`{"role":"user","content":"go"},` +
		`{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"mcp__foldproxy__branch_create","input":{"description":"d"}}]},` +
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"{\"branch_id\":\"b-1\"}"}]}]}`
	resp := modelPost(t, url+"/v1/messages", req, nil)
	if resp.StatusCode != http.StatusInternalServerError {
		t.Errorf("status %d, want 500", resp.StatusCode)
	}
	if e := modelErrorOf(t, resp); e.Type != "error" || e.Error.Type != "api_error" || !strings.Contains(e.Error.Message, "not forwarded") {
		t.Errorf("error = %+v", e)
	}
	if up.count() != 0 {
		t.Error("the request reached the model API")
	}
	if ev := obs.last(t); ev.Outcome != OutcomeError {
		t.Errorf("event = %+v", ev)
	}
}

// TestModelForwardsTheFoldOpenAI: the OpenAI dialects fold through the
// front the same way.
func TestModelForwardsTheFoldOpenAI(t *testing.T) {
	output := `BRANCH-OUTPUT ` + strings.Repeat("words of a file ", 100)
	tests := []struct{ path, dialect, body string }{
		{"/v1/chat/completions", "openai-chat", `{"model":"gpt","stream":true,"messages":[` +
			`{"role":"user","content":"go"},` +
			`{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"foldproxy__branch_create","arguments":"{\"description\":\"d\"}"}}]},` +
			`{"role":"tool","tool_call_id":"c1","content":"{\"branch_id\":\"b-1\"}"},` +
			`{"role":"assistant","content":null,"tool_calls":[{"id":"c2","type":"function","function":{"name":"shell","arguments":"{\"cmd\":\"cat a\"}"}}]},` +
			`{"role":"tool","tool_call_id":"c2","content":"` + output + `"},` +
			`{"role":"assistant","content":null,"tool_calls":[{"id":"c3","type":"function","function":{"name":"foldproxy__branch_return","arguments":"{\"message\":\"m\"}"}}]},` +
			`{"role":"tool","tool_call_id":"c3","content":"{\"success\":true,\"branch_id\":\"b-1\"}"},` +
			`{"role":"user","content":"next"}]}`},
		{"/v1/responses", "openai-responses", `{"model":"gpt","stream":true,"input":[` +
			`{"role":"user","content":"go"},` +
			`{"type":"function_call","call_id":"c1","name":"foldproxy__branch_create","arguments":"{\"description\":\"d\"}"},` +
			`{"type":"function_call_output","call_id":"c1","output":"{\"branch_id\":\"b-1\"}"},` +
			`{"type":"function_call","call_id":"c2","name":"shell","arguments":"{\"cmd\":\"cat a\"}"},` +
			`{"type":"function_call_output","call_id":"c2","output":"` + output + `"},` +
			`{"type":"function_call","call_id":"c3","name":"foldproxy__branch_return","arguments":"{\"message\":\"m\"}"},` +
			`{"type":"function_call_output","call_id":"c3","output":"{\"success\":true,\"branch_id\":\"b-1\"}"},` +
			`{"role":"user","content":"next"}]}`},
	}
	for _, tt := range tests {
		up := newModelUpstream(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "data: {\"choices\":[]}\n\ndata: [DONE]\n\n")
		})
		url, obs, _ := newModelTest(t, up, func(o *Options) { o.State = modelOneBranch{} })
		resp := modelPost(t, url+tt.path, tt.body, map[string]string{"Authorization": "Bearer sk-x"})
		if got := string(readAll(t, resp.Body)); resp.StatusCode != 200 || got != "data: {\"choices\":[]}\n\ndata: [DONE]\n\n" {
			t.Errorf("%s: answer %d %q", tt.path, resp.StatusCode, got)
		}
		r, body := up.last(t)
		if r.URL.Path != tt.path || r.Header.Get("Authorization") != "Bearer sk-x" {
			t.Errorf("%s: forwarded to %s with Authorization %q", tt.path, r.URL.Path, r.Header.Get("Authorization"))
		}
		if strings.Contains(string(body), "BRANCH-OUTPUT") || !strings.Contains(string(body), "SUMMARY of the branch") {
			t.Errorf("%s: forwarded body is not folded:\n%s", tt.path, body)
		}
		if ev := obs.last(t); ev.Dialect != tt.dialect || ev.Folded != 1 {
			t.Errorf("%s: event = %+v", tt.path, ev)
		}
	}
}
