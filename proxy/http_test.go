package proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/foldproxy/foldproxy/policy/jsonrpc"
)

const (
	httpTestInit   = `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	httpTestAccept = "application/json, text/event-stream"
)

// newHTTPTest builds a handler on a fake endpoint; tune adjusts its
// tunables before any request can read them.
func newHTTPTest(t *testing.T, opts HTTPOptions, tune ...func(*HTTPHandler)) (*HTTPHandler, *frontFake) {
	t.Helper()
	f := newFrontFake()
	h, err := newHTTPHandler(f, opts)
	if err != nil {
		t.Fatalf("NewHTTPHandler: %v", err)
	}
	for _, fn := range tune {
		fn(h)
	}
	t.Cleanup(func() { h.Close() })
	return h, f
}

// httpDo sends one request straight to the handler. Headers default to a
// loopback Host and an Accept that allows both answers; a "" value removes
// a header.
func httpDo(h http.Handler, method, path, body string, hdr map[string]string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	r.Host = "localhost:8080"
	r.Header.Set("Accept", httpTestAccept)
	if body != "" {
		r.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		if k == "Host" {
			r.Host = v
			continue
		}
		if v == "" {
			r.Header.Del(k)
			continue
		}
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// httpInit opens a session and returns its id.
func httpInit(t *testing.T, h http.Handler, hdr map[string]string) string {
	t.Helper()
	w := httpDo(h, "POST", "/mcp", httpTestInit, hdr)
	if w.Code != http.StatusOK {
		t.Fatalf("initialize: status %d, body %s", w.Code, w.Body)
	}
	id := w.Header().Get("Mcp-Session-Id")
	if !httpValidSessionID(id) {
		t.Fatalf("initialize: Mcp-Session-Id %q is not visible ASCII", id)
	}
	return id
}

// httpErrorBody decodes a JSON-RPC error body and fails the test when the
// body is anything else.
func httpErrorBody(t *testing.T, w *httptest.ResponseRecorder) *Error {
	t.Helper()
	if ct := w.Header().Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type = %q, want application/json; body %s", ct, w.Body)
	}
	msgs, _ := frontParseResponses(t, w.Body.Bytes())
	if len(msgs) != 1 || msgs[0].Error == nil {
		t.Fatalf("body %s is not one JSON-RPC error", w.Body)
	}
	return msgs[0].Error
}

type httpTestEvent struct {
	id, event, data string
}

// httpParseSSE splits an event stream into events, dropping comments.
func httpParseSSE(t *testing.T, r io.Reader) []httpTestEvent {
	t.Helper()
	var out []httpTestEvent
	var cur httpTestEvent
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur.data != "" || cur.id != "" {
				out = append(out, cur)
			}
			cur = httpTestEvent{}
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "id: "):
			cur.id = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "event: "):
			cur.event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			cur.data += strings.TrimPrefix(line, "data: ")
		default:
			t.Fatalf("unexpected SSE line %q", line)
		}
	}
	return out
}

func TestIsLoopback(t *testing.T) {
	tests := []struct {
		addr string
		want bool
	}{
		{"127.0.0.1:8080", true},
		{"127.9.9.9:1", true},
		{"[::1]:0", true},
		{"localhost:9", true},
		{"LOCALHOST:9", true},
		{"localhost", true},
		{"::1", true},
		{":8080", false},
		{"0.0.0.0:8080", false},
		{"[::]:8080", false},
		{"192.168.1.2:80", false},
		{"example.com:80", false},
		{"", false},
	}
	for _, tt := range tests {
		if got := IsLoopback(tt.addr); got != tt.want {
			t.Errorf("IsLoopback(%q) = %v, want %v", tt.addr, got, tt.want)
		}
	}
}

func TestHTTPAccepts(t *testing.T) {
	tests := []struct {
		accept   string
		json     bool
		sse      bool
		absentOK bool
	}{
		{"", true, true, true},
		{"*/*", true, true, false},
		{"application/json, text/event-stream", true, true, false},
		{"application/json", true, false, false},
		{"text/event-stream", false, true, false},
		{"text/*", false, true, false},
		{"text/html", false, false, false},
		{"text/event-stream;q=0, */*", true, false, false},
		{"application/json;q=0.5, text/event-stream;q=0", true, false, false},
	}
	for _, tt := range tests {
		hdr := http.Header{}
		if tt.accept != "" {
			hdr.Set("Accept", tt.accept)
		}
		if got := httpAccepts(hdr, "application/json"); got != tt.json {
			t.Errorf("Accept %q admits application/json = %v, want %v", tt.accept, got, tt.json)
		}
		if got := httpAccepts(hdr, "text/event-stream"); got != tt.sse {
			t.Errorf("Accept %q admits text/event-stream = %v, want %v", tt.accept, got, tt.sse)
		}
	}
}

func TestNewHTTPHandlerValidates(t *testing.T) {
	tests := []struct {
		name    string
		ep      Endpoint
		opts    HTTPOptions
		wantErr string
	}{
		{"no endpoint", nil, HTTPOptions{Loopback: true}, "endpoint"},
		{"token required off loopback", newFrontFake(), HTTPOptions{}, "Token"},
		{"bad path", newFrontFake(), HTTPOptions{Loopback: true, Path: "mcp"}, "Path"},
		{"negative limit", newFrontFake(), HTTPOptions{Loopback: true, MaxMessageBytes: -1}, "MaxMessageBytes"},
		{"negative idle", newFrontFake(), HTTPOptions{Loopback: true, SessionIdleTimeout: -1}, "SessionIdleTimeout"},
		{"bad origin", newFrontFake(), HTTPOptions{Loopback: true, AllowedOrigins: []string{"example.com"}}, "AllowedOrigins"},
		{"token with spaces", newFrontFake(), HTTPOptions{Token: " t "}, "Token"},
		{"ok off loopback", newFrontFake(), HTTPOptions{Token: "t"}, ""},
		{"ok on loopback", newFrontFake(), HTTPOptions{Loopback: true, AllowedOrigins: []string{"https://app.example/"}}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, err := newHTTPHandler(tt.ep, tt.opts)
			if h != nil {
				defer h.Close()
			}
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("NewHTTPHandler = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("NewHTTPHandler error = %v, want one naming %s", err, tt.wantErr)
			}
		})
	}
}

// TestNewHTTPHandlerCloser: the exported constructor's handler can be
// closed through an interface, as the serve command does.
func TestNewHTTPHandlerCloser(t *testing.T) {
	if h, err := NewHTTPHandler(nil, HTTPOptions{Loopback: true}); err == nil || h != nil {
		t.Fatalf("NewHTTPHandler(nil) = %v, %v; want a nil handler and an error", h, err)
	}
	f := newFrontFake()
	h, err := NewHTTPHandler(f, HTTPOptions{Loopback: true})
	if err != nil {
		t.Fatal(err)
	}
	httpInit(t, h, nil)
	c, ok := h.(interface{ Close() error })
	if !ok {
		t.Fatalf("handler %T has no Close method", h)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("Close = %v", err)
	}
	if got := f.closeCount(f.sessions()[0].s); got != 1 {
		t.Errorf("CloseSession called %d times, want 1", got)
	}
}

// TestHTTPStatus pins the status of each kind of request on a handler with
// a token and loopback checks.
func TestHTTPStatus(t *testing.T) {
	const token = "s3cret"
	h, _ := newHTTPTest(t, HTTPOptions{Loopback: true, Token: token, MaxMessageBytes: 2048,
		AllowedOrigins: []string{"https://app.example"}})
	auth := "Bearer " + token
	sid := httpInit(t, h, map[string]string{"Authorization": auth})
	withSession := func(extra map[string]string) map[string]string {
		m := map[string]string{"Authorization": auth, "Mcp-Session-Id": sid}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	echo := `{"jsonrpc":"2.0","id":1,"method":"echo"}`
	tests := []struct {
		name     string
		method   string
		path     string
		body     string
		hdr      map[string]string
		want     int
		wantCode int    // JSON-RPC error code in the body; 0: not an error body
		wantText string // in the error message
	}{
		{"request", "POST", "/mcp", echo, withSession(nil), 200, 0, ""},
		{"no token", "POST", "/mcp", echo, map[string]string{"Mcp-Session-Id": sid}, 401, CodeInvalidRequest, "Bearer"},
		{"wrong token", "POST", "/mcp", echo, withSession(map[string]string{"Authorization": "Bearer nope"}), 401, CodeInvalidRequest, "Bearer"},
		{"lowercase scheme", "POST", "/mcp", echo, withSession(map[string]string{"Authorization": "bearer " + token}), 200, 0, ""},
		{"foreign host", "POST", "/mcp", echo, withSession(map[string]string{"Host": "evil.example.com"}), 403, CodeInvalidRequest, "evil.example.com"},
		{"loopback ip host", "POST", "/mcp", echo, withSession(map[string]string{"Host": "127.0.0.1:9"}), 200, 0, ""},
		{"ipv6 host", "POST", "/mcp", echo, withSession(map[string]string{"Host": "[::1]:9"}), 200, 0, ""},
		{"foreign origin", "POST", "/mcp", echo, withSession(map[string]string{"Origin": "http://evil.example.com"}), 403, CodeInvalidRequest, "Origin"},
		{"null origin", "POST", "/mcp", echo, withSession(map[string]string{"Origin": "null"}), 403, CodeInvalidRequest, "Origin"},
		{"loopback origin", "POST", "/mcp", echo, withSession(map[string]string{"Origin": "http://localhost:3000"}), 200, 0, ""},
		{"allowed origin", "POST", "/mcp", echo, withSession(map[string]string{"Origin": "https://APP.example"}), 200, 0, ""},
		{"wrong path", "POST", "/other", echo, withSession(nil), 404, CodeInvalidRequest, "/mcp"},
		{"wrong method", "PUT", "/mcp", echo, withSession(nil), 405, CodeInvalidRequest, "PUT"},
		{"no session", "POST", "/mcp", echo, map[string]string{"Authorization": auth}, 400, CodeInvalidRequest, "Mcp-Session-Id"},
		{"unknown session", "POST", "/mcp", echo, withSession(map[string]string{"Mcp-Session-Id": "nope"}), 404, jsonrpc.CodeSessionNotFound, "session not found"},
		{"malformed session id", "POST", "/mcp", echo, withSession(map[string]string{"Mcp-Session-Id": "a b"}), 400, CodeInvalidRequest, "visible ASCII"},
		{"notification", "POST", "/mcp", `{"jsonrpc":"2.0","method":"notifications/initialized"}`, withSession(nil), 202, 0, ""},
		{"response", "POST", "/mcp", `{"jsonrpc":"2.0","id":"srv-9","result":{}}`, withSession(nil), 202, 0, ""},
		{"malformed json", "POST", "/mcp", `{"jsonrpc":`, withSession(nil), 400, CodeParseError, "parse error"},
		{"invalid request", "POST", "/mcp", `{"jsonrpc":"2.0","id":3}`, withSession(nil), 400, CodeInvalidRequest, "result or an error"},
		{"too large", "POST", "/mcp", `{"jsonrpc":"2.0","id":1,"method":"echo","params":{"p":"` + strings.Repeat("x", 3000) + `"}}`, withSession(nil), 413, CodeMessageTooLarge, "2048"},
		{"bad protocol version", "POST", "/mcp", echo, withSession(map[string]string{"Mcp-Protocol-Version": "1999-01-01"}), 400, CodeInvalidRequest, "1999-01-01"},
		{"good protocol version", "POST", "/mcp", echo, withSession(map[string]string{"Mcp-Protocol-Version": "2025-03-26"}), 200, 0, ""},
		{"accept excludes both", "POST", "/mcp", echo, withSession(map[string]string{"Accept": "text/html"}), 406, CodeInvalidRequest, "Accept"},
		{"accept absent", "POST", "/mcp", echo, withSession(map[string]string{"Accept": ""}), 200, 0, ""},
		{"accept any", "POST", "/mcp", echo, withSession(map[string]string{"Accept": "*/*"}), 200, 0, ""},
		{"wrong content type", "POST", "/mcp", echo, withSession(map[string]string{"Content-Type": "text/plain"}), 415, CodeInvalidRequest, "text/plain"},
		{"batched initialize", "POST", "/mcp", "[" + httpTestInit + "]", map[string]string{"Authorization": auth}, 400, CodeInvalidRequest, "initialize"},
		{"get without session", "GET", "/mcp", "", map[string]string{"Authorization": auth, "Accept": "text/event-stream"}, 400, CodeInvalidRequest, "Mcp-Session-Id"},
		{"get not accepting sse", "GET", "/mcp", "", withSession(map[string]string{"Accept": "application/json"}), 406, CodeInvalidRequest, "text/event-stream"},
		{"delete unknown", "DELETE", "/mcp", "", withSession(map[string]string{"Mcp-Session-Id": "nope"}), 404, jsonrpc.CodeSessionNotFound, "session not found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := httpDo(h, tt.method, tt.path, tt.body, tt.hdr)
			if w.Code != tt.want {
				t.Fatalf("status = %d, want %d; body %s", w.Code, tt.want, w.Body)
			}
			switch {
			case tt.wantCode != 0:
				e := httpErrorBody(t, w)
				if e.Code != tt.wantCode || !strings.Contains(e.Message, tt.wantText) {
					t.Errorf("error = %d %q, want %d naming %q", e.Code, e.Message, tt.wantCode, tt.wantText)
				}
			case tt.want == 202:
				if w.Body.Len() != 0 {
					t.Errorf("202 with body %q, want none", w.Body)
				}
			}
			if tt.want == 401 && !strings.HasPrefix(w.Header().Get("WWW-Authenticate"), "Bearer") {
				t.Errorf("WWW-Authenticate = %q, want Bearer", w.Header().Get("WWW-Authenticate"))
			}
			if tt.want == 405 && w.Header().Get("Allow") != "GET, POST, DELETE" {
				t.Errorf("Allow = %q, want GET, POST, DELETE", w.Header().Get("Allow"))
			}
		})
	}
}

// TestHTTPAnswers pins the body of answers to requests.
func TestHTTPAnswers(t *testing.T) {
	h, _ := newHTTPTest(t, HTTPOptions{Loopback: true})
	sid := httpInit(t, h, nil)
	tests := []struct {
		name     string
		body     string
		accept   string
		wantType string
		want     string // stdioSummary of a JSON body, or the event data joined by "|" for SSE
	}{
		{"json", `{"jsonrpc":"2.0","id":1,"method":"echo","params":{"a":1}}`, "", "application/json", `1:{"echo":{"a":1}}`},
		{"batch", `[{"jsonrpc":"2.0","id":1,"method":"echo"},{"jsonrpc":"2.0","method":"n"},{"jsonrpc":"2.0","id":2,"method":"echo"}]`, "", "application/json",
			`[1:{"echo":null} 2:{"echo":null}]`},
		{"batch with a bad element", `[{"jsonrpc":"2.0","id":1,"method":"echo"},{"jsonrpc":"2.0","id":2}]`, "", "application/json",
			`[1:{"echo":null} 2:err-32600]`},
		{"core answers nothing", `{"jsonrpc":"2.0","id":"q","method":"silent"}`, "", "application/json", `"q":err-32603`},
		{"core panics", `{"jsonrpc":"2.0","id":7,"method":"panic"}`, "", "application/json", `7:err-32603`},
		{"notification first switches to sse", `{"jsonrpc":"2.0","id":5,"method":"notify"}`, "", "text/event-stream",
			`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":1}}|{"jsonrpc":"2.0","id":5,"result":{"done":true}}`},
		{"sse only", `{"jsonrpc":"2.0","id":6,"method":"echo"}`, "text/event-stream", "text/event-stream",
			`{"jsonrpc":"2.0","id":6,"result":{"echo":null}}`},
		{"json only keeps notifications off the response", `{"jsonrpc":"2.0","id":8,"method":"notify"}`, "application/json", "application/json",
			`8:{"done":true}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hdr := map[string]string{"Mcp-Session-Id": sid}
			if tt.accept != "" {
				hdr["Accept"] = tt.accept
			}
			w := httpDo(h, "POST", "/mcp", tt.body, hdr)
			if w.Code != 200 {
				t.Fatalf("status = %d, want 200; body %s", w.Code, w.Body)
			}
			if got := w.Header().Get("Content-Type"); got != tt.wantType {
				t.Fatalf("Content-Type = %q, want %q", got, tt.wantType)
			}
			var got string
			if tt.wantType == "application/json" {
				got = stdioSummary(t, w.Body.String())
			} else {
				var data []string
				for _, e := range httpParseSSE(t, w.Body) {
					if e.event != "message" {
						t.Errorf("event type %q, want message", e.event)
					}
					data = append(data, e.data)
				}
				got = strings.Join(data, "|")
			}
			if got != tt.want {
				t.Errorf("got %s, want %s", got, tt.want)
			}
		})
	}
}

func TestHTTPInitialize(t *testing.T) {
	h, f := newHTTPTest(t, HTTPOptions{Loopback: true})
	sid := httpInit(t, h, nil)
	opened := f.sessions()
	if len(opened) != 1 {
		t.Fatalf("opened %d sessions, want 1", len(opened))
	}
	if o := opened[0]; o.id != sid || o.transport != "http" || o.standalone != nil {
		t.Errorf("OpenSession(%q, %q, %v), want (%q, \"http\", nil)", o.id, o.transport, o.standalone, sid)
	}
	if sid2 := httpInit(t, h, nil); sid2 == sid {
		t.Errorf("two initializes got the same session id %q", sid)
	}

	// A refused initialize leaves no session behind.
	w := httpDo(h, "POST", "/mcp", `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"fail":true}}`, nil)
	if w.Code != 200 || w.Header().Get("Mcp-Session-Id") != "" {
		t.Fatalf("refused initialize: status %d, session %q; want 200 and no session id", w.Code, w.Header().Get("Mcp-Session-Id"))
	}
	if e := httpErrorBody(t, w); e.Code != CodeInvalidParams {
		t.Errorf("error code %d, want %d", e.Code, CodeInvalidParams)
	}
	failed := f.sessions()[2].s
	if got := f.closeCount(failed); got != 1 {
		t.Errorf("refused session closed %d times, want 1", got)
	}
}

func TestHTTPDelete(t *testing.T) {
	h, f := newHTTPTest(t, HTTPOptions{Loopback: true})
	sid := httpInit(t, h, nil)
	s := f.sessions()[0].s
	if w := httpDo(h, "DELETE", "/mcp", "", map[string]string{"Mcp-Session-Id": sid}); w.Code != http.StatusNoContent {
		t.Fatalf("DELETE: status %d, want 204", w.Code)
	}
	if got := f.closeCount(s); got != 1 {
		t.Errorf("CloseSession called %d times, want 1", got)
	}
	for _, m := range []string{"POST", "DELETE"} {
		w := httpDo(h, m, "/mcp", `{"jsonrpc":"2.0","id":1,"method":"echo"}`, map[string]string{"Mcp-Session-Id": sid})
		if w.Code != http.StatusNotFound {
			t.Errorf("%s after DELETE: status %d, want 404", m, w.Code)
		}
	}
	if got := f.closeCount(s); got != 1 {
		t.Errorf("CloseSession called %d times after more requests, want 1", got)
	}
}

func TestHTTPResume(t *testing.T) {
	f := newFrontFake()
	restored := newSession("old-session", "http", nil)
	var asked []string
	var mu sync.Mutex
	h, err := newHTTPHandler(f, HTTPOptions{Loopback: true, Resume: func(ctx context.Context, id string) (*Session, bool) {
		mu.Lock()
		asked = append(asked, id)
		mu.Unlock()
		if id == "old-session" {
			return restored, true
		}
		return nil, false
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	echo := `{"jsonrpc":"2.0","id":1,"method":"echo"}`
	tests := []struct {
		id   string
		want int
	}{
		{"old-session", 200},
		{"old-session", 200}, // now known: Resume is not asked again
		{"gone", 404},
	}
	for _, tt := range tests {
		if w := httpDo(h, "POST", "/mcp", echo, map[string]string{"Mcp-Session-Id": tt.id}); w.Code != tt.want {
			t.Errorf("POST with session %q: status %d, want %d", tt.id, w.Code, tt.want)
		}
	}
	if got, want := strings.Join(asked, ","), "old-session,gone"; got != want {
		t.Errorf("Resume asked for %s, want %s", got, want)
	}
	if w := httpDo(h, "DELETE", "/mcp", "", map[string]string{"Mcp-Session-Id": "old-session"}); w.Code != 204 {
		t.Errorf("DELETE of a resumed session: status %d, want 204", w.Code)
	}
	if got := f.closeCount(restored); got != 1 {
		t.Errorf("resumed session closed %d times, want 1", got)
	}
}

func TestHTTPIdleTimeout(t *testing.T) {
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	h, f := newHTTPTest(t, HTTPOptions{Loopback: true, SessionIdleTimeout: time.Minute},
		func(h *HTTPHandler) { h.now = func() time.Time { return now } })
	busy := httpInit(t, h, nil)
	idle := httpInit(t, h, nil)
	sessions := f.sessions()

	// The busy session has a request in flight across the timeout.
	done := make(chan *httptest.ResponseRecorder, 1)
	go func() {
		done <- httpDo(h, "POST", "/mcp", `{"jsonrpc":"2.0","id":1,"method":"block"}`, map[string]string{"Mcp-Session-Id": busy})
	}()
	frontRecv(t, "block to start", f.started)

	h.reapIdle(now.Add(59 * time.Second))
	if f.closeCount(sessions[1].s) != 0 {
		t.Fatalf("session closed before its idle timeout")
	}
	h.reapIdle(now.Add(2 * time.Minute))
	if got := f.closeCount(sessions[1].s); got != 1 {
		t.Errorf("idle session closed %d times, want 1", got)
	}
	if got := f.closeCount(sessions[0].s); got != 0 {
		t.Errorf("busy session closed %d times, want 0", got)
	}
	if w := httpDo(h, "POST", "/mcp", `{"jsonrpc":"2.0","id":1,"method":"echo"}`, map[string]string{"Mcp-Session-Id": idle}); w.Code != 404 {
		t.Errorf("POST to the reaped session: status %d, want 404", w.Code)
	}
	f.relOnce.Do(func() { close(f.release) })
	if w := frontRecv(t, "the blocked POST", done); w.Code != 200 {
		t.Errorf("blocked POST: status %d, want 200", w.Code)
	}
}

func TestHTTPCloseEndsSessionsOnce(t *testing.T) {
	h, f := newHTTPTest(t, HTTPOptions{Loopback: true})
	var ids []string
	for range 5 {
		ids = append(ids, httpInit(t, h, nil))
	}
	// DELETE, the reaper and Close race for the same sessions.
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Add(2)
		go func() { defer wg.Done(); httpDo(h, "DELETE", "/mcp", "", map[string]string{"Mcp-Session-Id": id}) }()
		go func() { defer wg.Done(); h.reapIdle(time.Now().Add(time.Hour)) }()
	}
	wg.Add(1)
	go func() { defer wg.Done(); h.Close() }()
	wg.Wait()
	h.Close()
	for _, o := range f.sessions() {
		if got := f.closeCount(o.s); got != 1 {
			t.Errorf("session %s closed %d times, want 1", o.id, got)
		}
	}
	if w := httpDo(h, "POST", "/mcp", httpTestInit, nil); w.Code != http.StatusServiceUnavailable {
		t.Errorf("POST after Close: status %d, want 503", w.Code)
	}
}

// httpServer starts a real server, so that streaming and disconnects are real.
func httpServer(t *testing.T, opts HTTPOptions, tune ...func(*HTTPHandler)) (*HTTPHandler, *frontFake, string) {
	t.Helper()
	h, f := newHTTPTest(t, opts, tune...)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return h, f, srv.URL + "/mcp"
}

func httpSend(t *testing.T, ctx context.Context, url, sid, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", httpTestAccept)
	if sid != "" {
		req.Header.Set("Mcp-Session-Id", sid)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST: %v", err)
	}
	return resp
}

func httpServerInit(t *testing.T, url string) string {
	t.Helper()
	resp := httpSend(t, context.Background(), url, "", httpTestInit)
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("initialize: status %d", resp.StatusCode)
	}
	return resp.Header.Get("Mcp-Session-Id")
}

// httpEvents reads SSE events from a live stream into a channel.
func httpEvents(r io.Reader) <-chan httpTestEvent {
	ch := make(chan httpTestEvent, 16)
	go func() {
		defer close(ch)
		var cur httpTestEvent
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if cur.data != "" {
					ch <- cur
				}
				cur = httpTestEvent{}
			case strings.HasPrefix(line, "id: "):
				cur.id = strings.TrimPrefix(line, "id: ")
			case strings.HasPrefix(line, "data: "):
				cur.data = strings.TrimPrefix(line, "data: ")
			}
		}
	}()
	return ch
}

// TestHTTPSampling runs a server-to-client request: the core asks on the
// POST's stream, the agent answers in a new POST, and the first POST ends
// with the tool's response.
func TestHTTPSampling(t *testing.T) {
	_, f, url := httpServer(t, HTTPOptions{Loopback: true})
	sid := httpServerInit(t, url)
	resp := httpSend(t, context.Background(), url, sid, `{"jsonrpc":"2.0","id":1,"method":"sample"}`)
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type = %q, want text/event-stream", ct)
	}
	events := httpEvents(resp.Body)
	ev := frontRecv(t, "the sampling request", events)
	var req Message
	if err := json.Unmarshal([]byte(ev.data), &req); err != nil || req.Method != "sampling/createMessage" {
		t.Fatalf("first event %q, want a sampling/createMessage request", ev.data)
	}
	answer := httpSend(t, context.Background(), url, sid, string(Response(req.ID, json.RawMessage(`{"text":"hi"}`), nil)))
	answer.Body.Close()
	if answer.StatusCode != http.StatusAccepted {
		t.Fatalf("the agent's response: status %d, want 202", answer.StatusCode)
	}
	ev = frontRecv(t, "the tool's response", events)
	if want := `{"jsonrpc":"2.0","id":1,"result":{"sampled":{"text":"hi"}}}`; ev.data != want {
		t.Errorf("final event %s, want %s", ev.data, want)
	}
	if _, more := <-events; more {
		t.Errorf("stream went on after the response")
	}
	f.mu.Lock()
	n := len(f.responses)
	f.mu.Unlock()
	if n != 1 {
		t.Errorf("core got %d responses, want 1", n)
	}
}

// TestHTTPDisconnectCancels: an agent that goes away mid-request cancels the
// request's context.
func TestHTTPDisconnectCancels(t *testing.T) {
	_, f, url := httpServer(t, HTTPOptions{Loopback: true})
	sid := httpServerInit(t, url)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(`{"jsonrpc":"2.0","id":42,"method":"block"}`))
		req.Header.Set("Mcp-Session-Id", sid)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	frontRecv(t, "block to start", f.started)
	cancel()
	if got := frontRecv(t, "the request's cancellation", f.cancelled); got != "42" {
		t.Errorf("cancelled %s, want 42", got)
	}
	if err := frontRecv(t, "the client to return", errc); !errors.Is(err, context.Canceled) {
		t.Errorf("client error %v, want context.Canceled", err)
	}
}

// TestHTTPDeleteCancelsInFlight: ending a session cancels its requests.
func TestHTTPDeleteCancelsInFlight(t *testing.T) {
	h, f, url := httpServer(t, HTTPOptions{Loopback: true})
	sid := httpServerInit(t, url)
	type result struct {
		body []byte
		err  error
	}
	done := make(chan result, 1)
	go func() {
		// Not httpSend: t.Fatal must not be called off the test goroutine.
		req, _ := http.NewRequest("POST", url, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"block"}`))
		req.Header.Set("Mcp-Session-Id", sid)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			done <- result{err: err}
			return
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		done <- result{body, err}
	}()
	frontRecv(t, "block to start", f.started)
	if w := httpDo(h, "DELETE", "/mcp", "", map[string]string{"Mcp-Session-Id": sid}); w.Code != 204 {
		t.Fatalf("DELETE: status %d", w.Code)
	}
	frontRecv(t, "the request's cancellation", f.cancelled)
	res := frontRecv(t, "the blocked POST", done)
	if res.err != nil {
		t.Fatalf("blocked POST: %v", res.err)
	}
	body := res.body
	if got, want := stdioSummary(t, string(body)), "1:err-32603"; got != want {
		t.Errorf("answer %s, want %s", got, want)
	}
}

func httpGet(t *testing.T, ctx context.Context, url, sid, lastEventID string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Mcp-Session-Id", sid)
	if lastEventID != "" {
		req.Header.Set("Last-Event-ID", lastEventID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET: %v", err)
	}
	return resp
}

// TestHTTPStandaloneStream covers the GET stream: one at a time, events
// with ids, keepalives, and replay after Last-Event-ID.
func TestHTTPStandaloneStream(t *testing.T) {
	// Millisecond keepalives exercise comments interleaved with events.
	h, f, url := httpServer(t, HTTPOptions{Loopback: true}, func(h *HTTPHandler) { h.keepAlive = time.Millisecond })
	sid := httpServerInit(t, url)
	s := f.sessions()[0].s
	standalone := func() Outbound {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.standalone
	}

	ctx1, cancel1 := context.WithCancel(context.Background())
	get1 := httpGet(t, ctx1, url, sid, "")
	if get1.StatusCode != 200 || get1.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("GET: status %d, type %q", get1.StatusCode, get1.Header.Get("Content-Type"))
	}
	frontWait(t, "the stream to attach", func() bool { return standalone() != nil })

	second := httpGet(t, context.Background(), url, sid, "")
	second.Body.Close()
	if second.StatusCode != http.StatusConflict {
		t.Errorf("second GET: status %d, want 409", second.StatusCode)
	}

	events := httpEvents(get1.Body)
	for i := 1; i <= 3; i++ {
		resp := httpSend(t, context.Background(), url, sid, `{"jsonrpc":"2.0","id":1,"method":"standalone","params":{"n":`+string(rune('0'+i))+`}}`)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if got := stdioSummary(t, string(body)); got != `1:{}` {
			t.Fatalf("standalone write %d: %s", i, got)
		}
		ev := frontRecv(t, "a standalone event", events)
		if want := string(rune('0' + i)); ev.id != want || !strings.Contains(ev.data, `"n":`+want) {
			t.Errorf("event %d: id %q data %s", i, ev.id, ev.data)
		}
	}
	cancel1()
	get1.Body.Close()
	frontWait(t, "the stream to detach", func() bool { return standalone() == nil })

	// Reconnect after event 1: events 2 and 3 are replayed.
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	get2 := httpGet(t, ctx2, url, sid, "1")
	defer get2.Body.Close()
	if get2.StatusCode != 200 {
		t.Fatalf("reconnect: status %d, want 200", get2.StatusCode)
	}
	replayed := httpEvents(get2.Body)
	for _, want := range []string{"2", "3"} {
		if ev := frontRecv(t, "a replayed event", replayed); ev.id != want {
			t.Errorf("replayed id %q, want %s", ev.id, want)
		}
	}

	// Ending the session ends the stream.
	if w := httpDo(h, "DELETE", "/mcp", "", map[string]string{"Mcp-Session-Id": sid}); w.Code != 204 {
		t.Fatalf("DELETE: status %d", w.Code)
	}
	for range replayed {
	}
}

func TestSSERing(t *testing.T) {
	var r sseRing
	for i := 1; i <= sseRingEvents+10; i++ {
		r.add(uint64(i), []byte("x"))
	}
	r.add(999, make([]byte, sseRingBytes+1)) // too big to keep
	tests := []struct {
		last      string
		wantN     int
		wantFirst uint64
	}{
		{"0", sseRingEvents, 11},
		{"70", sseRingEvents + 10 - 70, 71},
		{"74", 0, 0},
		{"not-ours", 0, 0},
		{"", 0, 0},
	}
	for _, tt := range tests {
		got := r.after(tt.last)
		if len(got) != tt.wantN || (tt.wantN > 0 && got[0].id != tt.wantFirst) {
			t.Errorf("after(%q): %d events, want %d from %d", tt.last, len(got), tt.wantN, tt.wantFirst)
		}
	}
	var big sseRing
	for i := 1; i <= 3; i++ {
		big.add(uint64(i), make([]byte, sseRingBytes/2))
	}
	if got := big.after("0"); len(got) != 2 || got[0].id != 2 {
		t.Errorf("byte-bounded ring kept %d events, want the last 2", len(got))
	}
}

// Issue 14: /metrics and /healthz skipped the token and Host checks and told
// anyone upstream names, redaction counts and session counts. Guard applies
// the MCP endpoint's rules to them.
func TestGuardAppliesTokenAndHostRules(t *testing.T) {
	h, _ := newHTTPTest(t, HTTPOptions{Loopback: true, Token: "s3cret-token"})
	served := 0
	g := h.Guard(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { served++; _, _ = io.WriteString(w, "metrics") }))
	get := func(host, auth string) int {
		r := httptest.NewRequest(http.MethodGet, "http://"+host+"/metrics", nil)
		if auth != "" {
			r.Header.Set("Authorization", auth)
		}
		w := httptest.NewRecorder()
		g.ServeHTTP(w, r)
		return w.Code
	}
	if code := get("127.0.0.1:8765", ""); code != http.StatusUnauthorized {
		t.Errorf("no token: %d, want 401", code)
	}
	if code := get("127.0.0.1:8765", "Bearer wrong"); code != http.StatusUnauthorized {
		t.Errorf("wrong token: %d, want 401", code)
	}
	if code := get("evil.example:8765", "Bearer s3cret-token"); code != http.StatusForbidden {
		t.Errorf("non-loopback Host on a loopback listener: %d, want 403", code)
	}
	if served != 0 {
		t.Fatalf("the guarded handler ran %d times for refused requests", served)
	}
	if code := get("127.0.0.1:8765", "Bearer s3cret-token"); code != http.StatusOK || served != 1 {
		t.Errorf("with the token: %d (served %d), want 200", code, served)
	}
}
