package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
)

// checkPeer refuses a unix socket connection whose peer runs as another
// user (SO_PEERCRED). On the daemon's side the socket's mode (0600)
// already keeps other users out and this is the second lock on the door;
// a relay relies on it alone to know that the socket it found is its own
// user's daemon's.
func checkPeer(c net.Conn) error {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return errors.New("not a unix socket connection")
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return err
	}
	var cred *syscall.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return err
	}
	if cerr != nil {
		return cerr
	}
	if int(cred.Uid) != os.Getuid() {
		return fmt.Errorf("the peer (pid %d) runs as uid %d, not %d", cred.Pid, cred.Uid, os.Getuid())
	}
	return nil
}
