package modelfront

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// modelRoundTrip is a model API in process: it answers every request with
// the body it received, so the fuzz target sees what was forwarded.
type modelRoundTrip struct {
	mu   sync.Mutex
	seen int
}

func (m *modelRoundTrip) RoundTrip(r *http.Request) (*http.Response, error) {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	m.seen++
	m.mu.Unlock()
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(bytes.NewReader(b)), ContentLength: int64(len(b)), Request: r}, nil
}

// FuzzModelFront sends arbitrary requests (method, path, headers, body)
// into the model front: it must never panic, and every error it answers
// itself must be a JSON error in a model API's shape; what it forwards
// must be JSON (the context manager's output or the body unchanged).
func FuzzModelFront(f *testing.F) {
	for _, s := range []struct{ method, path, hdr, body string }{
		{"POST", "/v1/messages", "", modelTestRequest},
		{"POST", "/v1/messages/count_tokens", "", `{"model":"m","messages":[{"role":"user","content":"x"}]}`},
		{"POST", "/v1/chat/completions", "", `{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"mcp__foldproxy__branch_create","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c1","content":"{\"branch_id\":\"b-1\"}"}]}`},
		{"POST", "/v1/responses", "", `{"model":"m","input":[{"type":"function_call","call_id":"c1","name":"branch_create","arguments":"{}"},{"type":"function_call_output","call_id":"c1","output":"{\"branch_id\":\"b-1\"}"}]}`},
		{"GET", "/", "", ""},
		{"HEAD", "/", "", ""},
		{"GET", "/v1/models", "Anthropic-Version: 2023-06-01", ""},
		{"POST", "/v1/messages", "Content-Encoding: gzip", "\x1f\x8b"},
		{"POST", "/v1/messages", "Origin: http://evil.example", modelTestRequest},
		{"POST", "/v1/messages", "", `{"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"x","content":[{"type":"text","text":"\ud800"}]}]}]}`},
		{"PUT", "/v1/responses", "", "[]"},
		{"POST", "/v1/chat/completions", "", "not json"},
	} {
		f.Add(s.method, s.path, s.hdr, []byte(s.body))
	}
	rt := &modelRoundTrip{}
	h, err := NewHandler(Options{
		AnthropicURL: "http://anthropic.invalid", OpenAIURL: "http://openai.invalid",
		Loopback: true, State: modelOneBranch{}, Transport: rt, MaxRequestBytes: 1 << 20,
	})
	if err != nil {
		f.Fatal(err)
	}
	methods := []string{"GET", "POST", "HEAD", "PUT", "DELETE", "OPTIONS"}
	f.Fuzz(func(t *testing.T, method, path, hdr string, body []byte) {
		// A path a client could not put on the wire (control characters,
		// which net/url refuses) is replaced: the handler only ever sees
		// parsed requests.
		if !strings.HasPrefix(path, "/") || strings.ContainsAny(path, " \r\n\t?#%") || strings.ContainsFunc(path, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			path = "/v1/messages"
		}
		ok := false
		for _, m := range methods {
			ok = ok || m == method
		}
		if !ok {
			method = "POST"
		}
		r := httptest.NewRequest(method, "http://localhost"+path, bytes.NewReader(body))
		if k, v, found := strings.Cut(hdr, ": "); found && k != "" && !strings.ContainsAny(k+v, "\r\n\x00") {
			r.Header.Set(k, v)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code == 0 {
			t.Fatal("no status")
		}
		if w.Header().Get("X-Foldproxy-Error") != "" {
			var e struct {
				Error struct {
					Message string `json:"message"`
				} `json:"error"`
			}
			if method != "HEAD" && (json.Unmarshal(w.Body.Bytes(), &e) != nil || e.Error.Message == "") {
				t.Fatalf("%s %s: foldproxy's error %d is not a model API error: %q", method, path, w.Code, w.Body.Bytes())
			}
			return
		}
		if w.Code == 200 && method == "POST" && !json.Valid(w.Body.Bytes()) && (path == "/v1/messages" || path == "/v1/chat/completions" || path == "/v1/responses" || path == "/v1/messages/count_tokens") {
			t.Fatalf("%s %s: forwarded a body that is not JSON: %q", method, path, w.Body.Bytes())
		}
	})
}
