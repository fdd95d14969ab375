package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func post(t *testing.T, url, body string) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return resp, []byte(b.String())
}

// The OpenAI dialects play the script: a tool_use turn is a function call
// (in a Responses namespace when the tool is offered in one), the pairing
// rules refuse a broken conversation as the APIs do.
func TestOpenAIDialects(t *testing.T) {
	srv, _ := newTestServer(t)
	// Chat Completions, not streamed: the call with its arguments.
	resp, body := post(t, srv.URL+"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"GO"}],"tools":[{"type":"function","function":{"name":"Read"}}]}`)
	var chat struct {
		Choices []struct {
			Message struct {
				ToolCalls []struct {
					ID       string `json:"id"`
					Function struct{ Name, Arguments string }
				} `json:"tool_calls"`
			} `json:"message"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(body, &chat); err != nil || resp.StatusCode != 200 || len(chat.Choices) != 1 || chat.Choices[0].FinishReason != "tool_calls" ||
		chat.Choices[0].Message.ToolCalls[0].Function.Arguments != `{"file_path":"/tmp/a.txt"}` {
		t.Errorf("chat: %d %s", resp.StatusCode, body)
	}
	// Responses, streamed, the tool offered in a namespace.
	resp, body = post(t, srv.URL+"/v1/responses", `{"model":"m","stream":true,"input":[{"role":"user","content":"GO"}],"tools":[{"type":"namespace","name":"mcp","tools":[{"type":"function","name":"Read"}]}]}`)
	if resp.StatusCode != 200 {
		t.Fatalf("responses: %d %s", resp.StatusCode, body)
	}
	// The script calls "Read", which the namespace "mcp" offers only as
	// mcp__Read: not offered under that name, so the fallback plays.
	if !strings.Contains(string(body), `"type":"response.completed"`) || strings.Contains(string(body), `"function_call"`) {
		t.Errorf("responses stream: %s", body)
	}
	resp, body = post(t, srv.URL+"/v1/responses", `{"model":"m","stream":true,"input":[{"role":"user","content":"GO"}],"tools":[{"type":"function","name":"Read"}]}`)
	if !strings.Contains(string(body), `"name":"Read"`) || !strings.Contains(string(body), `event: response.function_call_arguments.delta`) || resp.StatusCode != 200 {
		t.Errorf("responses stream with the tool: %s", body)
	}
	// Pairing refused.
	for url, bad := range map[string]string{
		"/v1/responses":        `{"model":"m","input":[{"type":"function_call","call_id":"c1","name":"Read","arguments":"{}"},{"role":"user","content":"x"}]}`,
		"/v1/chat/completions": `{"model":"m","messages":[{"role":"user","content":"x"},{"role":"tool","tool_call_id":"c9","content":"?"}]}`,
	} {
		if resp, body := post(t, srv.URL+url, bad); resp.StatusCode != 400 || !strings.Contains(string(body), "invalid_request_error") {
			t.Errorf("%s %s: %d %s, want 400", url, bad, resp.StatusCode, body)
		}
	}
}

// A namespaced tool is called as {"namespace","name"}.
func TestResponsesNamespaceCall(t *testing.T) {
	sc := &Script{Turns: []Turn{{Name: "call", Match: []string{"GO"}, Content: []Block{{Type: "tool_use", ID: "c1", Name: "mcp__fp__branch_create", Input: json.RawMessage(`{}`)}}}}}
	s, err := NewServer(sc, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	h := httptest.NewServer(s)
	t.Cleanup(h.Close)
	srv := h.URL
	_, body := post(t, srv+"/v1/responses", `{"model":"m","input":[{"role":"user","content":"GO"}],"tools":[{"type":"namespace","name":"mcp__fp","tools":[{"type":"function","name":"branch_create"}]}]}`)
	if !strings.Contains(string(body), `"name":"branch_create"`) || !strings.Contains(string(body), `"namespace":"mcp__fp"`) {
		t.Errorf("the call: %s", body)
	}
}
