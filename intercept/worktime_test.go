package intercept

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/foldproxy/foldproxy/policy"
)

// workResult is a tools/call result of n distinct words (so that counting
// asks the merge, and its hook, for each).
func workResult(tb testing.TB, n int) json.RawMessage {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, " w%dq", i)
	}
	return textResult(tb, b.String())
}

// TestWorkTimeoutCoversCounting: scrub.timeout bounds scrubbing and
// counting together. Time is synctest's: the scan and the count take the
// virtual time their hooks sleep, or block until the deadline passes.
func TestWorkTimeoutCoversCounting(t *testing.T) {
	const timeout = time.Second
	tests := []struct {
		name       string
		words      int           // of the result; 20,000 words pass inlineCountBytes
		scan       time.Duration // the scan's time
		count      time.Duration // the count's time; -1: until released
		wantWithld bool
	}{
		{"both within", 10, 300 * time.Millisecond, 600 * time.Millisecond, false},
		{"count alone over", 10, 0, timeout + time.Millisecond, true},
		{"scan and count over together", 10, 600 * time.Millisecond, 600 * time.Millisecond, true},
		{"large, within", 20_000, 300 * time.Millisecond, 600 * time.Millisecond, false},
		{"large, count never ends", 20_000, 300 * time.Millisecond, -1, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var scanned atomic.Bool
				s := testScrubber(t, policy.Scrub{}).WithFault(timeout, false, func(ctx context.Context, text string) error {
					if !scanned.Swap(true) {
						time.Sleep(tt.scan)
					}
					return nil
				})
				release := make(chan struct{})
				var counted atomic.Bool
				c := newCounter(t, "").WithWorkHook(func(int) {
					if counted.Swap(true) {
						return
					}
					if tt.count < 0 {
						<-release
						return
					}
					time.Sleep(tt.count)
				})
				res := workResult(t, tt.words)
				if len(res) >= inlineCountBytes != (tt.words > 10) {
					t.Fatalf("the result is %d bytes: the case does not take the path it names", len(res))
				}
				h := Chain(func(ctx context.Context, ex *Exchange) error {
					ex.Result = res
					return nil
				}, Tokens(c), Scrub(s))
				ex := &Exchange{Method: "tools/call", Remaining: -1, Outcome: OutcomeOK}
				start := time.Now()
				err := h(t.Context(), ex)
				took := time.Since(start)
				close(release)
				if !counted.Load() {
					t.Fatal("the counter's hook never ran: the test measures nothing")
				}
				if !tt.wantWithld {
					if err != nil || ex.Outcome != OutcomeOK || ex.ResultTokens == 0 {
						t.Errorf("err %v, outcome %s, %d tokens; want the result delivered and counted", err, ex.Outcome, ex.ResultTokens)
					}
					return
				}
				want := "foldproxy withheld this result: it could not be scanned for secrets and counted within scrub.timeout"
				if !errors.Is(err, ErrWithheld) || ex.Outcome != OutcomeWithheld || ex.Result != nil || err.Error() != want {
					t.Errorf("err %v, outcome %s, result %.30s; want %q, withheld, none", err, ex.Outcome, ex.Result, want)
				}
				if tt.count < 0 && took != timeout {
					t.Errorf("the exchange ended after %s of synctest time, want at the deadline, %s", took, timeout)
				}
			})
		})
	}
}
