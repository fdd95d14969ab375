package proxy

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/foldproxy/foldproxy/upstreams"
)

// twoSessions opens sessions A and B on s, both able to answer sampling and
// roots, and returns them with their standalone streams.
func twoSessions(t *testing.T, s *Server) (a, b *Session, aOut, bOut *recorder) {
	t.Helper()
	open := func() (*Session, *recorder) {
		out := newRecorder()
		sess := s.OpenSession(context.Background(), "", "http", out)
		resp := do(t, s, sess, "initialize", `{"protocolVersion":"2025-06-18","capabilities":{"sampling":{},"roots":{}},"clientInfo":{"name":"t","version":"1"}}`)
		if resp.Error != nil {
			t.Fatalf("initialize: %v", resp.Error)
		}
		return sess, out
	}
	a, aOut = open()
	b, bOut = open()
	return a, b, aOut, bOut
}

// heldCall is a tools/call in flight on the fake upstream until released.
type heldCall struct {
	ctx     context.Context // the context the upstream was called with
	out     *recorder       // the call's own response stream
	release chan struct{}
	done    chan struct{}
}

// holdCalls makes every call to up wait for its release, handing each
// call's context to started.
func holdCalls(up *fakeUpstream) chan heldCall {
	started := make(chan heldCall, 10)
	up.answer = func(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error) {
		h := heldCall{ctx: ctx, release: make(chan struct{})}
		started <- h
		<-h.release
		return json.RawMessage(`{"content":[]}`), nil
	}
	return started
}

func startCall(t *testing.T, s *Server, sess *Session, started chan heldCall) heldCall {
	t.Helper()
	out := newRecorder()
	done := make(chan struct{})
	go func() {
		s.Deliver(context.Background(), sess, &Message{JSONRPC: "2.0", ID: json.RawMessage(`1`), Method: "tools/call",
			Params: json.RawMessage(`{"name":"ev__echo","arguments":{"message":"x"}}`)}, out)
		close(done)
	}()
	h := <-started
	h.out, h.done = out, done
	return h
}

func (h heldCall) finish() { close(h.release); <-h.done }

// count returns how many messages r got whose text contains sub.
func count(r *recorder, sub string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, m := range r.msgs {
		if strings.Contains(m, sub) {
			n++
		}
	}
	return n
}

// Issue 14: upstreams are shared, and a server-to-client request or a log
// message made for session A's call reached session B. Now each goes to
// the session its call belongs to, an untied one is refused or dropped,
// and an answer from a session that was not asked is ignored.
func TestRelayedMessagesStayWithTheirSession(t *testing.T) {
	up := &fakeUpstream{name: "ev", cat: upstreams.Catalog{Tools: []json.RawMessage{json.RawMessage(echoTool)}}}
	started := holdCalls(up)
	s, _ := newTestServer(t, []Upstream{up}, nil)
	a, b, aOut, bOut := twoSessions(t, s)
	log := func(data string) {
		s.UpstreamNotification("ev", "notifications/message", json.RawMessage(`{"level":"info","data":"`+data+`"}`))
	}

	// Nothing in flight: a server's own log goes to everyone; a request
	// tied to no one is refused, and no one is asked.
	log("server-own")
	if count(aOut, "server-own") != 1 || count(bOut, "server-own") != 1 {
		t.Errorf("a log with no call in flight: A got %d, B got %d; want 1 each", count(aOut, "server-own"), count(bOut, "server-own"))
	}
	if _, err := s.UpstreamRequest(context.Background(), "ev", "roots/list", nil); err == nil || !strings.Contains(err.Error(), "nothing tells whose") {
		t.Errorf("roots/list with two clients and no call in flight: %v; want a refusal", err)
	}

	// Only A's call in flight: its log and its request are A's.
	ha := startCall(t, s, a, started)
	log("a-call-log")
	if count(ha.out, "a-call-log") != 1 || count(bOut, "a-call-log") != 0 || count(aOut, "a-call-log") != 0 {
		t.Errorf("A's call log: A's call stream %d, B %d; want 1 and 0", count(ha.out, "a-call-log"), count(bOut, "a-call-log"))
	}
	ha.out.next(t) // the log message
	resc := make(chan error, 1)
	go func() {
		_, err := s.UpstreamRequest(context.Background(), "ev", "sampling/createMessage", json.RawMessage(`{"messages":[{"role":"user","content":{"type":"text","text":"for-a"}}]}`))
		resc <- err
	}()
	var req Message
	if err := json.Unmarshal([]byte(ha.out.next(t)), &req); err != nil || req.Method != "sampling/createMessage" {
		t.Fatalf("want A's sampling request on A's call stream, got %+v (%v)", req, err)
	}
	// B answers A's request: ignored, A's request still waits.
	s.Deliver(context.Background(), b, &Message{JSONRPC: "2.0", ID: req.ID, Result: json.RawMessage(`{"from":"b"}`)}, nil)
	select {
	case err := <-resc:
		t.Fatalf("B's answer to A's request was taken (err %v)", err)
	default:
	}
	s.Deliver(context.Background(), a, &Message{JSONRPC: "2.0", ID: req.ID, Result: json.RawMessage(`{"from":"a"}`)}, nil)
	if err := <-resc; err != nil {
		t.Fatalf("A's answer: %v", err)
	}
	if count(bOut, "for-a") != 0 {
		t.Errorf("B saw A's sampling request")
	}

	// Both in flight: a log is nobody's and is dropped; an untied request
	// is refused; a request tied to B's call (made on its response stream)
	// is B's.
	hb := startCall(t, s, b, started)
	log("ambiguous")
	for name, r := range map[string]*recorder{"A": aOut, "B": bOut, "A's call": ha.out, "B's call": hb.out} {
		if n := count(r, "ambiguous"); n != 0 {
			t.Errorf("%s got %d copies of a log message that could be either session's", name, n)
		}
	}
	if _, err := s.UpstreamRequest(context.Background(), "ev", "sampling/createMessage", json.RawMessage(`{"messages":[]}`)); err == nil || !strings.Contains(err.Error(), "cannot tell which") {
		t.Errorf("untied sampling with two sessions in flight: %v; want a refusal", err)
	}
	go func() {
		_, err := s.UpstreamRequest(hb.ctx, "ev", "sampling/createMessage", json.RawMessage(`{"messages":[{"role":"user","content":{"type":"text","text":"for-b"}}]}`))
		resc <- err
	}()
	if err := json.Unmarshal([]byte(hb.out.next(t)), &req); err != nil || !strings.Contains(string(req.Params), "for-b") {
		t.Fatalf("want B's sampling request on B's call stream, got %+v (%v)", req, err)
	}
	s.Deliver(context.Background(), b, &Message{JSONRPC: "2.0", ID: req.ID, Result: json.RawMessage(`{}`)}, nil)
	if err := <-resc; err != nil {
		t.Fatalf("B's answer: %v", err)
	}
	if count(ha.out, "for-b") != 0 || count(aOut, "for-b") != 0 {
		t.Errorf("A saw B's sampling request")
	}
	ha.finish()
	hb.finish()
}
