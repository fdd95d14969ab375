package main

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/foldproxy/foldproxy/policy"
	"github.com/foldproxy/foldproxy/upstreams"
)

func TestCheckLoops(t *testing.T) {
	st := policy.Default()
	for _, c := range []struct {
		listen, url string
		loops       bool
	}{
		{"127.0.0.1:8765", "http://127.0.0.1:8765", true},
		{"127.0.0.1:8765", "http://localhost:8765/v1", true},
		{"localhost:8765", "http://127.0.0.1:8765", true},
		{"127.0.0.1:8765", "http://[::ffff:127.0.0.1]:8765", true},
		{"0.0.0.0:80", "http://127.0.0.1", true},
		{"[::]:8765", "http://[::1]:8765", true},
		{"127.0.0.1:8765", "http://127.0.0.1:8766", false},
		{"127.0.0.1:8765", "http://127.0.0.2:8765", false},
		{"127.0.0.1:0", "http://127.0.0.1:0", false}, // not known yet
		{"127.0.0.1:8765", "https://api.anthropic.com", false},
		{"127.0.0.1:8765", "http://model.example:8765", false}, // a name: checked when connecting
	} {
		st.Model.AnthropicURL = c.url
		err := checkLoops(c.listen, st, nil)
		if got := err != nil; got != c.loops {
			t.Errorf("--listen %s, anthropicURL %s: %v, want a loop %v", c.listen, c.url, err, c.loops)
		}
		if err != nil && (!strings.Contains(err.Error(), "model.anthropicURL "+c.url+" is foldproxy's own --listen address") ||
			!strings.Contains(err.Error(), "https://api.anthropic.com")) {
			t.Errorf("the error does not say what and how to fix it: %v", err)
		}
	}
	st = policy.Default()
	if err := checkLoops("127.0.0.1:8765", st, []upstreams.Entry{{Name: "me", Type: "http", URL: "http://localhost:8765/mcp"}}); err == nil ||
		!strings.Contains(err.Error(), "mcpServers.me.url") {
		t.Errorf("an upstream that is foldproxy itself: %v", err)
	}
}

// TestSelfListenersGuard: a connection that reaches one of foldproxy's
// listeners is refused once made; others pass.
func TestSelfListenersGuard(t *testing.T) {
	own, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	other, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	loops := &selfListeners{}
	loops.add(own.Addr())
	dial := loops.guard((&net.Dialer{}).DialContext, "fix it")
	if _, err := dial(t.Context(), "tcp", own.Addr().String()); !errors.Is(err, errLoop) || !strings.Contains(err.Error(), "fix it") {
		t.Errorf("a connection to foldproxy's own listener: %v", err)
	}
	c, err := dial(t.Context(), "tcp", other.Addr().String())
	if err != nil {
		t.Fatalf("a connection elsewhere: %v", err)
	}
	c.Close()
	// A listener on every address owns the loopback ones.
	all := &selfListeners{}
	all.add(&net.TCPAddr{IP: net.IPv4zero, Port: own.Addr().(*net.TCPAddr).Port})
	if _, err := all.guard((&net.Dialer{}).DialContext, "")(t.Context(), "tcp", own.Addr().String()); !errors.Is(err, errLoop) {
		t.Errorf("a connection to a listener on every address: %v", err)
	}
	var none *selfListeners
	if c, err := none.guard((&net.Dialer{}).DialContext, "")(t.Context(), "tcp", own.Addr().String()); err != nil {
		t.Errorf("no listeners known: %v", err)
	} else {
		c.Close()
	}
}

// TestModelFrontLoopRefused: the HTTP front's model front with
// model.anthropicURL at its own listener (under a name, so that the start
// check cannot be sure) refuses the request it would send itself: the
// agent's request is the only one that arrives, and the answer says why.
func TestModelFrontLoopRefused(t *testing.T) {
	cc := testCoreConfig(t)
	cc.loops = &selfListeners{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cc.loops.add(ln.Addr())
	cc.settings.Model.AnthropicURL = "http://localhost:" + strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	c, err := openCore(context.Background(), cc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	h, closeStreams, err := c.httpHandler(ln.Addr().String(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer closeStreams()
	var arrived atomic.Int32
	looped := make(chan struct{})
	hs := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if arrived.Add(1) == 2 {
			close(looped) // the request came back: the loop, which the test stops here
		}
		if arrived.Load() > 1 {
			http.Error(w, "loop", http.StatusLoopDetected)
			return
		}
		h.ServeHTTP(w, r)
	})}
	go func() { _ = hs.Serve(ln) }()
	defer hs.Close()
	type answer struct {
		code int
		body string
		err  error
	}
	done := make(chan answer, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, "http://"+ln.Addr().String()+"/v1/messages",
			strings.NewReader(`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("anthropic-version", "2023-06-01")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			done <- answer{err: err}
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		done <- answer{code: resp.StatusCode, body: string(b)}
	}()
	select {
	case <-looped:
		t.Fatal("the model front sent the request to its own listener")
	case a := <-done:
		if a.err != nil || a.code != http.StatusBadGateway || !strings.Contains(a.body, "foldproxy's own listener") ||
			!strings.Contains(a.body, "model.anthropicURL") {
			t.Errorf("the agent got %d %q (%v); want 502 saying the request would come back to foldproxy", a.code, a.body, a.err)
		}
	}
	if n := arrived.Load(); n != 1 {
		t.Errorf("%d requests arrived, want the agent's alone", n)
	}
}
