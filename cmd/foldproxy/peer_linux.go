package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
)

// checkPeer refuses a connection to the daemon's socket from a process of
// another user. The socket's mode (0600) already keeps them out; this is
// the second lock on the door.
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
		return fmt.Errorf("peer pid %d runs as uid %d, not %d", cred.Pid, cred.Uid, os.Getuid())
	}
	return nil
}
