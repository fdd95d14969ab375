package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/foldproxy/foldproxy/policy"
	"github.com/foldproxy/foldproxy/upstreams"
)

// A call to an upstream that never answers ends at
// upstreams.<name>.callTimeout with a tool error naming the setting, and the
// upstream call's context ends (which is what sends notifications/cancelled
// upstream, see upstreams). Time is synctest's: no wall-clock wait.
func TestCallTimeoutEndsHangingCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ended := make(chan error, 1)
		up := &fakeUpstream{name: "ev", cat: upstreams.Catalog{Tools: []json.RawMessage{json.RawMessage(echoTool)}},
			answer: func(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error) {
				<-ctx.Done()
				ended <- context.Cause(ctx)
				return nil, ctx.Err()
			}}
		s, _ := newTestServer(t, []Upstream{up}, func(o *Options) {
			o.Settings.Upstreams = map[string]policy.Upstream{"ev": {CallTimeout: policy.Duration(90 * time.Second)}}
		})
		sess := initSession(t, s, `{}`)
		start := time.Now()
		resp := do(t, s, sess, "tools/call", `{"name":"ev__echo","arguments":{"message":"x"}}`)
		if took := time.Since(start); took != 90*time.Second {
			t.Errorf("the call ended after %s, want the configured 1m30s", took)
		}
		if resp.Error != nil || !strings.Contains(string(resp.Result), `"isError":true`) ||
			!strings.Contains(string(resp.Result), "upstreams.ev.callTimeout") || !strings.Contains(string(resp.Result), "cancelled it upstream") {
			t.Fatalf("response %s / %v; want a tool error naming upstreams.ev.callTimeout", resp.Result, resp.Error)
		}
		if cause := <-ended; !strings.Contains(cause.Error(), "did not answer tools/call within 1m30s") {
			t.Errorf("the upstream call ended with %v", cause)
		}
	})
}

// A server-to-client request the agent never answers ends at the upstream's
// callTimeout too: the upstream gets an error naming it, and the agent a
// notifications/cancelled for the request.
func TestServerRequestTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		up := &fakeUpstream{name: "ev", cat: upstreams.Catalog{Tools: []json.RawMessage{json.RawMessage(echoTool)}}}
		s, _ := newTestServer(t, []Upstream{up}, func(o *Options) {
			o.Settings.Upstreams = map[string]policy.Upstream{"ev": {CallTimeout: policy.Duration(time.Minute)}}
		})
		out := newRecorder()
		sess := s.OpenSession(context.Background(), "", "stdio", out)
		if resp := do(t, s, sess, "initialize", `{"protocolVersion":"2025-06-18","capabilities":{"sampling":{}},"clientInfo":{"name":"t","version":"1"}}`); resp.Error != nil {
			t.Fatal(resp.Error)
		}
		_, err := s.UpstreamRequest(context.Background(), "ev", "sampling/createMessage", json.RawMessage(`{"messages":[]}`))
		var re *Error
		if !errors.As(err, &re) || !strings.Contains(re.Message, "upstreams.ev.callTimeout") {
			t.Fatalf("UpstreamRequest: %v; want an error naming upstreams.ev.callTimeout", err)
		}
		if n := count(out, `"notifications/cancelled"`); n != 1 {
			t.Errorf("the agent got %d notifications/cancelled, want 1", n)
		}
	})
}

// A request the agent cancelled gets no response (MCP: the receiver should
// not answer a cancelled request); before, it got an error result saying
// it "could not be scanned for secrets (scan canceled)".
func TestCancelledRequestGetsNoResponse(t *testing.T) {
	started := make(chan struct{})
	up := &fakeUpstream{name: "ev", cat: upstreams.Catalog{Tools: []json.RawMessage{json.RawMessage(echoTool)}},
		answer: func(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error) {
			close(started)
			<-ctx.Done()
			return nil, ctx.Err()
		}}
	s, _ := newTestServer(t, []Upstream{up}, nil)
	sess := initSession(t, s, `{}`)
	var buf syncBytes
	c := &stdioCollector{main: &stdioWriter{w: &buf, broken: make(chan struct{})}, await: newFrontAwait()}
	id := json.RawMessage(`"c1"`)
	c.await.add(id)
	done := make(chan struct{})
	go func() {
		s.Deliver(context.Background(), sess, &Message{JSONRPC: "2.0", ID: id, Method: "tools/call",
			Params: json.RawMessage(`{"name":"ev__echo","arguments":{}}`)}, c)
		c.finish()
		close(done)
	}()
	<-started
	s.Deliver(context.Background(), sess, &Message{JSONRPC: "2.0", Method: "notifications/cancelled", Params: json.RawMessage(`{"requestId":"c1"}`)}, nil)
	<-done
	if got := buf.String(); got != "" {
		t.Fatalf("a cancelled request was answered: %q", got)
	}
}

// syncBytes is an io.Writer safe for concurrent use.
type syncBytes struct {
	mu sync.Mutex
	b  []byte
}

func (s *syncBytes) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b = append(s.b, p...)
	return len(p), nil
}

func (s *syncBytes) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return string(s.b)
}
