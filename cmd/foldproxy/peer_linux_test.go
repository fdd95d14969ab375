package main

import (
	"net"
	"os"
	"testing"
)

// loopbackPair returns the two ends of a loopback TCP connection on
// network ("tcp4" or "tcp6"): the one a listener accepted and the dialer's.
func loopbackPair(t testing.TB, network, addr string) (accepted, dialed net.Conn) {
	t.Helper()
	ln, err := net.Listen(network, addr)
	if err != nil {
		t.Skipf("no %s loopback here: %v", network, err)
	}
	defer ln.Close()
	dialed, err = net.Dial(network, ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	accepted, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { accepted.Close(); dialed.Close() })
	return accepted, dialed
}

// TestTCPPeerUID: both ways of finding a loopback peer's user find this
// process's own, over IPv4 and IPv6, and a peer that is gone is an error.
func TestTCPPeerUID(t *testing.T) {
	for _, c := range []struct{ network, addr string }{{"tcp4", "127.0.0.1:0"}, {"tcp6", "[::1]:0"}} {
		acc, _ := loopbackPair(t, c.network, c.addr)
		local, remote := acc.LocalAddr().(*net.TCPAddr), acc.RemoteAddr().(*net.TCPAddr)
		if uid, err := sockDiagUID(remote, local); err != nil || uid != os.Getuid() {
			t.Errorf("%s: sock_diag: uid %d, %v; want %d", c.network, uid, err, os.Getuid())
		}
		if uid, err := procNetUID(remote, local); err != nil || uid != os.Getuid() {
			t.Errorf("%s: /proc/net: uid %d, %v; want %d", c.network, uid, err, os.Getuid())
		}
		if uid, err := tcpPeerUID(acc); err != nil || uid != os.Getuid() {
			t.Errorf("%s: tcpPeerUID: uid %d, %v", c.network, uid, err)
		}
	}
	// A socket that is not there: the peer's address with another port.
	acc, _ := loopbackPair(t, "tcp4", "127.0.0.1:0")
	local, remote := acc.LocalAddr().(*net.TCPAddr), acc.RemoteAddr().(*net.TCPAddr)
	gone := &net.TCPAddr{IP: remote.IP, Port: local.Port}
	if _, err := sockDiagUID(gone, gone); err == nil {
		t.Error("sock_diag found a socket that is not there")
	}
	if _, err := procNetUID(gone, gone); err == nil {
		t.Error("/proc/net found a socket that is not there")
	}
}

// BenchmarkTCPPeerUID is the cost of finding a loopback peer's user, paid
// once per connection (localUsers).
func BenchmarkTCPPeerUID(b *testing.B) {
	acc, _ := loopbackPair(b, "tcp4", "127.0.0.1:0")
	local, remote := acc.LocalAddr().(*net.TCPAddr), acc.RemoteAddr().(*net.TCPAddr)
	b.Run("sockdiag", func(b *testing.B) {
		for b.Loop() {
			if _, err := sockDiagUID(remote, local); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("procnet", func(b *testing.B) {
		for b.Loop() {
			if _, err := procNetUID(remote, local); err != nil {
				b.Fatal(err)
			}
		}
	})
}
