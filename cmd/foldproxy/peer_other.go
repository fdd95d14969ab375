//go:build !linux && !darwin && !freebsd

package main

import (
	"errors"
	"net"
)

// checkPeer relies on the socket's mode (0600) where the peer's
// credentials cannot be read the Linux way.
func checkPeer(net.Conn) error { return nil }

// tcpPeerSupported: this system cannot tell which user owns the other end
// of a loopback TCP connection: its loopback listeners take a token
// instead (localAccessOf).
const tcpPeerSupported = false

func tcpPeerUID(net.Conn) (int, error) {
	return 0, errors.New("the user of a TCP peer is not known on this system")
}
