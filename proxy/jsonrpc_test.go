package proxy

import "testing"

func TestParseMessagesRefusesInvalidUTF8ID(t *testing.T) {
	_, _, err := ParseMessages([]byte("{\"jsonrpc\":\"2.0\",\"id\":\"\xff\xfe\",\"method\":\"ping\"}"))
	if err == nil || err.Code != CodeInvalidRequest {
		t.Fatalf("got %v, want an invalid request error", err)
	}
	if msgs, _, err := ParseMessages([]byte(`{"jsonrpc":"2.0","id":"é1","method":"ping"}`)); err != nil || len(msgs) != 1 {
		t.Fatalf("valid UTF-8 id refused: %v", err)
	}
}
