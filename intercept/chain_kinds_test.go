package intercept

import (
	"context"
	"encoding/json"
	"os"
	"testing"
)

// NewChain's interceptors act on results only: a relayed notification or
// server-to-client request reaches the innermost handler, which scrubs it
// (the proxy's), and comes back neither counted, charged, audited nor
// metered; AfterCall runs for calls only.
func TestNewChainPassesRelayedKinds(t *testing.T) {
	p, _, auditPath := realParts(t)
	calls := 0
	p.AfterCall = func() { calls++ }
	ics, err := NewChain(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(ics) != 6 {
		t.Fatalf("NewChain with AfterCall = %d interceptors, want 6", len(ics))
	}
	for _, kind := range []MessageKind{MessageNotification, MessageRequest} {
		var inner MessageKind = 255
		h := Chain(func(_ context.Context, ex *Exchange) error {
			inner = ex.Kind
			ex.Params = json.RawMessage(`{"scrubbed":true}`)
			return nil
		}, ics...)
		ex := &Exchange{Kind: kind, Upstream: "gh", Method: "notifications/message", Params: json.RawMessage(`{"t":"ghp_` + hiEntropy36 + `"}`)}
		if err := h(context.Background(), ex); err != nil {
			t.Fatalf("%v: %v", kind, err)
		}
		if inner != kind {
			t.Errorf("%v: the innermost handler saw kind %v", kind, inner)
		}
		if string(ex.Params) != `{"scrubbed":true}` || ex.Redactions != nil || ex.ResultTokens != 0 || ex.Outcome != "" || ex.Branch != "" {
			t.Errorf("%v: the chain touched a relayed message: %+v", kind, ex)
		}
	}
	if calls != 0 {
		t.Errorf("AfterCall ran %d times for relayed messages, want 0", calls)
	}
	if b, _ := os.ReadFile(auditPath); len(b) != 0 {
		t.Errorf("relayed messages were audited as calls: %s", b)
	}
}
