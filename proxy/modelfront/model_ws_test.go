package modelfront

import (
	"net/http"
	"strings"
	"testing"
)

// TestModelRefusesResponsesWebSocket: the Responses API's WebSocket
// upgrade is answered at once with 501 in OpenAI's error shape, saying
// what to configure, and nothing reaches the model API.
func TestModelRefusesResponsesWebSocket(t *testing.T) {
	up := newModelUpstream(t, func(w http.ResponseWriter, r *http.Request) {})
	url, obs, _ := newModelTest(t, up, nil)
	req, err := http.NewRequest(http.MethodGet, url+"/v1/responses", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "websocket")
	req.Header.Set("Sec-WebSocket-Version", "13")
	req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	e := modelErrorOf(t, resp)
	if resp.StatusCode != http.StatusNotImplemented || !strings.Contains(e.Error.Message, "supports_websockets = false") {
		t.Errorf("upgrade: %d %q, want 501 saying how to configure Codex", resp.StatusCode, e.Error.Message)
	}
	if ev := obs.last(t); ev.Outcome != OutcomeRefused || ev.Dialect != "openai-responses" {
		t.Errorf("event %+v, want a refused openai-responses request", ev)
	}
	if up.count() != 0 {
		t.Error("the upgrade reached the model API")
	}
}
