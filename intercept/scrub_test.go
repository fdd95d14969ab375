package intercept

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/foldproxy/foldproxy/fold"
	"github.com/foldproxy/foldproxy/intercept/secrets"
	"github.com/foldproxy/foldproxy/intercept/tokens"
	"github.com/foldproxy/foldproxy/policy"
	"github.com/foldproxy/foldproxy/policy/jsonrpc"
)

func TestScrubDisabled(t *testing.T) {
	s, err := secrets.NewScrubber(policy.Scrub{Disabled: true, GitleaksConfig: "testdata/no-such-file.toml"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tok := "ghp_" + hiEntropy36
	if got, _, err := s.ScrubText(context.Background(), tok); got != tok || err != nil {
		t.Errorf("disabled ScrubText = %q, %v; want it unchanged", got, err)
	}
	ex := &Exchange{}
	res := json.RawMessage(`{"t":"` + tok + `"}`)
	h := Chain(func(ctx context.Context, ex *Exchange) error { ex.Result = res; return nil }, Scrub(s))
	if err := h(context.Background(), ex); err != nil || string(ex.Result) != string(res) {
		t.Errorf("disabled interceptor: %v %s", err, ex.Result)
	}
}

var errSentinel = errors.New("sentinel")

func TestScrubInterceptor(t *testing.T) {
	s := testScrubber(t, policy.Scrub{})
	tok := "ghp_" + hiEntropy36
	clean := &jsonrpc.Error{Code: -32602, Message: "bad params"}
	tests := []struct {
		name       string
		result     string
		rpc        error
		err        error
		wantResult string
		wantRPC    string
		wantCode   int
		wantErr    string
		wantCount  int
	}{
		{name: "result", result: `{"content":[{"type":"text","text":"t=` + tok + `"}]}`, wantResult: `{"content":[{"type":"text","text":"t=[REDACTED:github-pat]"}]}`, wantCount: 1},
		{name: "clean result", result: `{"content":[]}`, wantResult: `{"content":[]}`},
		{name: "rpc error", rpc: &jsonrpc.Error{Code: -32000, Message: "auth failed for " + tok, Data: json.RawMessage(`{"token":"` + tok + `"}`)}, wantRPC: "json-rpc error -32000: auth failed for [REDACTED:github-pat]", wantCode: -32000, wantCount: 2},
		{name: "plain error", rpc: fmt.Errorf("upstream said %s", tok), wantRPC: "json-rpc error -32603: upstream said [REDACTED:github-pat]", wantCode: -32603, wantCount: 1},
		{name: "clean rpc error", rpc: clean, wantRPC: clean.Error()},
		{name: "handler error", err: fmt.Errorf("dial https://x:%s@host: %w", tok, errSentinel), wantErr: "dial https://x:[REDACTED:github-pat]@host: sentinel", wantCount: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ex := &Exchange{}
			h := Chain(func(ctx context.Context, ex *Exchange) error {
				if tt.result != "" {
					ex.Result = json.RawMessage(tt.result)
				}
				ex.RPCError = tt.rpc
				if tt.err != nil {
					ex.Err = tt.err
					return tt.err
				}
				return nil
			}, Scrub(s))
			err := h(context.Background(), ex)
			if string(ex.Result) != tt.wantResult {
				t.Errorf("Result = %s, want %s", ex.Result, tt.wantResult)
			}
			if tt.wantRPC != "" {
				if ex.RPCError == nil || ex.RPCError.Error() != tt.wantRPC {
					t.Errorf("RPCError = %v, want %s", ex.RPCError, tt.wantRPC)
				}
				if tt.rpc == clean && ex.RPCError != clean {
					t.Errorf("a clean RPC error was replaced")
				}
				var se *jsonrpc.Error
				if errors.As(ex.RPCError, &se) && ex.RPCError != tt.rpc { // replaced: scrubbed
					if se.Code != tt.wantCode {
						t.Errorf("code = %d, want %d", se.Code, tt.wantCode)
					}
					if bytes.Contains(se.Data, []byte(tok)) {
						t.Errorf("data still holds the token: %s", se.Data)
					}
				}
			}
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr || ex.Err.Error() != tt.wantErr {
					t.Errorf("err = %v, ex.Err = %v, want %s", err, ex.Err, tt.wantErr)
				}
				if !errors.Is(err, errSentinel) {
					t.Errorf("errors.Is(err, sentinel) = false, want true")
				}
			} else if err != nil {
				t.Errorf("err = %v, want nil", err)
			}
			if sum(ex.Redactions) != tt.wantCount {
				t.Errorf("Redactions = %v, want %d", ex.Redactions, tt.wantCount)
			}
			if ex.ScrubTime <= 0 {
				t.Errorf("ScrubTime = %s, want it set", ex.ScrubTime)
			}
		})
	}
}

func TestScrubFailClosed(t *testing.T) {
	tok := "ghp_" + hiEntropy36
	// The detector that fails does so whatever the machine's load: its
	// timeout is too long to matter. The detectors that never answer make
	// the timeout the only possible outcome, so its length is no margin.
	tests := []struct {
		name    string
		timeout time.Duration
		fault   func(ctx context.Context, text string) error
		want    string
	}{
		{"error", time.Hour, func(ctx context.Context, text string) error {
			return errors.New("detector broke")
		}, "foldproxy withheld this result: it could not be scanned for secrets (scan failed: the secret detector reported an error)"},
		{"panic", time.Hour, func(ctx context.Context, text string) error {
			panic("boom " + text)
		}, "foldproxy withheld this result: it could not be scanned for secrets (scan failed: the secret detector panicked)"},
		{"hang", 50 * time.Millisecond, func(ctx context.Context, text string) error {
			select {} // ignores its context
		}, "foldproxy withheld this result: it could not be scanned for secrets (scan timed out after 50ms)"},
		{"slow", 50 * time.Millisecond, func(ctx context.Context, text string) error {
			<-ctx.Done()
			return ctx.Err()
		}, "foldproxy withheld this result: it could not be scanned for secrets (scan timed out after 50ms)"},
	}
	for _, tt := range tests {
		for _, size := range []int{100, 300 << 10} { // one chunk, and several in parallel
			t.Run(fmt.Sprintf("%s/%d", tt.name, size), func(t *testing.T) {
				// A detector that waits, whether or not on its
				// context, is cut off at the deadline only on a
				// goroutine of its own: small texts are scanned
				// inline, with no timer (TestScrubInlineLate).
				waits := tt.name == "hang" || tt.name == "slow"
				s := testScrubber(t, policy.Scrub{}).WithFault(tt.timeout, waits, tt.fault)
				payload := tok + " " + strings.Repeat("xxxxxxx. ", size/9) // lines cut into pieces
				ex := &Exchange{Outcome: OutcomeOK}
				h := Chain(func(ctx context.Context, ex *Exchange) error {
					ex.Result = json.RawMessage(`{"text":"` + payload + `"}`)
					return nil
				}, Scrub(s))
				err := h(context.Background(), ex)
				if ex.Result != nil || ex.Outcome != OutcomeWithheld {
					t.Errorf("Result = %.40s, Outcome = %s; want nil, withheld", ex.Result, ex.Outcome)
				}
				if err == nil || ex.Err == nil || err.Error() != tt.want || ex.Err.Error() != tt.want {
					t.Errorf("err = %v, ex.Err = %v, want %s", err, ex.Err, tt.want)
				}
				if !errors.Is(err, ErrWithheld) {
					t.Errorf("errors.Is(err, ErrWithheld) = false")
				}
				if err != nil && strings.Contains(err.Error(), tok[:16]) {
					t.Errorf("error holds the text: %v", err)
				}
				// ScrubText fails the same way and returns no text.
				got, _, terr := s.ScrubText(context.Background(), payload)
				if terr == nil || got != "" {
					t.Errorf("ScrubText = %.40q, %v; want no text and an error", got, terr)
				}
			})
		}
	}
}

// TestScrubInlineLate: a small text is scanned on the caller's goroutine;
// a scan that ignores its context and ends past the deadline still
// withholds the result. Time is synctest's.
func TestScrubInlineLate(t *testing.T) {
	tok := "ghp_" + hiEntropy36
	synctest.Test(t, func(t *testing.T) {
		calls := 0
		s := testScrubber(t, policy.Scrub{}).WithFault(time.Second, false, func(ctx context.Context, text string) error {
			calls++
			time.Sleep(2 * time.Second) // ignores ctx
			return nil
		})
		payload := tok + " done"
		if len(payload) >= secrets.InlineScanBytes {
			t.Fatalf("%d bytes is not scanned inline", len(payload))
		}
		ex := &Exchange{Outcome: OutcomeOK}
		h := Chain(func(ctx context.Context, ex *Exchange) error {
			ex.Result = json.RawMessage(`{"text":"` + payload + `"}`)
			return nil
		}, Scrub(s))
		err := h(context.Background(), ex)
		want := "foldproxy withheld this result: it could not be scanned for secrets (scan timed out after 1s)"
		if calls == 0 || ex.Result != nil || ex.Outcome != OutcomeWithheld || err == nil || err.Error() != want {
			t.Errorf("%d scans, Result %.40s, Outcome %s, err %v; want withheld: %s", calls, ex.Result, ex.Outcome, err, want)
		}
		got, _, terr := s.ScrubText(context.Background(), payload)
		if terr == nil || got != "" || terr.Error() != "scan timed out after 1s" {
			t.Errorf("ScrubText = %.40q, %v; want no text and a timeout", got, terr)
		}
	})
}

// TestScrubCanceledCall: a call that ends (the agent cancels it, or its
// deadline passes) while its result is scanned is not a scan failure. The
// exchange says canceled, delivers nothing, and its error wraps the
// context's, so that the proxy sends no response to a canceled call.
func TestScrubCanceledCall(t *testing.T) {
	s := testScrubber(t, policy.Scrub{})
	for _, tt := range []struct {
		name string
		end  func(context.Context) (context.Context, func())
		want error
	}{
		{"cancel", func(ctx context.Context) (context.Context, func()) { return context.WithCancel(ctx) }, context.Canceled},
		{"deadline", func(ctx context.Context) (context.Context, func()) {
			return context.WithDeadline(ctx, time.Unix(0, 0))
		}, context.DeadlineExceeded},
	} {
		for _, upstreamErr := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/upstream-error=%v", tt.name, upstreamErr), func(t *testing.T) {
				ctx, end := tt.end(context.Background())
				ex := &Exchange{Method: "tools/call"}
				h := Chain(func(ctx context.Context, ex *Exchange) error {
					end() // the agent cancels while the upstream answers
					if upstreamErr {
						ex.Err = fmt.Errorf("tools/call on up cancelled: %w", ctx.Err())
						return ex.Err
					}
					ex.Result = json.RawMessage(`{"content":[{"type":"text","text":"ghp_` + hiEntropy36 + `"}]}`)
					return nil
				}, Scrub(s))
				err := h(ctx, ex)
				if !errors.Is(err, tt.want) || !errors.Is(ex.Err, tt.want) {
					t.Errorf("err = %v, ex.Err = %v; want both to wrap %v", err, ex.Err, tt.want)
				}
				if errors.Is(err, ErrWithheld) || strings.Contains(fmt.Sprint(err), "could not be scanned") {
					t.Errorf("err = %v: a canceled call is reported as a scan failure", err)
				}
				if ex.Outcome != OutcomeCanceled || ex.Result != nil {
					t.Errorf("Outcome = %q, Result = %s; want canceled and nothing", ex.Outcome, ex.Result)
				}
			})
		}
	}
}

// TestScrubArgsArchived: a secret the agent put in a tool call's
// arguments reaches the upstream as sent, but the charge (what fold
// archives) holds the scrubbed arguments; arguments that cannot be scanned
// withhold the exchange, so nothing of it is archived.
func TestScrubArgsArchived(t *testing.T) {
	tok := "ghp_" + hiEntropy36
	args := json.RawMessage(`{"cmd":"curl -H 'Authorization: token ` + tok + `' https://api.github.com","env":{"GITHUB_TOKEN":"` + tok + `"}}`)
	params := json.RawMessage(`{"name":"sh","arguments":` + string(args) + `}`)
	c, err := tokens.NewCounter(policy.Tokens{})
	if err != nil {
		t.Fatal(err)
	}
	run := func(s *secrets.Scrubber) (*Exchange, *fakeBrancher, json.RawMessage, error) {
		fb := newFake(fold.Branch{ID: "root", Budget: 0})
		var sent json.RawMessage
		h := Chain(func(ctx context.Context, ex *Exchange) error {
			sent = ex.Params
			ex.Result = json.RawMessage(`{"content":[{"type":"text","text":"ok"}]}`)
			return nil
		}, Budget(fb, c, nil), Tokens(c), Scrub(s))
		ex := &Exchange{Method: "tools/call", Name: "sh", Params: params, Args: args}
		err := h(context.Background(), ex)
		return ex, fb, sent, err
	}

	ex, fb, sent, err := run(testScrubber(t, policy.Scrub{}))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(sent, params) {
		t.Errorf("the upstream got %s, want the arguments as the agent sent them", sent)
	}
	if len(fb.charges) != 1 {
		t.Fatalf("%d charges, want 1", len(fb.charges))
	}
	archived := fb.charges[0].Args
	if strings.Contains(archived, tok[:16]) || !json.Valid([]byte(archived)) {
		t.Errorf("archived arguments %s: want valid JSON without the token", archived)
	}
	if got := strings.Count(archived, "[REDACTED:"); got != 2 || sum(ex.Redactions) != 2 {
		t.Errorf("archived %s with redactions %v; want both tokens redacted and counted", archived, ex.Redactions)
	}
	if ex.ArgTokens != c.CountArgs(json.RawMessage(archived)) {
		t.Errorf("ArgTokens = %d, want the count of the archived arguments", ex.ArgTokens)
	}

	// Fail closed: a detector that fails on the arguments withholds all.
	s := testScrubber(t, policy.Scrub{}).WithFault(0, false, func(ctx context.Context, text string) error {
		if strings.Contains(text, "GITHUB_TOKEN") {
			return errors.New("detector broke")
		}
		return nil
	})
	ex, fb, _, err = run(s)
	if !errors.Is(err, ErrWithheld) || ex.Outcome != OutcomeWithheld || ex.Result != nil {
		t.Errorf("err = %v, Outcome = %s, Result = %s; want withheld", err, ex.Outcome, ex.Result)
	}
	if len(fb.charges) != 0 {
		t.Errorf("%d charges archived for a withheld exchange, want none", len(fb.charges))
	}
}
