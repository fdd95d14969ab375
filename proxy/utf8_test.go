package proxy

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/foldproxy/foldproxy/policy/jsonscan"
	"github.com/foldproxy/foldproxy/upstreams"
)

// Issue 14: an agent's progressToken that is not valid UTF-8 was echoed raw
// into every progress notification, so the stdio front wrote lines that are
// not UTF-8. Invalid UTF-8 from the agent is now U+FFFD from the moment the
// message is parsed: the upstream, the notifications and stdout see only
// valid UTF-8.
func TestInvalidUTF8FromTheAgentIsSanitized(t *testing.T) {
	var s *Server
	var upParams string
	up := &fakeUpstream{name: "ev", cat: upstreams.Catalog{Tools: []json.RawMessage{json.RawMessage(echoTool)}}}
	up.answer = func(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error) {
		upParams = string(params)
		meta, _ := jsonscan.Field(params, "_meta")
		tok, _ := jsonscan.Field(meta, "progressToken")
		s.UpstreamNotification("ev", "notifications/progress", json.RawMessage(`{"progressToken":`+string(tok)+`,"progress":1}`))
		return json.RawMessage(`{"content":[{"type":"text","text":"ok"}]}`), nil
	}
	s, _ = newTestServer(t, []Upstream{up}, nil)
	sess := initSession(t, s, `{}`)
	frame := "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\",\"params\":{\"name\":\"ev__echo\",\"arguments\":{\"message\":\"m\xc3\x28\"},\"_meta\":{\"progressToken\":\"tok\xff\"}}}"
	msgs, _, rpcErr := ParseMessages([]byte(frame))
	if rpcErr != nil {
		t.Fatalf("parse: %v", rpcErr)
	}
	if !utf8.Valid(msgs[0].Params) {
		t.Fatalf("parsed params are not UTF-8: %q", msgs[0].Params)
	}
	var buf syncBytes
	out := &stdioWriter{w: &buf, broken: make(chan struct{})}
	s.Deliver(context.Background(), sess, msgs[0], out)
	got := buf.String()
	if !utf8.ValidString(got) || !utf8.ValidString(upParams) {
		t.Fatalf("invalid UTF-8 passed on: upstream got %q, stdout got %q", upParams, got)
	}
	if !strings.Contains(got, "tok\uFFFD") || !strings.Contains(upParams, "m\uFFFD(") {
		t.Errorf("want the invalid bytes as U+FFFD: upstream %q, stdout %q", upParams, got)
	}
	// An id that is not UTF-8 cannot be echoed: an error with a null id.
	if _, _, rpcErr := ParseMessages([]byte("{\"jsonrpc\":\"2.0\",\"id\":\"\xff\",\"method\":\"ping\"}")); rpcErr == nil {
		t.Errorf("a request whose id is not UTF-8 was accepted")
	}
	// Whatever reaches a front's writer leaves as UTF-8.
	line, err := frontCompact([]byte("{\"a\":\"x\xffy\"}"))
	if err != nil || !utf8.Valid(line) || !json.Valid(line) {
		t.Errorf("frontCompact of invalid UTF-8: %q, %v", line, err)
	}
}
