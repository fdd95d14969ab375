//go:build unix

package proxy

import (
	"bufio"
	"errors"
	"io"
	"net"
	"path/filepath"
	"testing"
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

// TestAttachReaderReadsWhatCameAndWhatComes checks the daemon's reader of
// an attached relay: the bytes read with the hello first, then the socket's,
// line by line as they come, then EOF when the relay closes.
func TestAttachReaderReadsWhatCameAndWhatComes(t *testing.T) {
	server, client := unixPair(t)
	if _, err := client.Write([]byte("hello\nfirst\n")); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReaderSize(server, 16)
	if l, err := br.ReadString('\n'); err != nil || l != "hello\n" {
		t.Fatalf("hello: %q, %v", l, err)
	}
	r, stop := attachReader(server, br)
	defer stop()
	lines := bufio.NewReader(r)
	want := func(s string) {
		t.Helper()
		if l, err := lines.ReadString('\n'); err != nil || l != s {
			t.Fatalf("read %q, %v; want %q", l, err, s)
		}
	}
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
	// The daemon still writes to the relay after the relay's EOF (its last words).
	if _, err := server.Write([]byte("bye\n")); err != nil {
		t.Fatalf("writing after the relay's EOF: %v", err)
	}
}

// TestAttachReaderStopEndsAWaitingRead checks that stop ends a read waiting
// for a relay that sends nothing, and that the relay then sees the end.
func TestAttachReaderStopEndsAWaitingRead(t *testing.T) {
	server, client := unixPair(t)
	r, stop := attachReader(server, bufio.NewReader(server))
	done := make(chan error, 1)
	go func() {
		_, err := r.Read(make([]byte, 64))
		done <- err
	}()
	stop()
	if err := <-done; !errors.Is(err, io.EOF) {
		t.Fatalf("the waiting read returned %v; want EOF", err)
	}
	if err := server.Close(); err != nil {
		t.Fatalf("closing after stop: %v", err)
	}
	if n, err := client.Read(make([]byte, 8)); n != 0 || !errors.Is(err, io.EOF) {
		t.Fatalf("the relay read %d, %v; want EOF", n, err)
	}
}
