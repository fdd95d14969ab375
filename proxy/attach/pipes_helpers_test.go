//go:build unix

package attach

import (
	"net"
	"os"
	"path/filepath"
	"syscall"
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
