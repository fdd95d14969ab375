package main

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var testScript = &Script{Turns: []Turn{
	{Name: "call", Match: []string{"GO"}, Content: []Block{
		{Type: "text", Text: "Let me look — ünïcödé."},
		{Type: "tool_use", ID: "toolu_1", Name: "Read", Input: json.RawMessage(`{"file_path": "/tmp/a.txt"}`)},
	}},
	{Name: "answer", Match: []string{"toolu_1"}, Content: []Block{{Type: "text", Text: "Done."}}},
}}

func newTestServer(t *testing.T) (*httptest.Server, string) {
	t.Helper()
	rec := filepath.Join(t.TempDir(), "rec.jsonl")
	r, err := OpenRecorder(rec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	s, err := NewServer(testScript, r, Options{Chunk: 5})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return srv, rec
}

type sseEvent struct {
	name string
	data map[string]any
}

func readEvents(t *testing.T, r io.Reader) []sseEvent {
	t.Helper()
	var out []sseEvent
	sc := bufio.NewScanner(r)
	var cur sseEvent
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			cur.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &cur.data); err != nil {
				t.Fatalf("data %q: %v", line, err)
			}
		case line == "":
			if cur.data["type"] != cur.name {
				t.Errorf("event %q carries type %v", cur.name, cur.data["type"])
			}
			out = append(out, cur)
			cur = sseEvent{}
		}
	}
	return out
}

const goRequest = `{"model":"m","max_tokens":100,"stream":true,"tools":[{"name":"Read","input_schema":{"type":"object"}}],
 "messages":[{"role":"user","content":[{"type":"text","text":"GO now"}]},{"role":"system","content":"a mid-conversation system message"}]}`

// TestStreamFollowsTheAPI: the documented event sequence, text and tool
// input reassembled from their deltas, the record written.
func TestStreamFollowsTheAPI(t *testing.T) {
	srv, rec := newTestServer(t)
	req, _ := http.NewRequest("POST", srv.URL+"/v1/messages?beta=true", strings.NewReader(goRequest))
	req.Header.Set("X-Api-Key", "k")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("Content-Type %q", ct)
	}
	evs := readEvents(t, resp.Body)
	var names []string
	text, input := "", ""
	for _, e := range evs {
		names = append(names, e.name)
		if d, ok := e.data["delta"].(map[string]any); ok {
			switch d["type"] {
			case "text_delta":
				text += d["text"].(string)
			case "input_json_delta":
				input += d["partial_json"].(string)
			}
		}
	}
	got := strings.Join(names, ",")
	for _, want := range []string{"message_start,content_block_start,ping,content_block_delta", "content_block_stop,content_block_start,content_block_delta", "content_block_stop,message_delta,message_stop"} {
		if !strings.Contains(got, want) {
			t.Errorf("events %s lack %s", got, want)
		}
	}
	if text != "Let me look — ünïcödé." || input != `{"file_path":"/tmp/a.txt"}` {
		t.Errorf("reassembled text %q, input %q", text, input)
	}
	md := evs[len(evs)-2].data["delta"].(map[string]any)
	if md["stop_reason"] != "tool_use" {
		t.Errorf("stop_reason %v, want tool_use", md["stop_reason"])
	}
	data, err := os.ReadFile(rec)
	if err != nil {
		t.Fatal(err)
	}
	var r Record
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatal(err)
	}
	if string(r.Body) != goRequest || r.Turn != "call" || r.Query != "beta=true" || r.Headers["X-Api-Key"][0] != "k" {
		t.Errorf("record = %+v", r)
	}
}

// TestPickAndValidate: a turn is picked by the last user message's
// content, a side request without the tools gets the fallback, and an
// invalid request is refused as the API would.
func TestPickAndValidate(t *testing.T) {
	srv, _ := newTestServer(t)
	post := func(body string) (int, map[string]any) {
		resp, err := http.Post(srv.URL+"/v1/messages", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, m
	}
	firstText := func(m map[string]any) string {
		c := m["content"].([]any)[0].(map[string]any)
		s, _ := c["text"].(string)
		return s
	}
	answered := `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"GO"},
	 {"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"Read","input":{}}]},
	 {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"file"}]}]}`
	if code, m := post(answered); code != 200 || firstText(m) != "Done." || m["stop_reason"] != "end_turn" {
		t.Errorf("after the tool result: %d %v", code, m)
	}
	if code, m := post(`{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"GO, but no tools"}]}`); code != 200 || firstText(m) != "OK" {
		t.Errorf("side request: %d %v, want the fallback", code, m)
	}
	for body, says := range map[string]string{
		`{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"GO"},{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"Read","input":{}}]},{"role":"user","content":"no result"}]}`: "without `tool_result`",
		`{"model":"m","max_tokens":10,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"x","content":"?"}]}]}`:                                                                                "unexpected `tool_use_id`",
		`{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"  "}]}`:                                                                                                                                    "non-empty",
		`{"model":"m","max_tokens":10,"messages":[{"role":"robot","content":"x"}]}`:                                                                                                                                    "role",
		`{"model":"m","messages":[{"role":"user","content":"x"}]}`:                                                                                                                                                     "max_tokens",
		`{"model":"m","max_tokens":10,"system":[{"type":"text","text":"a","cache_control":{"type":"ephemeral"}},{"type":"text","text":"b","cache_control":{"type":"ephemeral"}},{"type":"text","text":"c","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":[{"type":"text","text":"x","cache_control":{"type":"ephemeral"}},{"type":"text","text":"y","cache_control":{"type":"ephemeral"}}]}]}`: "maximum of 4",
	} {
		code, m := post(body)
		e, _ := m["error"].(map[string]any)
		if code != 400 || e["type"] != "invalid_request_error" || !strings.Contains(e["message"].(string), says) {
			t.Errorf("%s: %d %v, want 400 saying %q", body, code, m, says)
		}
	}
}
