//go:build linux

package attach

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/foldproxy/foldproxy/policy/jsonrpc"
	"github.com/foldproxy/foldproxy/proxy"
)

// fdDaemon is the daemon's end of the attach protocol for the relay's
// tests of descriptor passing: the connections for which take says so
// take the relay's descriptors (fdConn); the others relay (daemonConn).
type fdDaemon struct {
	ln    net.Listener
	fds   chan *fdConn
	conns chan *daemonConn
}

// fdConn is a connection on which the daemon took the agent's pipes.
type fdConn struct {
	c     net.Conn
	hello Hello
	p     *attachedPipes
}

func newFDDaemon(t *testing.T, take func(n int) bool) *fdDaemon {
	t.Helper()
	ln, err := net.Listen("unix", filepath.Join(t.TempDir(), "d.sock"))
	if err != nil {
		t.Fatal(err)
	}
	d := &fdDaemon{ln: ln, fds: make(chan *fdConn, 4), conns: make(chan *daemonConn, 4)}
	go func() {
		for n := 0; ; n++ {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			br := bufio.NewReader(c)
			line, err := br.ReadBytes('\n')
			var h Hello
			if err != nil || json.Unmarshal(line, &h) != nil {
				c.Close()
				continue
			}
			if !h.FDs || !take(n) {
				_, _ = io.WriteString(c, `{"session":"s-1","pid":1}`+"\n")
				d.conns <- &daemonConn{c: c, br: br, hello: h}
				continue
			}
			_, _ = io.WriteString(c, `{"session":"s-1","pid":1,"fds":true}`+"\n")
			p, err := receiveSession(c, 4096)
			if err != nil {
				t.Errorf("fake daemon: %v", err)
				c.Close()
				continue
			}
			d.fds <- &fdConn{c: c, hello: h, p: p}
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return d
}

func (d *fdDaemon) dial(ctx context.Context) (net.Conn, error) {
	var dl net.Dialer
	return dl.DialContext(ctx, "unix", d.ln.Addr().String())
}

// die ends the daemon's side as a kill -9 does: everything closed, nothing
// said.
func (f *fdConn) die() {
	f.p.in.Close()
	f.p.out.Close()
	f.p.unmap()
	f.c.Close()
}

// startPipeRelay runs Relay with PassFDs on real pipes, as an agent starts
// it, and returns the agent's ends.
func startPipeRelay(t *testing.T, dial func(context.Context) (net.Conn, error)) (stdin *os.File, stdout *bufio.Reader, done chan error) {
	t.Helper()
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	done = make(chan error, 1)
	go func() {
		done <- Relay(context.Background(), inR, outW, RelayOptions{Dial: dial, Config: "cfg", PassFDs: true, MaxMessageBytes: 4096})
		outW.Close()
		inR.Close()
	}()
	t.Cleanup(func() { inW.Close(); outR.Close() })
	return inW, bufio.NewReader(outR), done
}

// TestRelayTakesThePipesBack: the relay passes the agent's pipes to the
// daemon, which reads two requests and half of a third and starts an
// answer, then dies. The relay ends the answer's line, answers the
// tools/call with an error, sends the ping again to the next daemon, and
// then the third request whole: its first half from the journal, the rest
// as the agent sends it.
func TestRelayTakesThePipesBack(t *testing.T) {
	d := newFDDaemon(t, func(n int) bool { return n == 0 })
	stdin, stdout, done := startPipeRelay(t, d.dial)
	f := <-d.fds
	if !f.hello.FDs || f.hello.Session != "" {
		t.Fatalf("hello %+v", f.hello)
	}
	call := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a"}}`
	ping := `{"jsonrpc":"2.0","id":2,"method":"ping"}`
	third := `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"b"}}`
	if _, err := io.WriteString(stdin, call+"\n"+ping+"\n"+third[:30]); err != nil {
		t.Fatal(err)
	}
	j := f.p.j
	for _, want := range []string{call, ping} {
		line, _, err := j.readLine(f.p.read)
		if err != nil || string(line) != want {
			t.Fatalf("daemon read %q, %v; want %q", line, err, want)
		}
		id, method, _ := relayRequestOf(line)
		if err := j.track(id, method, line, j.lineEndPos(), 0, proxy.Resendable(method)); err != nil {
			t.Fatal(err)
		}
		j.done()
	}
	// The third request's first half is in the journal's buffer (one
	// read took all three); the answer to the first goes out in part.
	if j.in.filled != uint64(len(call)+len(ping)+2+30) {
		t.Fatalf("the journal holds %d bytes read, want %d", j.in.filled, len(call)+len(ping)+2+30)
	}
	ref, _ := j.answering([]string{jsonrpc.IDKey([]byte("1"))})
	j.beginOut(100, ref)
	if _, err := f.p.write([]byte(`{"jsonrp`), j.wrote); err != nil {
		t.Fatal(err)
	}
	f.die()

	if got, _ := stdout.ReadString('\n'); got != `{"jsonrp`+"\n" {
		t.Errorf("the answer cut short reaches the agent as %q, want it ended with a line break", got)
	}
	if got, _ := stdout.ReadString('\n'); !strings.Contains(got, `"id":1`) || !strings.Contains(got, "may or may not have been carried out") {
		t.Errorf("the tools/call the daemon took was answered with %q", got)
	}
	c2 := <-d.conns
	if c2.hello.Session != "s-1" || !c2.hello.FDs {
		t.Errorf("the new hello %+v, want session s-1 offering the descriptors", c2.hello)
	}
	if got := c2.line(t); got != ping {
		t.Errorf("the new daemon got %q first, want the ping again", got)
	}
	if _, err := io.WriteString(stdin, third[30:]+"\n"); err != nil {
		t.Fatal(err)
	}
	if got := c2.line(t); got != third {
		t.Errorf("the new daemon got %q, want the third request whole %q", got, third)
	}
	stdin.Close()
	if _, err := c2.br.ReadByte(); err != io.EOF {
		t.Errorf("the daemon's connection was not closed for writing at the end of stdin: %v", err)
	}
	c2.c.Close()
	if err := <-done; err != nil {
		t.Errorf("Relay: %v", err)
	}
}

// TestRelayEndsWithTheDaemon: a relay whose descriptors the daemon took
// returns when the daemon says the session ended, with the agent's side's
// error when it says it failed.
func TestRelayEndsWithTheDaemon(t *testing.T) {
	for _, tc := range []struct {
		say  string
		want error
	}{{attachEnded + "\n", nil}, {attachFailed + "stdio: writing to the agent: broken pipe\n", errors.New("stdio: writing to the agent: broken pipe")}} {
		d := newFDDaemon(t, func(int) bool { return true })
		stdin, _, done := startPipeRelay(t, d.dial)
		f := <-d.fds
		if _, err := io.WriteString(stdin, `{"jsonrpc":"2.0","id":1,"method":"ping"}`+"\n"); err != nil {
			t.Fatal(err)
		}
		line, _, err := f.p.j.readLine(f.p.read)
		if err != nil || !strings.Contains(string(line), `"ping"`) {
			t.Fatalf("the daemon read %q, %v", line, err)
		}
		if _, err := io.WriteString(f.c, "#a log record\n"+tc.say); err != nil {
			t.Fatal(err)
		}
		f.die()
		select {
		case err := <-done:
			if (err == nil) != (tc.want == nil) || (err != nil && err.Error() != tc.want.Error()) {
				t.Errorf("after %q, Relay returned %v, want %v", tc.say, err, tc.want)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("after %q, Relay did not return", tc.say)
		}
	}
}

// TestRelayHangsUpWhenStopped: a relay stopped (its context ends, as on
// SIGTERM) while the daemon holds the agent's pipes hangs up, so that the
// daemon ends the session, and returns once the daemon says it has.
func TestRelayHangsUpWhenStopped(t *testing.T) {
	d := newFDDaemon(t, func(int) bool { return true })
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inW.Close(); outR.Close(); inR.Close(); outW.Close() })
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Relay(ctx, inR, outW, RelayOptions{Dial: d.dial, Config: "cfg", PassFDs: true, MaxMessageBytes: 4096})
	}()
	f := <-d.fds
	stop()
	// The daemon sees the hangup, ends the session and says so.
	var b [16]byte
	if _, err := f.c.Read(b[:]); err != io.EOF {
		t.Fatalf("the daemon's connection after the relay was stopped: %v, want EOF", err)
	}
	if _, err := io.WriteString(f.c, attachEnded+"\n"); err != nil {
		t.Fatal(err)
	}
	f.die()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Relay returned %v, want context.Canceled", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Relay did not return after the daemon ended the session")
	}
}
