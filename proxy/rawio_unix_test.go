//go:build unix

package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/foldproxy/foldproxy/policy/rawio"
)

// unixPair returns the two ends of a connected unix socket.
func unixPair(t *testing.T) (server, client net.Conn) {
	t.Helper()
	ln, err := net.Listen("unix", filepath.Join(t.TempDir(), "s"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	client, err = net.Dial("unix", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server = <-accepted
	if server == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { server.Close(); client.Close() })
	return server, client
}

// TestRawConnIOReadsWhatCameAndWhatComes checks how the daemon reads an
// attached relay: one buffered reader over the socket's raw reader, the
// hello first, then line by line as they come, then EOF when the relay
// closes; the daemon still writes after the relay's EOF (its last words).
func TestRawConnIOReadsWhatCameAndWhatComes(t *testing.T) {
	server, client := unixPair(t)
	rw := rawConnIO(server)
	if _, ok := rw.(*rawio.IO); !ok {
		t.Fatalf("rawConnIO of a unix socket is a %T, want *rawio.IO", rw)
	}
	if _, err := client.Write([]byte("hello\nfirst\n")); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewReaderSize(rw, 16)
	want := func(s string) {
		t.Helper()
		if l, err := lines.ReadString('\n'); err != nil || l != s {
			t.Fatalf("read %q, %v; want %q", l, err, s)
		}
	}
	want("hello\n")
	want("first\n")
	for _, s := range []string{"second\n", "a longer third line than the buffer\n"} {
		if _, err := client.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
		want(s)
	}
	client.(*net.UnixConn).CloseWrite()
	if l, err := lines.ReadString('\n'); !errors.Is(err, io.EOF) || l != "" {
		t.Fatalf("after the relay closed: %q, %v; want EOF", l, err)
	}
	if _, err := rw.Write([]byte("bye\n")); err != nil {
		t.Fatalf("writing after the relay's EOF: %v", err)
	}
	if l, err := bufio.NewReader(client).ReadString('\n'); err != nil || l != "bye\n" {
		t.Fatalf("the relay read %q, %v; want bye", l, err)
	}
}

// TestRawIOCloseAndDeadlineEndAWaitingRead: a read waiting for a peer that
// sends nothing ends at the connection's deadline, and when it is closed;
// the peer then sees the end.
func TestRawIOCloseAndDeadlineEndAWaitingRead(t *testing.T) {
	server, client := unixPair(t)
	rw := rawConnIO(server)
	if err := server.SetReadDeadline(time.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := rw.Read(make([]byte, 64)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a read past the deadline returned %v; want the deadline's error", err)
	}
	if err := server.SetReadDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := rw.Read(make([]byte, 64))
		done <- err
	}()
	if err := server.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("the waiting read returned %v; want net.ErrClosed", err)
	}
	if n, err := client.Read(make([]byte, 8)); n != 0 || !errors.Is(err, io.EOF) {
		t.Fatalf("the peer read %d, %v; want EOF", n, err)
	}
}

// TestRawIOWritesAllOfALargeMessage: a message larger than the socket's
// buffer is written whole, waiting in the poller while the peer reads.
func TestRawIOWritesAllOfALargeMessage(t *testing.T) {
	server, client := unixPair(t)
	rw := rawConnIO(server)
	msg := bytes.Repeat([]byte("0123456789abcdef"), 1<<18) // 4 MiB
	got := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(client)
		got <- b
	}()
	n, err := rw.Write(msg)
	if err != nil || n != len(msg) {
		t.Fatalf("Write: %d, %v; want %d", n, err, len(msg))
	}
	server.(*net.UnixConn).CloseWrite()
	if b := <-got; !bytes.Equal(b, msg) {
		t.Fatalf("the peer read %d bytes, want the %d written", len(b), len(msg))
	}
}

// nonblocking reports whether f's open file is in non-blocking mode.
func nonblocking(t *testing.T, f *os.File) bool {
	t.Helper()
	sc, err := f.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var fl int
	var ferr error
	if err := sc.Control(func(fd uintptr) {
		r, _, e := syscall.Syscall(syscall.SYS_FCNTL, fd, syscall.F_GETFL, 0)
		fl = int(r)
		if e != 0 {
			ferr = e
		}
	}); err != nil || ferr != nil {
		t.Fatal(err, ferr)
	}
	return fl&syscall.O_NONBLOCK != 0
}

// relayPipes makes a relay's stdin (inR, written at inW) and stdout (outW,
// read at outR) as real pipes, closed when the test ends.
func relayPipes(t *testing.T) (inR, inW, outR, outW *os.File) {
	t.Helper()
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err = os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inR.Close(); inW.Close(); outR.Close(); outW.Close() })
	// os.Pipe makes its ends non-blocking; an agent hands a process
	// blocking ones.
	setBlocking(t, inR)
	setBlocking(t, outW)
	return inR, inW, outR, outW
}

// setBlocking puts f's open file in blocking mode.
func setBlocking(t *testing.T, f *os.File) {
	t.Helper()
	sc, err := f.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var serr error
	if err := sc.Control(func(fd uintptr) { serr = syscall.SetNonblock(int(fd), false) }); err != nil || serr != nil {
		t.Fatal(err, serr)
	}
}

// TestPollableStdioKeepsNonblockingPipes: a pipe that was non-blocking
// already (as os.Pipe makes them) is left non-blocking by restore.
func TestPollableStdioKeepsNonblockingPipes(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	in, out, restore := pollableStdio(r, w)
	if _, ok := in.(*rawio.IO); !ok {
		t.Fatalf("pollableStdio's reader of a pipe is a %T, want *rawio.IO", in)
	}
	if _, err := out.Write([]byte("x\n")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 2)
	if n, err := in.Read(buf); err != nil || string(buf[:n]) != "x\n" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
	restore()
	if !nonblocking(t, r) || !nonblocking(t, w) {
		t.Errorf("restore made pipes that were non-blocking blocking")
	}
}

// TestPollableStdioLeavesOtherFilesAlone: a regular file, or a reader that
// is not a file, is used as it is.
func TestPollableStdioLeavesOtherFilesAlone(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var buf bytes.Buffer
	in, out, restore := pollableStdio(f, &buf)
	defer restore()
	if in != io.Reader(f) || out != io.Writer(&buf) {
		t.Fatalf("pollableStdio(file, buffer) = %T, %T; want them as they were", in, out)
	}
	if nonblocking(t, f) {
		t.Errorf("a regular file was made non-blocking")
	}
}

// TestServeStdioOnPipes: ServeStdio (--standalone) reads and writes real,
// blocking pipes through the poller while it serves, and leaves them
// blocking and open when the agent closes its stdin, and when its context
// ends while it waits for the agent.
func TestServeStdioOnPipes(t *testing.T) {
	for _, stop := range []string{"eof", "cancel"} {
		t.Run(stop, func(t *testing.T) {
			inR, inW, outR, outW := relayPipes(t)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- ServeStdio(ctx, newFrontFake(), inR, outW, StdioOptions{}) }()
			agentOut := bufio.NewReader(outR)
			for i := range 3 {
				req := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"echo","params":{"p":"%s"}}`, i, strings.Repeat("x", i*100_000))
				if _, err := io.WriteString(inW, req+"\n"); err != nil {
					t.Fatal(err)
				}
				got, err := agentOut.ReadString('\n')
				if err != nil || !strings.Contains(got, fmt.Sprintf(`"id":%d`, i)) || len(got) < i*100_000 {
					t.Fatalf("answer %d: %.100q, %v", i, got, err)
				}
			}
			if !nonblocking(t, inR) || !nonblocking(t, outW) {
				t.Errorf("while ServeStdio runs, its pipes are not read and written through the poller")
			}
			if stop == "eof" {
				inW.Close()
				if err := <-done; err != nil {
					t.Fatalf("ServeStdio: %v", err)
				}
			} else {
				cancel()
				if err := <-done; !errors.Is(err, context.Canceled) {
					t.Fatalf("ServeStdio: %v; want context.Canceled", err)
				}
			}
			if nonblocking(t, inR) || nonblocking(t, outW) {
				t.Errorf("ServeStdio left its stdin or stdout non-blocking")
			}
			if _, err := io.WriteString(outW, "after\n"); err != nil {
				t.Fatalf("stdout after ServeStdio: %v", err)
			}
			if got, err := agentOut.ReadString('\n'); err != nil || got != "after\n" {
				t.Fatalf("read %q, %v after ServeStdio", got, err)
			}
			if stop == "cancel" {
				// No read of stdin was left behind: what is written next
				// is read here, whole.
				if _, err := io.WriteString(inW, "next\n"); err != nil {
					t.Fatal(err)
				}
				if got, err := bufio.NewReader(inR).ReadString('\n'); err != nil || got != "next\n" {
					t.Fatalf("stdin after ServeStdio: %q, %v", got, err)
				}
			}
		})
	}
}
