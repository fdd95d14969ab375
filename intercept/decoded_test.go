package intercept

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/foldproxy/foldproxy/policy"
)

// TestDecodedReleasedAfterCount: the Tokens interceptor gives the scan's
// decoded view back to viewPool once it has counted from it, and the counts
// stay those of a count that decodes every text itself while the pooled
// buffers are used again, call after call (two passes over the
// trajectories, so the second one decodes into buffers the first one gave
// back).
func TestDecodedReleasedAfterCount(t *testing.T) {
	s := testScrubber(t, policy.Scrub{})
	c := newCounter(t, "")
	outs := trajectoryOutputs(t)
	var cur json.RawMessage
	h := Chain(func(_ context.Context, ex *Exchange) error { ex.Result = cur; return nil }, Tokens(c), Scrub(s))
	shared := 0
	for pass := range 2 {
		for i, o := range outs {
			cur = textResult(t, o)
			ex := &Exchange{Session: "s", Upstream: "u", Method: "tools/call", Name: "t", Remaining: -1}
			if err := h(context.Background(), ex); err != nil {
				t.Fatalf("pass %d output %d: %v", pass, i, err)
			}
			if ex.decoded != nil {
				t.Fatalf("pass %d output %d: the decoded view is still held after the count", pass, i)
			}
			want, ok := countBy(c, time.Now().Add(time.Hour), ex.Args, ex.Result, nil, ex.Method, -1)
			if !ok {
				t.Fatalf("pass %d output %d: the reference count did not end", pass, i)
			}
			if ex.ResultTokens != want.Result {
				t.Errorf("pass %d output %d: %d tokens counted from the shared decoding, %d decoding afresh", pass, i, ex.ResultTokens, want.Result)
			}
			if string(ex.Result) == string(cur) {
				shared++
			}
		}
	}
	if shared == 0 {
		t.Fatal("no result went through unedited: the decoding was never shared")
	}
}
