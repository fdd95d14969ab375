//go:build !linux && !darwin && !freebsd

package main

import "net"

// checkPeer relies on the socket's mode (0600) where the peer's
// credentials cannot be read the Linux way.
func checkPeer(net.Conn) error { return nil }
