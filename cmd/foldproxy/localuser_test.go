package main

import (
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// serveGuarded serves a handler answering "ok" behind g on loopback and
// returns its base URL.
func serveGuarded(t testing.TB, g *localUsers) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }),
		ReadHeaderTimeout: 10 * time.Second}
	g.apply(hs)
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(func() { _ = hs.Close() })
	return "http://" + ln.Addr().String()
}

func getText(t testing.TB, c *http.Client, url string) (int, string) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestLocalUsersOncePerConnection: the user of a connection is looked up
// once, whatever the number of requests on it; the user's own are served.
func TestLocalUsersOncePerConnection(t *testing.T) {
	var lookups atomic.Int32
	g := &localUsers{uid: 1000, logger: discard(), lookup: func(net.Conn) (int, error) {
		lookups.Add(1)
		return 1000, nil
	}}
	base := serveGuarded(t, g)
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	for range 5 {
		if code, body := getText(t, c, base); code != 200 || body != "ok" {
			t.Fatalf("the user's own request: %d %q", code, body)
		}
	}
	if n := lookups.Load(); n != 1 {
		t.Errorf("%d lookups for 5 requests on one connection, want 1", n)
	}
	c.CloseIdleConnections()
	getText(t, c, base)
	if n := lookups.Load(); n != 2 {
		t.Errorf("%d lookups after a second connection, want 2", n)
	}
}

// TestLocalUsersRefusesOthers: another user's connection, and one whose
// user cannot be found, get 403 saying why and what to do.
func TestLocalUsersRefusesOthers(t *testing.T) {
	for _, c := range []struct {
		uid  int
		err  error
		want string
	}{
		{uid: 4242, want: "this connection is uid 4242's: set foldproxy.authToken"},
		{err: errors.New("no such socket"), want: "could not tell which local user this connection comes from (no such socket)"},
	} {
		g := &localUsers{uid: 1000, logger: discard(), lookup: func(net.Conn) (int, error) { return c.uid, c.err }}
		code, body := getText(t, http.DefaultClient, serveGuarded(t, g))
		if code != http.StatusForbidden || !strings.Contains(body, c.want) {
			t.Errorf("uid %d, err %v: %d %q, want 403 with %q", c.uid, c.err, code, body, c.want)
		}
	}
}

// TestLocalAccessOf: a token configured is all; without one, the user
// check where the system has it, else a token generated in the state
// folder, kept across restarts.
func TestLocalAccessOf(t *testing.T) {
	dir := t.TempDir()
	if a, err := localAccessOf(dir, "tok", "127.0.0.1:1", "", "", discard()); err != nil || a.guard != nil || a.token != "tok" {
		t.Errorf("with a token: %+v %v", a, err)
	}
	if a, err := localAccessOf(dir, "", "", "", "", discard()); err != nil || a.guard != nil || a.token != "" {
		t.Errorf("no listener: %+v %v", a, err)
	}
	a, err := localAccessOf(dir, "", "127.0.0.1:1", "", "", discard())
	if err != nil {
		t.Fatal(err)
	}
	if tcpPeerSupported {
		if a.guard == nil || a.token != "" || a.guard.uid != os.Getuid() {
			t.Errorf("loopback without a token: %+v, want the user check", a)
		}
		return
	}
	if a.guard != nil || len(a.token) != 64 {
		t.Fatalf("loopback without a token here: %+v, want a generated token", a)
	}
	if fi, err := os.Stat(filepath.Join(dir, localTokenName)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the token file: %v %v, want mode 0600", fi, err)
	}
	b, err := localAccessOf(dir, "", "127.0.0.1:1", "", "", discard())
	if err != nil || b.token != a.token {
		t.Errorf("a restart made another token: %q, was %q (%v)", b.token, a.token, err)
	}
}

// BenchmarkLocalUsers is the cost of the user check per request over HTTP
// on loopback, against no check in the same run: keep-alive requests pay
// it once per connection, a request on a new connection each time.
func BenchmarkLocalUsers(b *testing.B) {
	for _, guarded := range []bool{false, true} {
		var g *localUsers
		name := "nocheck"
		if guarded {
			g, name = &localUsers{uid: os.Getuid(), lookup: tcpPeerUID, logger: discard()}, "check"
		}
		base := serveGuarded(b, g)
		for _, keep := range []bool{true, false} {
			mode := "keepalive"
			if !keep {
				mode = "newconn"
			}
			b.Run(name+"/"+mode, func(b *testing.B) {
				tr := &http.Transport{DisableKeepAlives: !keep}
				defer tr.CloseIdleConnections()
				c := &http.Client{Transport: tr}
				for b.Loop() {
					if code, _ := getText(b, c, base); code != 200 {
						b.Fatalf("HTTP %d", code)
					}
				}
			})
		}
	}
}
