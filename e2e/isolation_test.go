package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
)

// holdCall starts a long call on p (server-everything's
// trigger-long-running-operation) and returns once its first progress
// notification arrived, so that the call is surely in flight; the returned
// func cancels it and waits for it to end.
func holdCall(ctx context.Context, t *testing.T, p *peer, tool string) func() {
	t.Helper()
	token := newToken("hold")
	callCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = p.CallTool(callCtx, mcp.CallToolRequest{Params: mcp.CallToolParams{
			Name:      tool,
			Arguments: map[string]any{"duration": 120, "steps": 240},
			Meta:      &mcp.Meta{ProgressToken: token},
		}})
	}()
	if _, err := p.notes.waitFor(ctx, 1, progressFor(token)); err != nil {
		cancel()
		t.Fatalf("%s: waiting for the long call to start: %v", p.name, err)
	}
	return func() { cancel(); <-done }
}

// sawQuestion reports whether a's sampling handler was asked about q.
func sawQuestion(a *agent, q string) bool {
	for _, r := range a.samplingRequests() {
		b, _ := json.Marshal(r.CreateMessageParams)
		if strings.Contains(string(b), q) {
			return true
		}
	}
	return false
}

// sample calls trigger-sampling-request with a fresh question and returns
// the question and the result.
func sample(ctx context.Context, t *testing.T, p *peer) (string, string, bool) {
	q := newToken("question-" + strings.ReplaceAll(p.name, " ", "-"))
	text, res := p.callText(ctx, t, "everything__trigger-sampling-request", map[string]any{"prompt": q, "maxTokens": 20})
	return q, text, res.IsError
}

// Two sessions on the HTTP front share one server-everything: each
// session's sampling and elicitation requests reach that session's client
// only, even with both sessions' calls in flight at once on the upstream
// (issue 14: a request made for A's call went to B, carrying A's content).
// On a streamable HTTP upstream the request arrives on its call's own
// response stream, which ties it; on a stdio upstream nothing ties it once
// two sessions have calls in flight, and foldproxy refuses it to the
// upstream rather than guess.
func TestSessionsKeepTheirOwnRequests(t *testing.T) {
	t.Run("streamableHttp", func(t *testing.T) {
		cfg := writeConfig(t, map[string]any{"everything": urlEntry("http", startEverythingHTTP(t, "streamableHttp"))}, nil)
		url, _ := startProxyHTTPProcess(t, cfg)
		aAgent, bAgent := newAgent(), newAgent()
		a := directHTTPClient(t, aAgent, url)
		b := directHTTPClient(t, bAgent, url)
		ctx := testContext(t, 60*time.Second)

		// Both sessions have calls in flight on the upstream throughout.
		stopA := holdCall(ctx, t, a, "everything__trigger-long-running-operation")
		defer stopA()
		stopB := holdCall(ctx, t, b, "everything__trigger-long-running-operation")
		defer stopB()

		type out struct {
			q, text string
			isErr   bool
		}
		ac, bc := make(chan out, 1), make(chan out, 1)
		go func() { q, text, e := sample(ctx, t, a); ac <- out{q, text, e} }()
		go func() { q, text, e := sample(ctx, t, b); bc <- out{q, text, e} }()
		ra, rb := <-ac, <-bc
		for _, r := range []out{ra, rb} {
			if r.isErr || !strings.Contains(r.text, samplingReply) {
				t.Fatalf("sampling with both sessions busy: isError=%v %q, want the client's reply", r.isErr, r.text)
			}
		}
		if !sawQuestion(aAgent, ra.q) || sawQuestion(aAgent, rb.q) {
			t.Errorf("session A's client: saw its own question %v, saw B's %v; want only its own", sawQuestion(aAgent, ra.q), sawQuestion(aAgent, rb.q))
		}
		if !sawQuestion(bAgent, rb.q) || sawQuestion(bAgent, ra.q) {
			t.Errorf("session B's client: saw its own question %v, saw A's %v; want only its own", sawQuestion(bAgent, rb.q), sawQuestion(bAgent, ra.q))
		}

		text, res := b.callText(ctx, t, "everything__trigger-elicitation-request", nil)
		if res.IsError || !strings.Contains(text, elicitedName) {
			t.Fatalf("B's elicitation: isError=%v %q", res.IsError, text)
		}
		if na, nb := len(aAgent.elicitationRequests()), len(bAgent.elicitationRequests()); na != 0 || nb != 1 {
			t.Errorf("elicitation requests seen by A's client %d, by B's %d; want 0 and 1", na, nb)
		}
	})

	t.Run("stdio", func(t *testing.T) {
		cfg := writeConfig(t, map[string]any{"everything": everythingStdioEntry(t)}, nil)
		url, _ := startProxyHTTPProcess(t, cfg)
		aAgent, bAgent := newAgent(), newAgent()
		a := directHTTPClient(t, aAgent, url)
		b := directHTTPClient(t, bAgent, url)
		ctx := testContext(t, 60*time.Second)

		// Alone on the upstream, B's request is B's.
		qb, text, isErr := sample(ctx, t, b)
		if isErr || !strings.Contains(text, samplingReply) || !sawQuestion(bAgent, qb) || sawQuestion(aAgent, qb) {
			t.Fatalf("B's sampling alone: isError=%v %q; B's client saw it %v, A's %v", isErr, text, sawQuestion(bAgent, qb), sawQuestion(aAgent, qb))
		}

		// With A's call in flight too, nothing on a stdio wire tells whose
		// the request is: refused, and no client is asked.
		stopA := holdCall(ctx, t, a, "everything__trigger-long-running-operation")
		qb, text, isErr = sample(ctx, t, b)
		stopA()
		if sawQuestion(aAgent, qb) || sawQuestion(bAgent, qb) {
			t.Fatalf("an untied sampling request was sent to a client (A: %v, B: %v)", sawQuestion(aAgent, qb), sawQuestion(bAgent, qb))
		}
		if !isErr || !strings.Contains(text, "cannot tell which") {
			t.Fatalf("B's sampling with A's call in flight: isError=%v %q; want the upstream's error carrying foldproxy's refusal", isErr, text)
		}
		t.Logf("refused: %s", text)
	})
}
