//go:build unix

package attach

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"

	"github.com/foldproxy/foldproxy/proxy"
)

// TestRelayOnPipes runs Relay on real pipes, as an agent starts it: it
// reads and writes them through the poller, and leaves them as it found
// them (blocking, open) when it returns.
func TestRelayOnPipes(t *testing.T) {
	d := newFakeDaemon(t)
	inR, inW, outR, outW := relayPipes(t)
	done := make(chan error, 1)
	go func() {
		done <- Relay(context.Background(), inR, outW, RelayOptions{Dial: d.dial, Config: "cfg"})
	}()
	c := <-d.conns
	agentOut := bufio.NewReader(outR)
	for i := range 3 {
		req := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"a"}}`, i)
		if _, err := io.WriteString(inW, req+"\n"); err != nil {
			t.Fatal(err)
		}
		if got := c.line(t); got != req {
			t.Fatalf("daemon got %q, want %q", got, req)
		}
		resp := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"result":{"text":"%s"}}`, i, strings.Repeat("x", i*100_000))
		if _, err := io.WriteString(c.c, resp+"\n"); err != nil {
			t.Fatal(err)
		}
		if got, err := agentOut.ReadString('\n'); err != nil || got != resp+"\n" {
			t.Fatalf("agent got %.100q, %v; want %.100q", got, err, resp)
		}
	}
	if !nonblocking(t, inR) || !nonblocking(t, outW) {
		t.Errorf("while the relay runs, its pipes are not read and written through the poller")
	}
	inW.Close()
	if _, err := c.br.ReadByte(); err != io.EOF {
		t.Errorf("the daemon's connection was not closed for writing at the end of stdin: %v", err)
	}
	c.c.Close()
	if err := <-done; err != nil {
		t.Fatalf("Relay: %v", err)
	}
	if nonblocking(t, inR) || nonblocking(t, outW) {
		t.Errorf("the relay left its stdin or stdout non-blocking")
	}
	// Both are still open, and blocking: a write to stdout and a read of
	// what it wrote work as before.
	if _, err := io.WriteString(outW, "after\n"); err != nil {
		t.Fatalf("stdout after the relay: %v", err)
	}
	if got, err := agentOut.ReadString('\n'); err != nil || got != "after\n" {
		t.Fatalf("read %q, %v after the relay", got, err)
	}
}

// TestRelayStoppedWhileReadingStdin: a relay stopped (its context ends)
// while it waits for the agent leaves no read of stdin behind, and the
// pipe blocking: what is written to it next is read here, whole.
func TestRelayStoppedWhileReadingStdin(t *testing.T) {
	d := newFakeDaemon(t)
	inR, inW, _, outW := relayPipes(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- Relay(ctx, inR, outW, RelayOptions{Dial: d.dial, Config: "cfg"})
	}()
	c := <-d.conns
	req := `{"jsonrpc":"2.0","id":1,"method":"ping"}`
	if _, err := io.WriteString(inW, req+"\n"); err != nil {
		t.Fatal(err)
	}
	if got := c.line(t); got != req {
		t.Fatalf("daemon got %q, want %q", got, req)
	}
	cancel()
	// As a daemon does: the session ends when the relay closes for writing.
	if _, err := c.br.ReadByte(); err != io.EOF {
		t.Errorf("the stopped relay did not close its connection for writing: %v", err)
	}
	c.c.Close()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Relay: %v; want context.Canceled", err)
	}
	if nonblocking(t, inR) || nonblocking(t, outW) {
		t.Errorf("the relay left its stdin or stdout non-blocking")
	}
	if _, err := io.WriteString(inW, "after\n"); err != nil {
		t.Fatal(err)
	}
	if got, err := bufio.NewReader(inR).ReadString('\n'); err != nil || got != "after\n" {
		t.Fatalf("stdin after the relay: %q, %v", got, err)
	}
}

// TestAttachLogCutShortKeepsTheNextMessageWhole: a log record copied to a
// relay that does not read is cut short by its deadline; its line is ended
// before the next message, which reaches the relay whole, on a line of its
// own, instead of being glued to the record (and taken for one).
func TestAttachLogCutShortKeepsTheNextMessageWhole(t *testing.T) {
	server, client := unixPair(t)
	a := NewServer(nil, Options{})
	ac := &attachConn{c: server, rw: proxy.RawConnIO(server)}
	a.conns[ac] = true
	// Larger than the socket's buffer: the relay reads nothing yet, so the
	// record's write stops at its deadline with part of it written.
	record := "a log record " + strings.Repeat("x", 1<<20)
	if _, err := a.Write([]byte(record + "\n")); err != nil {
		t.Fatal(err)
	}
	msg := `{"jsonrpc":"2.0","id":1,"result":{}}`
	got := make(chan []string, 1)
	go func() {
		var lines []string
		br := bufio.NewReaderSize(client, 1<<20)
		for {
			l, err := br.ReadString('\n')
			if err != nil {
				got <- lines
				return
			}
			lines = append(lines, l)
		}
	}()
	if _, err := ac.Write([]byte(msg + "\n")); err != nil {
		t.Fatal(err)
	}
	server.(*net.UnixConn).CloseWrite()
	lines := <-got
	if len(lines) != 2 {
		t.Fatalf("the relay read %d lines, want the cut record and the message", len(lines))
	}
	if !strings.HasPrefix(lines[0], "#a log record xx") || len(lines[0]) >= len(record)+2 {
		t.Errorf("first line: %.40q... (%d bytes), want the record cut short", lines[0], len(lines[0]))
	}
	if lines[1] != msg+"\n" {
		t.Errorf("second line %.100q, want the message whole", lines[1])
	}
}
