package transparent

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/foldproxy/foldproxy/intercept"
	"github.com/foldproxy/foldproxy/policy"
	"github.com/foldproxy/foldproxy/policy/jsonscan"
	"github.com/foldproxy/foldproxy/proxy"
)

// wordScrubber is a JSONScrubber double that redacts the word SECRET.
type wordScrubber struct{}

func (wordScrubber) ScrubJSON(_ context.Context, raw json.RawMessage) (json.RawMessage, map[string]int, error) {
	if bytes.Contains(raw, []byte("UNSCANNABLE")) {
		return nil, nil, errors.New("scan failed")
	}
	n := bytes.Count(raw, []byte("SECRET"))
	if n == 0 {
		return raw, nil, nil
	}
	return bytes.ReplaceAll(raw, []byte("SECRET"), []byte("[REDACTED:word]")), map[string]int{"word": n}, nil
}

// fakeRemote is a scripted remote MCP server (streamable HTTP on /mcp,
// legacy SSE on /sse and /messages) that records what it received.
type fakeRemote struct {
	t   *testing.T
	srv *httptest.Server
	mu  sync.Mutex
	got []string // "METHOD path jsonrpc-method auth session"
	sse chan string
}

func newFakeRemote(t *testing.T) *fakeRemote {
	f := &fakeRemote{t: t, sse: make(chan string, 10)}
	f.srv = httptest.NewTLSServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeRemote) received() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.got...)
}

func (f *fakeRemote) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var m proxy.Message
	_ = json.Unmarshal(body, &m)
	f.mu.Lock()
	f.got = append(f.got, strings.Join([]string{r.Method, r.URL.Path, m.Method, r.Header.Get("Authorization"), r.Header.Get("Mcp-Session-Id")}, " "))
	f.mu.Unlock()
	switch {
	case r.URL.Path == "/mcp" && r.Method == http.MethodPost && r.Header.Get("Authorization") != "Bearer good":
		w.Header().Set("WWW-Authenticate", `Bearer resource_metadata="https://x/.well-known/oauth-protected-resource"`)
		w.WriteHeader(http.StatusUnauthorized)
	case r.URL.Path == "/mcp" && r.Method == http.MethodPost:
		w.Header().Set("Mcp-Session-Id", "sid-1")
		switch m.Method {
		case "tools/list":
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"tools":[{"name":"echo","description":"says SECRET","inputSchema":{"type":"object"}}]}}`, m.ID)
		case "tools/call":
			if f.oddAnswer(w, jsonscan.StringField(m.Params, "name"), m.ID) {
				return
			}
			if jsonscan.StringField(m.Params, "name") == "json" {
				w.Header().Set("Content-Type", "application/json")
				fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"json SECRET"}]}}`, m.ID)
				return
			}
			w.Header().Set("Content-Type", "text/event-stream")
			if jsonscan.StringField(m.Params, "name") == "ask" {
				// A request to the client on the call's stream.
				fmt.Fprintf(w, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":\"s-1\",\"method\":\"elicitation/create\",\"params\":{\"message\":\"ask SECRET\"}}\n\n")
			}
			// An event stream: a notification, then the result.
			fmt.Fprintf(w, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"level\":\"info\",\"data\":\"log SECRET\"}}\n\n")
			fmt.Fprintf(w, "id: 7\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"echo SECRET\"}]}}\n\n", m.ID)
		default:
			w.WriteHeader(http.StatusAccepted)
		}
	case r.URL.Path == "/mcp" && r.Method == http.MethodGet && r.Header.Get("Mcp-Session-Id") == "sid-odd":
		// A standalone stream whose content type has an empty parameter.
		w.Header().Set("Content-Type", "text/event-stream; charset=")
		io.WriteString(w, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"data\":\"get SECRET\"}}\n\n")
		io.WriteString(w, "event: other\n: note SECRET\ndata: other SECRET\n\n")
	case r.URL.Path == "/mcp" && r.Method == http.MethodGet && r.Header.Get("Mcp-Session-Id") == "sid-405":
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusMethodNotAllowed)
		io.WriteString(w, "no stream here, SECRET")
	case r.URL.Path == "/mcp" && r.Method == http.MethodDelete:
		w.WriteHeader(http.StatusOK)
	case r.URL.Path == "/sse":
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "event: endpoint\ndata: /messages?sessionId=abc\n\n")
		w.(http.Flusher).Flush()
		for {
			select {
			case ev := <-f.sse:
				io.WriteString(w, ev)
				w.(http.Flusher).Flush()
			case <-r.Context().Done():
				return
			}
		}
	case r.URL.Path == "/messages":
		if m.Method == "tools/call" {
			f.sse <- fmt.Sprintf("event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"legacy SECRET\"}]}}\n\n", m.ID)
		}
		w.WriteHeader(http.StatusAccepted)
		io.WriteString(w, "Accepted")
	default:
		io.WriteString(w, "other path "+r.URL.Path)
	}
}

// oddAnswer answers the tools/call of the tools named after the answers
// clients accept that a strict parser of media types would not see as
// JSON or an event stream: each carries SECRET. It reports whether name was
// one of them.
func (f *fakeRemote) oddAnswer(w http.ResponseWriter, name string, id json.RawMessage) bool {
	result := fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"%s SECRET"}]}}`, id, name)
	switch name {
	case "emptycharset":
		w.Header().Set("Content-Type", "application/json; charset=")
		io.WriteString(w, result)
	case "ssecharset":
		w.Header().Set("Content-Type", "text/event-stream; charset=")
		io.WriteString(w, "event: message\ndata: "+result+"\n\n")
	case "upper":
		w.Header().Set("Content-Type", "Application/JSON ; charset=utf-8")
		io.WriteString(w, result)
	case "err400":
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32602,"message":"bad SECRET"}}`, id)
	case "err500":
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusInternalServerError)
		io.WriteString(w, "<p>crashed: SECRET</p>")
	case "plain":
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, "plain SECRET")
	case "notype":
		w.Header()["Content-Type"] = nil // no sniffing: no content type at all
		io.WriteString(w, "untyped SECRET")
	case "unscannable":
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, "UNSCANNABLE SECRET")
	case "encoded":
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Encoding", "br")
		io.WriteString(w, "compressed SECRET")
	default:
		return false
	}
	return true
}

// remoteRig is a forward proxy with a remote front for a fakeRemote, and a
// client that uses it.
type remoteRig struct {
	remote *fakeRemote
	front  *RemoteFront
	fold   *fakeFold
	ended  chan string
	hc     *http.Client
	base   string // https://127.0.0.1:PORT
	mu     sync.Mutex
	exs    []intercept.Exchange // results
	relays []string             // the other exchanges: "kind method"
	served *proxy.ServedTools
	refuse bool
}

func newRemoteRig(t *testing.T) *remoteRig {
	t.Helper()
	rig := &remoteRig{remote: newFakeRemote(t), fold: &fakeFold{}, ended: make(chan string, 10)}
	u, _ := url.Parse(rig.remote.srv.URL)
	port, _ := strconv.Atoi(u.Port())
	rig.base = rig.remote.srv.URL
	// The chain's stand-in: records each exchange, marks the result, and
	// refuses like the budget interceptor when told to. A relayed message
	// (not a result) is recorded and passed on, as the real chain passes it.
	mark := func(next intercept.Handler) intercept.Handler {
		return func(ctx context.Context, ex *intercept.Exchange) error {
			if ex.Kind != intercept.MessageResult {
				rig.mu.Lock()
				rig.relays = append(rig.relays, ex.Kind.String()+" "+ex.Method)
				rig.mu.Unlock()
				return next(ctx, ex)
			}
			rig.mu.Lock()
			refuse := rig.refuse
			rig.mu.Unlock()
			if refuse {
				ex.Outcome = intercept.OutcomeRefused
				ex.Err = errors.New("branch b-1 is closed")
				return ex.Err
			}
			err := next(ctx, ex)
			if ex.Result != nil {
				ex.Result = bytes.ReplaceAll(ex.Result, []byte("SECRET"), []byte("[chained]"))
			}
			rig.mu.Lock()
			rig.exs = append(rig.exs, *ex)
			rig.mu.Unlock()
			return err
		}
	}
	rig.served = proxy.NewServedTools()
	core, err := proxy.New(proxy.Options{
		Fold: endingFold{rig.fold, rig.ended}, Served: rig.served, Settings: policy.Default(),
		Interceptors: []intercept.Interceptor{mark}, Scrubber: wordScrubber{},
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	front, err := NewRemoteFront(RemoteOptions{
		Servers:      []policy.RemoteMCP{{URL: rig.base + "/mcp", Name: "ex"}, {URL: rig.base + "/sse", Name: "legacy"}},
		Settings:     policy.Default(),
		Core:         core,
		Interceptors: []intercept.Interceptor{mark},
		Scrubber:     wordScrubber{},
		Transport:    rig.remote.srv.Client().Transport,
	})
	if err != nil {
		t.Fatal(err)
	}
	rig.front = front
	t.Cleanup(front.Close)
	fp, srv, _ := newTestForward(t, ForwardOptions{Loopback: true, AllowPorts: []int{port}, Remote: front})
	pem, err := os.ReadFile(fp.ca.CertPath())
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	pu, _ := url.Parse(srv.URL)
	tr := &http.Transport{Proxy: http.ProxyURL(pu), TLSClientConfig: &tls.Config{RootCAs: roots}}
	t.Cleanup(tr.CloseIdleConnections)
	rig.hc = &http.Client{Transport: tr}
	return rig
}

func (rig *remoteRig) post(t *testing.T, path, auth, sid, body string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, rig.base+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	if sid != "" {
		req.Header.Set("Mcp-Session-Id", sid)
	}
	resp, err := rig.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func TestRemoteStreamableHTTP(t *testing.T) {
	rig := newRemoteRig(t)

	// Without the client's own token: the server's 401 and its challenge
	// reach the client untouched.
	resp, _ := rig.post(t, "/mcp", "", "", `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(resp.Header.Get("WWW-Authenticate"), "resource_metadata") {
		t.Errorf("401 passthrough: %d %q", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
	}

	// tools/list: scrubbed, the fold tools added, the session id returned.
	resp, got := rig.post(t, "/mcp", "Bearer good", "sid-1", `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`)
	if resp.Header.Get("Mcp-Session-Id") != "sid-1" || !strings.Contains(got, `"name":"echo"`) || !strings.Contains(got, `"name":"branch_create"`) ||
		strings.Contains(got, "SECRET") {
		t.Errorf("tools/list through the proxy: %s %s", resp.Header, got)
	}
	// The model wire knows what the remote front served.
	if !rig.served.Served("echo") || !rig.served.Served("mcp__ex__branch_create") || rig.served.Served("other") {
		t.Errorf("served tools after tools/list: echo %v, branch_create %v, other %v",
			rig.served.Served("echo"), rig.served.Served("mcp__ex__branch_create"), rig.served.Served("other"))
	}

	// A tool call: the notification before it scrubbed, the result through
	// the chain, the event's other fields kept.
	resp, got = rig.post(t, "/mcp", "Bearer good", "sid-1", `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo","arguments":{"x":1}}}`)
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") || !strings.Contains(got, "log [REDACTED:word]") ||
		!strings.Contains(got, "echo [chained]") || !strings.Contains(got, "id: 7\n") || strings.Contains(got, "SECRET") {
		t.Errorf("tools/call through the proxy: %q", got)
	}
	rig.mu.Lock()
	exs := append([]intercept.Exchange(nil), rig.exs...)
	rig.mu.Unlock()
	if len(exs) != 1 || exs[0].Upstream != "ex" || exs[0].Name != "echo" || string(exs[0].Args) != `{"x":1}` || exs[0].Session == "" {
		t.Fatalf("exchanges: %+v", exs)
	}
	rig.mu.Lock()
	relays := append([]string(nil), rig.relays...)
	rig.mu.Unlock()
	if !slices.Contains(relays, "notification notifications/message") || !slices.Contains(relays, "answer response") {
		t.Errorf("relayed messages through the chain: %q, want the log notification and the tools/list answer", relays)
	}
	if len(rig.fold.opened) != 1 || rig.fold.opened[0] != exs[0].Session {
		t.Errorf("fold sessions opened %v, want the exchange's %s", rig.fold.opened, exs[0].Session)
	}

	// A result in a JSON body goes through the chain too.
	resp, got = rig.post(t, "/mcp", "Bearer good", "sid-1", `{"jsonrpc":"2.0","id":31,"method":"tools/call","params":{"name":"json"}}`)
	if resp.Header.Get("Content-Type") != "application/json" || got != `{"jsonrpc":"2.0","id":31,"result":{"content":[{"type":"text","text":"json [chained]"}]}}` {
		t.Errorf("tools/call answered in JSON: %q", got)
	}

	// A fold tool: answered by foldproxy, never sent to the server.
	_, got = rig.post(t, "/mcp", "Bearer good", "sid-1", `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"branch_create","arguments":{}}}`)
	if !strings.Contains(got, "created") || !strings.Contains(got, `"id":4`) {
		t.Errorf("fold tool over the proxy: %s", got)
	}

	// A call the chain refuses does not reach the server.
	rig.mu.Lock()
	rig.refuse = true
	rig.mu.Unlock()
	_, got = rig.post(t, "/mcp", "Bearer good", "sid-1", `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"echo"}}`)
	if !strings.Contains(got, "branch b-1 is closed") || !strings.Contains(got, `"isError":true`) {
		t.Errorf("refused call: %s", got)
	}

	// DELETE ends the fold session.
	req, _ := http.NewRequest(http.MethodDelete, rig.base+"/mcp", nil)
	req.Header.Set("Mcp-Session-Id", "sid-1")
	req.Header.Set("Authorization", "Bearer good")
	if resp, err := rig.hc.Do(req); err != nil || resp.StatusCode != 200 {
		t.Fatalf("DELETE: %v %v", resp, err)
	}

	// Another path of the host: relayed untouched.
	r, err := rig.hc.Get(rig.base + "/.well-known/oauth-protected-resource")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(r.Body)
	r.Body.Close()
	if string(b) != "other path /.well-known/oauth-protected-resource" {
		t.Errorf("other path: %q", b)
	}

	var calls, deleted int
	for _, g := range rig.remote.received() {
		f := strings.Split(g, " ")
		if f[0] == "POST" && f[2] == "tools/call" {
			calls++
		}
		if f[0] == "DELETE" {
			deleted++
		}
		if f[0] != "GET" && f[0] != "DELETE" && (f[3] == "Bearer" && f[5] != "sid-1") {
			t.Errorf("the server got %q: want the client's session id passed through", g)
		}
	}
	if calls != 2 || deleted != 1 {
		t.Errorf("the server got %d tools/call and %d DELETE (want 2 and 1): %q", calls, deleted, rig.remote.received())
	}
	select {
	case id := <-rig.ended:
		if id != exs[0].Session {
			t.Errorf("ended fold session %s, want %s", id, exs[0].Session)
		}
	case <-t.Context().Done():
		t.Fatal("DELETE did not end the fold session")
	}
}

func TestRemoteLegacySSE(t *testing.T) {
	rig := newRemoteRig(t)
	req, _ := http.NewRequest(http.MethodGet, rig.base+"/sse", nil)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := rig.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	ev, err := readEvent(br, 1<<20)
	if err != nil || ev.event != "endpoint" || string(ev.data) != "/messages?sessionId=abc" {
		t.Fatalf("first event: %+v %v", ev, err)
	}
	r, got := rig.post(t, "/messages?sessionId=abc", "", "", `{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"echo"}}`)
	if r.StatusCode != http.StatusAccepted {
		t.Fatalf("POST /messages: %d %s", r.StatusCode, got)
	}
	ev, err = readEvent(br, 1<<20)
	if err != nil || !strings.Contains(string(ev.data), "legacy [chained]") || !strings.Contains(string(ev.data), `"id":9`) {
		t.Fatalf("the call's result on the stream: %+v %v", ev, err)
	}
	// A fold tool's answer travels on the stream too.
	if r, _ := rig.post(t, "/messages?sessionId=abc", "", "", `{"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"name":"branch_create"}}`); r.StatusCode != http.StatusAccepted {
		t.Fatalf("fold tool POST: %d", r.StatusCode)
	}
	ev, err = readEvent(br, 1<<20)
	if err != nil || !strings.Contains(string(ev.data), "created") || !strings.Contains(string(ev.data), `"id":10`) {
		t.Fatalf("the fold tool's answer on the stream: %+v %v", ev, err)
	}
}

func TestReadEvent(t *testing.T) {
	in := ": comment\r\nid: 1\r\nevent: message\r\ndata: {\"a\":\r\ndata: 1}\r\n\r\n\n\ndata: x\n"
	br := bufio.NewReader(strings.NewReader(in))
	ev, err := readEvent(br, 1<<20)
	if err != nil || ev.event != "message" || string(ev.data) != "{\"a\":\n1}" || len(ev.lines) != 3 {
		t.Fatalf("first event: %+v %v", ev, err)
	}
	var out bytes.Buffer
	_ = ev.write(&out, []byte(`{"a":1}`))
	if out.String() != ": comment\nid: 1\nevent: message\ndata: {\"a\":1}\n\n" {
		t.Errorf("written: %q", out.String())
	}
	ev, err = readEvent(br, 1<<20)
	if err != nil || string(ev.data) != "x" {
		t.Fatalf("last event, without its blank line: %+v %v", ev, err)
	}
	if _, err = readEvent(br, 1<<20); !errors.Is(err, io.EOF) {
		t.Errorf("at the end: %v", err)
	}
	if _, err := readEvent(bufio.NewReaderSize(strings.NewReader("data: "+strings.Repeat("x", 5000)+"\n\n"), 16), 1000); err == nil || !strings.Contains(err.Error(), "maxMessageBytes") {
		t.Errorf("an event over the bound: %v", err)
	}
}

func FuzzReadEvent(f *testing.F) {
	f.Add([]byte("event: message\ndata: {}\n\n"))
	f.Add([]byte("data: a\r\ndata: b\r\n\r\nid: 3\n"))
	f.Add([]byte(":\n\n\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		br := bufio.NewReaderSize(bytes.NewReader(in), 16)
		for range 1000 {
			ev, err := readEvent(br, 4096)
			if err != nil {
				return
			}
			var out bytes.Buffer
			if err := ev.write(&out, ev.data); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// endingFold is fakeFold that tells when a session ends.
type endingFold struct {
	*fakeFold
	ended chan string
}

func (f endingFold) EndSession(ctx context.Context, id string) error {
	f.ended <- id
	return f.fakeFold.EndSession(ctx, id)
}

// TestRemoteAnswersNeverRaw: every answer of the server's MCP endpoint
// reaches the client scrubbed or through the chain, whatever its status
// and content type; one that cannot be scanned is withheld.
func TestRemoteAnswersNeverRaw(t *testing.T) {
	rig := newRemoteRig(t)
	call := func(name string) (*http.Response, string) {
		t.Helper()
		return rig.post(t, "/mcp", "Bearer good", "sid-1",
			`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"`+name+`"}}`)
	}
	for _, c := range []struct {
		tool   string
		status int
		want   string // in the body the client gets
	}{
		// Read as JSON or an event stream by clients (the part of the
		// media type before ';'): through the chain.
		{"emptycharset", 200, "emptycharset [chained]"},
		{"ssecharset", 200, "ssecharset [chained]"},
		{"upper", 200, "upper [chained]"},
		// Quoted by clients in their errors: scrubbed.
		{"err400", 400, "bad [REDACTED:word]"},
		{"err500", 500, "crashed: [REDACTED:word]"},
		{"plain", 200, "plain [REDACTED:word]"},
		{"notype", 200, "untyped [REDACTED:word]"},
		// Not scannable: withheld.
		{"unscannable", 502, "withheld"},
		{"encoded", 502, "withheld"},
	} {
		resp, got := call(c.tool)
		if resp.StatusCode != c.status || !strings.Contains(got, c.want) || strings.Contains(got, "SECRET") {
			t.Errorf("%s: HTTP %d %q; want HTTP %d with %q and no SECRET", c.tool, resp.StatusCode, got, c.status, c.want)
		}
	}

	// The GET stream: the same reading of its content type, and events of
	// other names scrubbed too; a refused GET's body scrubbed.
	get := func(sid string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, rig.base+"/mcp", nil)
		req.Header.Set("Accept", "text/event-stream")
		req.Header.Set("Mcp-Session-Id", sid)
		resp, err := rig.hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	if resp, got := get("sid-odd"); resp.StatusCode != 200 || !strings.Contains(got, "get [REDACTED:word]") ||
		!strings.Contains(got, "other [REDACTED:word]") || !strings.Contains(got, ": note [REDACTED:word]") || strings.Contains(got, "SECRET") {
		t.Errorf("GET stream: HTTP %d %q", resp.StatusCode, got)
	}
	if resp, got := get("sid-405"); resp.StatusCode != 405 || !strings.Contains(got, "no stream here, [REDACTED:word]") || strings.Contains(got, "SECRET") {
		t.Errorf("GET refused: HTTP %d %q", resp.StatusCode, got)
	}
}

// A server-to-client request on a call's stream passes the relay chain as
// a request (MessageRequest): its params scrubbed, its id and method kept.
func TestRemoteRequestToClientThroughChain(t *testing.T) {
	rig := newRemoteRig(t)
	_, got := rig.post(t, "/mcp", "Bearer good", "sid-1", `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"ask"}}`)
	want := `{"jsonrpc":"2.0","id":"s-1","method":"elicitation/create","params":{"message":"ask [REDACTED:word]"}}`
	if !strings.Contains(got, want) || strings.Contains(got, "SECRET") || !strings.Contains(got, "echo [chained]") {
		t.Errorf("a request to the client through the proxy: %q, want %s in it", got, want)
	}
	rig.mu.Lock()
	relays := append([]string(nil), rig.relays...)
	rig.mu.Unlock()
	if !slices.Contains(relays, "request elicitation/create") || !slices.Contains(relays, "notification notifications/message") {
		t.Errorf("relayed messages through the chain: %q, want the elicitation request and the log notification", relays)
	}
}
