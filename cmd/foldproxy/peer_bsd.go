//go:build darwin || freebsd

package main

import (
	"errors"
	"fmt"
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// checkPeer refuses a unix socket connection whose peer runs as another
// user (LOCAL_PEERCRED). The daemon's socket mode (0600) already keeps
// other users from connecting; a relay relies on this check alone to know
// that the socket it found is its own user's daemon's.
func checkPeer(c net.Conn) error {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return errors.New("not a unix socket connection")
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return err
	}
	var cred *unix.Xucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptXucred(int(fd), unix.SOL_LOCAL, unix.LOCAL_PEERCRED)
	}); err != nil {
		return err
	}
	if cerr != nil {
		return cerr
	}
	if int(cred.Uid) != os.Getuid() {
		return fmt.Errorf("the peer runs as uid %d, not %d", cred.Uid, os.Getuid())
	}
	return nil
}

// tcpPeerSupported: this system cannot tell which user owns the other end
// of a loopback TCP connection: its loopback listeners take a token
// instead (localAccessOf).
const tcpPeerSupported = false

func tcpPeerUID(net.Conn) (int, error) {
	return 0, errors.New("the user of a TCP peer is not known on this system")
}
