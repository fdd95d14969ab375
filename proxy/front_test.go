package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/foldproxy/foldproxy/policy/jsonrpc"
)

// frontFake is a fake Endpoint for the fronts' tests. It answers requests by
// method:
//
//	echo        result {"echo": params}
//	initialize  a minimal initialize result; params {"fail":true} → error
//	notify      a progress notification on out, then the response
//	sample      a server-to-client request on out; waits for the agent's
//	            response (delivered later) and answers with its result
//	block       waits until ctx ends or a "release" notification, then answers
//	standalone  writes a notification to the session's standalone outbound
//	silent      returns without answering
//	panic       panics
//
// Notifications are recorded in order; "release" also unblocks "block".
type frontFake struct {
	mu        sync.Mutex
	opened    []frontOpen
	closes    map[*Session]int
	notes     []string // methods of the notifications delivered, in order
	responses []*Message
	pending   map[string]chan *Message // server-to-client requests by id key
	nextID    int
	release   chan struct{}
	relOnce   sync.Once
	cancelled chan string // ids of "block" requests whose ctx ended
	started   chan string // ids of "block" requests that started
}

type frontOpen struct {
	s          *Session
	id         string
	transport  string
	standalone Outbound
}

func newFrontFake() *frontFake {
	return &frontFake{
		closes:    make(map[*Session]int),
		pending:   make(map[string]chan *Message),
		release:   make(chan struct{}),
		cancelled: make(chan string, 100),
		started:   make(chan string, 100),
	}
}

func (f *frontFake) OpenSession(ctx context.Context, id, transport string, standalone Outbound) *Session {
	s := newSession(id, transport, standalone)
	f.mu.Lock()
	f.opened = append(f.opened, frontOpen{s: s, id: id, transport: transport, standalone: standalone})
	f.mu.Unlock()
	return s
}

func (f *frontFake) CloseSession(s *Session) {
	f.mu.Lock()
	f.closes[s]++
	f.mu.Unlock()
}

func (f *frontFake) closeCount(s *Session) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.closes[s]
}

func (f *frontFake) sessions() []frontOpen {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]frontOpen(nil), f.opened...)
}

func (f *frontFake) notifications() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.notes...)
}

func (f *frontFake) Deliver(ctx context.Context, s *Session, msg *Message, out Outbound) {
	switch {
	case msg.IsNotification():
		f.mu.Lock()
		f.notes = append(f.notes, msg.Method)
		f.mu.Unlock()
		if msg.Method == "release" {
			f.relOnce.Do(func() { close(f.release) })
		}
		return
	case msg.IsResponse():
		f.mu.Lock()
		f.responses = append(f.responses, msg)
		ch := f.pending[frontIDKey(msg.ID)]
		delete(f.pending, frontIDKey(msg.ID))
		f.mu.Unlock()
		if ch != nil {
			ch <- msg
		}
		return
	}
	answer := func(result string) { _ = out.WriteMessage(Response(msg.ID, json.RawMessage(result), nil)) }
	switch msg.Method {
	case "echo":
		params := msg.Params
		if len(params) == 0 {
			params = json.RawMessage("null")
		}
		answer(`{"echo":` + string(params) + `}`)
	case "initialize":
		if strings.Contains(string(msg.Params), `"fail":true`) {
			_ = out.WriteMessage(Response(msg.ID, nil, Errorf(CodeInvalidParams, "unsupported protocol version")))
			return
		}
		answer(`{"protocolVersion":"2025-06-18","capabilities":{},"serverInfo":{"name":"fake","version":"1"}}`)
	case "notify":
		_ = out.WriteMessage(Notification("notifications/progress", json.RawMessage(`{"progressToken":1,"progress":1}`)))
		answer(`{"done":true}`)
	case "sample":
		f.mu.Lock()
		f.nextID++
		id := json.RawMessage(fmt.Sprintf(`"srv-%d"`, f.nextID))
		ch := make(chan *Message, 1)
		f.pending[frontIDKey(id)] = ch
		f.mu.Unlock()
		req, _ := json.Marshal(Message{JSONRPC: "2.0", ID: id, Method: "sampling/createMessage", Params: json.RawMessage(`{"maxTokens":1}`)})
		if err := out.WriteMessage(req); err != nil {
			_ = out.WriteMessage(Response(msg.ID, nil, Errorf(CodeInternalError, "cannot reach the agent: %v", err)))
			return
		}
		select {
		case m := <-ch:
			// The agent may answer with an error (then there is no
			// result to quote): pass it on as the fake's own error.
			if m.Error != nil || len(m.Result) == 0 {
				_ = out.WriteMessage(Response(msg.ID, nil, Errorf(CodeInternalError, "the agent refused the sampling request")))
				return
			}
			answer(`{"sampled":` + string(m.Result) + `}`)
		case <-ctx.Done():
			_ = out.WriteMessage(Response(msg.ID, nil, Errorf(CodeInternalError, "cancelled")))
		}
	case "block":
		select {
		case f.started <- string(msg.ID):
		default: // nobody is counting (fuzzing)
		}
		select {
		case <-ctx.Done():
			select {
			case f.cancelled <- string(msg.ID):
			default:
			}
			_ = out.WriteMessage(Response(msg.ID, nil, Errorf(CodeInternalError, "request cancelled")))
		case <-f.release:
			answer(`{"released":true}`)
		}
	case "standalone":
		s.mu.Lock()
		sa := s.standalone
		s.mu.Unlock()
		if sa == nil {
			_ = out.WriteMessage(Response(msg.ID, nil, Errorf(CodeInternalError, "no standalone stream")))
			return
		}
		if err := sa.WriteMessage(Notification("notifications/message", msg.Params)); err != nil {
			_ = out.WriteMessage(Response(msg.ID, nil, Errorf(CodeInternalError, "standalone: %v", err)))
			return
		}
		answer(`{}`)
	case "silent":
	case "panic":
		panic("fake endpoint panics on purpose")
	default:
		_ = out.WriteMessage(Response(msg.ID, nil, Errorf(CodeMethodNotFound, "method not found: %s", msg.Method)))
	}
}

var _ Endpoint = (*frontFake)(nil)

// frontWait waits for cond to hold, failing the test after a generous bound.
// It is a guard against hangs, not a timing assertion.
func frontWait(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// frontRecv receives from ch, failing the test after a generous bound.
func frontRecv[T any](t testing.TB, what string, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		var zero T
		return zero
	}
}

// frontParseResponses decodes what a front wrote for the agent: one
// response or an array of them. It fails the test on anything else.
func frontParseResponses(t testing.TB, data []byte) (msgs []*Message, batch bool) {
	t.Helper()
	msgs, batch, rpcErr := ParseMessages(data)
	if rpcErr != nil {
		t.Fatalf("front wrote an invalid JSON-RPC message %q: %v", data, rpcErr)
	}
	for _, m := range msgs {
		if !m.IsResponse() {
			t.Fatalf("front wrote %q, want only responses", data)
		}
	}
	return msgs, batch
}

func TestFrontDecode(t *testing.T) {
	tests := []struct {
		name      string
		in        string
		wantBatch bool
		// want lists each item: a method for a message, "err:<code>:<id>" for a failure.
		want []string
	}{
		{"request", `{"jsonrpc":"2.0","id":1,"method":"a"}`, false, []string{"a"}},
		{"parse error", `{"jsonrpc":`, false, []string{"err:-32700:null"}},
		{"empty", ``, false, []string{"err:-32700:null"}},
		{"invalid with id", `{"jsonrpc":"1.0","id":7,"method":"a"}`, false, []string{"err:-32600:7"}},
		{"invalid with string id", `{"id":"x","method":"a"}`, false, []string{"err:-32600:\"x\""}},
		{"invalid with object id", `{"jsonrpc":"2.0","id":{},"method":"a"}`, false, []string{"err:-32600:null"}},
		{"empty batch", `[]`, false, []string{"err:-32600:null"}},
		{"broken batch", `[{"jsonrpc":"2.0"`, false, []string{"err:-32700:null"}},
		{"batch", `[{"jsonrpc":"2.0","id":1,"method":"a"},{"jsonrpc":"2.0","method":"b"}]`, true, []string{"a", "b"}},
		{"batch with bad element", `[{"jsonrpc":"2.0","id":1,"method":"a"},{"id":2},3]`, true, []string{"a", "err:-32600:2", "err:-32600:null"}},
		{"nested batch", `[[{"jsonrpc":"2.0","id":1,"method":"a"}]]`, true, []string{"err:-32600:null"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			items, batch := frontDecode([]byte(tt.in))
			if batch != tt.wantBatch {
				t.Errorf("batch = %v, want %v", batch, tt.wantBatch)
			}
			var got []string
			for _, it := range items {
				if it.msg != nil {
					got = append(got, it.msg.Method)
					continue
				}
				var m Message
				if err := json.Unmarshal(it.fail, &m); err != nil || m.Error == nil {
					t.Fatalf("failure %q is not an error response", it.fail)
				}
				got = append(got, fmt.Sprintf("err:%d:%s", m.Error.Code, m.ID))
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("items = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestFrontCompact(t *testing.T) {
	tests := []struct {
		in      string
		want    string
		wantErr bool
	}{
		{`{"a":1}`, `{"a":1}`, false},
		{"{\n  \"a\": \"x\\ny\"\n}\n", `{"a":"x\ny"}`, false},
		{"{\r\n\"a\":1}", `{"a":1}`, false},
		{"  ", "", true},
		{"{\"a\":\n1", "", true},
	}
	for _, tt := range tests {
		got, err := frontCompact([]byte(tt.in))
		if (err != nil) != tt.wantErr {
			t.Errorf("frontCompact(%q) error = %v, want error %v", tt.in, err, tt.wantErr)
			continue
		}
		if string(got) != tt.want {
			t.Errorf("frontCompact(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestFrontClassify(t *testing.T) {
	tests := []struct {
		in              string
		wantKey         string
		wantResp, wantE bool
	}{
		{`{"jsonrpc":"2.0","id":1,"result":{}}`, "n1", true, false},
		{`{"jsonrpc":"2.0","id":"a","error":{"code":1,"message":"x"}}`, "sa", true, true},
		{`{"jsonrpc":"2.0","id":1,"method":"m"}`, "", false, false},
		{`{"jsonrpc":"2.0","method":"m"}`, "", false, false},
		{`{"jsonrpc":"2.0","id":null,"error":{"code":1,"message":"x"}}`, "", false, false},
		{`nope`, "", false, false},
	}
	for _, tt := range tests {
		key, resp, isErr := frontClassify([]byte(tt.in))
		if key != tt.wantKey || resp != tt.wantResp || isErr != tt.wantE {
			t.Errorf("frontClassify(%s) = %q, %v, %v; want %q, %v, %v", tt.in, key, resp, isErr, tt.wantKey, tt.wantResp, tt.wantE)
		}
	}
}

func TestFrontIDKey(t *testing.T) {
	tests := []struct {
		a, b string
		same bool
	}{
		{`1`, `1`, true},
		{`1`, `"1"`, false},
		{`"&"`, `"\u0026"`, true},
		{`"a"`, `"b"`, false},
		{` 7 `, `7`, true},
	}
	for _, tt := range tests {
		if got := frontIDKey(json.RawMessage(tt.a)) == frontIDKey(json.RawMessage(tt.b)); got != tt.same {
			t.Errorf("frontIDKey(%s) == frontIDKey(%s) is %v, want %v", tt.a, tt.b, got, tt.same)
		}
	}
}

func TestFrontAwait(t *testing.T) {
	a := newFrontAwait()
	a.add(json.RawMessage(`1`))
	a.add(json.RawMessage(`1`))
	a.add(json.RawMessage(`"1"`))
	if got, want := a.pay("n2"), false; got != want {
		t.Errorf("pay(2) = %v, want %v", got, want)
	}
	if got, want := a.pay(`s1`), true; got != want {
		t.Errorf(`pay("1") = %v, want %v`, got, want)
	}
	if got, want := a.pay("n1"), true; got != want {
		t.Errorf("pay(1) = %v, want %v", got, want)
	}
	if got, want := a.left, 1; got != want {
		t.Errorf("left = %d, want %d", got, want)
	}
	var got []string
	for _, id := range a.missing() {
		got = append(got, string(id))
	}
	if len(got) != 1 || got[0] != "1" || a.left != 0 || a.pay("n1") {
		t.Errorf("missing = %v, left %d; want the second 1, then nothing owed", got, a.left)
	}
}

// classifyByDecoding is frontClassify without its fast path.
func classifyByDecoding(msg []byte) (string, bool, bool) {
	var env frontEnvelope
	if json.Unmarshal(msg, &env) != nil || env.Method != "" || len(env.ID) == 0 || string(env.ID) == "null" {
		return "", false, false
	}
	return frontIDKey(env.ID), true, len(env.Error) > 0 && string(env.Error) != "null"
}

func TestFrontClassifyFastPathAgreesWithDecoding(t *testing.T) {
	ids := []string{`1`, `-2.5e3`, `"a"`, `"a\"b\\"`, `"\u0026"`, `"<&>"`, `null`, `"fp-1"`}
	var msgs [][]byte
	for _, id := range ids {
		msgs = append(msgs,
			Response(json.RawMessage(id), json.RawMessage(`{"n":9007199254740993, "s":"<&>"}`), nil),
			Response(json.RawMessage(id), nil, Errorf(CodeInternalError, "x <&>")),
			Response(json.RawMessage(id), nil, rawError(t, `{"message":"m","code":1}`)),
			requestMessage(json.RawMessage(id), "sampling/createMessage", json.RawMessage(`{"a":1}`)),
		)
	}
	msgs = append(msgs, Notification("notifications/progress", json.RawMessage(`{"progressToken":1}`)),
		[]byte(`{"id":1,"jsonrpc":"2.0","result":{}}`))
	for _, m := range msgs {
		if !json.Valid(m) {
			t.Errorf("not valid JSON: %s", m)
		}
		k1, r1, e1 := frontClassify(m)
		k2, r2, e2 := classifyByDecoding(m)
		if k1 != k2 || r1 != r2 || e1 != e2 {
			t.Errorf("%s: fast path (%q %v %v), decoding (%q %v %v)", m, k1, r1, e1, k2, r2, e2)
		}
	}
}

func TestEnvelopesKeepRawBytes(t *testing.T) {
	result := `{"z":9007199254740993, "a" :"<&>",	"m":"\u00e9\/"}`
	if got, want := string(Response(json.RawMessage(`7`), json.RawMessage(result), nil)), `{"jsonrpc":"2.0","id":7,"result":`+result+`}`; got != want {
		t.Errorf("Response\n got %s\nwant %s", got, want)
	}
	if got, want := string(Notification("notifications/message", json.RawMessage(result))), `{"jsonrpc":"2.0","method":"notifications/message","params":`+result+`}`; got != want {
		t.Errorf("Notification\n got %s\nwant %s", got, want)
	}
	var m Message
	rawErr := `{"message":"m <&>\u00e9", "code":-32002,"data":` + result + `}`
	if err := json.Unmarshal([]byte(`{"jsonrpc":"2.0","id":1,"error":`+rawErr+`}`), &m); err != nil {
		t.Fatal(err)
	}
	if m.Error.Code != -32002 || m.Error.Message != "m <&>é" {
		t.Errorf("decoded error %+v", m.Error)
	}
	if got, want := string(Response(json.RawMessage(`"x"`), nil, m.Error)), `{"jsonrpc":"2.0","id":"x","error":`+rawErr+`}`; got != want {
		t.Errorf("relayed error\n got %s\nwant %s", got, want)
	}
	if got, want := string(Response(nil, nil, Errorf(-1, "a <&> b"))), `{"jsonrpc":"2.0","id":null,"error":{"code":-1,"message":"a <&> b"}}`; got != want {
		t.Errorf("built error\n got %s\nwant %s", got, want)
	}
}

// rawError is an *Error read from an error object, which keeps its bytes.
func rawError(t *testing.T, obj string) *Error {
	t.Helper()
	e, err := jsonrpc.ParseError(json.RawMessage(obj))
	if err != nil {
		t.Fatal(err)
	}
	return e
}
