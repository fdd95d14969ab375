package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/foldproxy/foldproxy/intercept"
	"github.com/foldproxy/foldproxy/intercept/secrets"
	"github.com/foldproxy/foldproxy/policy"
	"github.com/foldproxy/foldproxy/policy/jsonrpc"
	"github.com/foldproxy/foldproxy/upstreams"
)

// An upstream's JSON-RPC error changes type nowhere on its way back: the
// upstream answers a *jsonrpc.Error, the scrub interceptor replaces it with
// a *jsonrpc.Error (same code, secret removed), and the agent gets that
// error, code and scrubbed message.
func TestUpstreamErrorReachesAgentAsOneTypeScrubbed(t *testing.T) {
	secret := "ghp_" + "A1b2C3d4E5f6G7h8J9k0L1m2N3p4Q5r6S7t8"
	up := &fakeUpstream{name: "ev", cat: upstreams.Catalog{Tools: []json.RawMessage{json.RawMessage(echoTool)}}}
	up.answer = func(context.Context, string, json.RawMessage) (json.RawMessage, error) {
		return nil, &jsonrpc.Error{Code: -32000, Message: "auth failed for " + secret}
	}
	sc, err := secrets.NewScrubber(policy.Default().Scrub, nil)
	if err != nil {
		t.Fatal(err)
	}
	var inner, outer string // the error's type inside and outside the scrubber
	spy := func(seen *string) intercept.Interceptor {
		return func(next intercept.Handler) intercept.Handler {
			return func(ctx context.Context, ex *intercept.Exchange) error {
				err := next(ctx, ex)
				*seen = fmt.Sprintf("%T", ex.RPCError)
				return err
			}
		}
	}
	s, _ := newTestServer(t, []Upstream{up}, func(o *Options) {
		o.Interceptors = []intercept.Interceptor{spy(&outer), intercept.Scrub(sc), spy(&inner)}
	})
	sess := initSession(t, s, `{}`)
	resp := do(t, s, sess, "tools/call", `{"name":"ev__echo","arguments":{"message":"x"}}`)
	if inner != "*jsonrpc.Error" || outer != "*jsonrpc.Error" {
		t.Errorf("the upstream's error is %s before scrubbing and %s after; want *jsonrpc.Error both", inner, outer)
	}
	if resp.Error == nil {
		t.Fatalf("want the upstream's error, got result %s", resp.Result)
	}
	if got, want := resp.Error.Message, "auth failed for [REDACTED:github-pat]"; resp.Error.Code != -32000 || got != want {
		t.Errorf("agent got error %d %q, want -32000 %q", resp.Error.Code, got, want)
	}
}

// Every kind of message to the agent passes the chain, and the exchange
// says which: a notification from an upstream (MessageNotification) and a
// server-to-client request (MessageRequest), each scrubbed before it is
// relayed.
func TestRelayedMessagesPassTheChain(t *testing.T) {
	up := &fakeUpstream{name: "ev", cat: upstreams.Catalog{Tools: []json.RawMessage{json.RawMessage(echoTool)}}}
	var mu sync.Mutex
	var kinds []string
	spy := func(next intercept.Handler) intercept.Handler {
		return func(ctx context.Context, ex *intercept.Exchange) error {
			err := next(ctx, ex)
			mu.Lock()
			kinds = append(kinds, ex.Kind.String()+" "+ex.Method+" "+string(ex.Params))
			mu.Unlock()
			return err
		}
	}
	s, _ := newTestServer(t, []Upstream{up}, func(o *Options) {
		o.Interceptors = []intercept.Interceptor{spy}
		o.Scrubber = tokenRedactor{}
	})
	out := newRecorder()
	sess := s.OpenSession(context.Background(), "", "http", out)
	if resp := do(t, s, sess, "initialize", `{"protocolVersion":"2025-06-18","capabilities":{"sampling":{}},"clientInfo":{"name":"t","version":"1"}}`); resp.Error != nil {
		t.Fatalf("initialize: %v", resp.Error)
	}

	s.UpstreamNotification("ev", "notifications/message", json.RawMessage(`{"level":"info","data":"hello","progressToken":"tok"}`))
	if got := out.next(t); !strings.Contains(got, `"data":"hello"`) || !strings.Contains(got, "[REDACTED:generic-api-key]") {
		t.Errorf("relayed notification = %s, want it scrubbed", got)
	}

	resc := make(chan error, 1)
	go func() {
		_, err := s.UpstreamRequest(context.Background(), "ev", "sampling/createMessage", json.RawMessage(`{"messages":[],"progressToken":"tok"}`))
		resc <- err
	}()
	var req Message
	if err := json.Unmarshal([]byte(out.next(t)), &req); err != nil || req.Method != "sampling/createMessage" {
		t.Fatalf("want the sampling request, got %+v (%v)", req, err)
	}
	if !strings.Contains(string(req.Params), "[REDACTED:generic-api-key]") {
		t.Errorf("relayed request params = %s, want them scrubbed", req.Params)
	}
	s.Deliver(context.Background(), sess, &Message{JSONRPC: "2.0", ID: req.ID, Result: json.RawMessage(`{}`)}, nil)
	if err := <-resc; err != nil {
		t.Fatalf("the agent's answer: %v", err)
	}

	mu.Lock()
	defer mu.Unlock()
	want := []string{
		`notification notifications/message {"level":"info","data":"hello","progressToken":"[REDACTED:generic-api-key]"}`,
		`request sampling/createMessage {"messages":[],"progressToken":"[REDACTED:generic-api-key]"}`,
	}
	if !slices.Equal(kinds, want) {
		t.Errorf("exchanges through the chain:\n got %q\nwant %q", kinds, want)
	}
}
