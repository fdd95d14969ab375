//go:build unix && !linux

package rawio

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// On unix systems other than Linux, system calls go through libc and are
// made the ordinary way.
func read(fd int, p []byte) (int, error)  { return syscall.Read(fd, p) }
func write(fd int, p []byte) (int, error) { return syscall.Write(fd, p) }

// DupCloexec duplicates fd, close-on-exec.
func DupCloexec(fd int) (int, error) {
	syscall.ForkLock.RLock()
	defer syscall.ForkLock.RUnlock()
	n, err := syscall.Dup(fd)
	if err != nil {
		return -1, err
	}
	syscall.CloseOnExec(n)
	return n, nil
}

func nonblocking(fd int) (bool, error) {
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil {
		return false, err
	}
	return fl&unix.O_NONBLOCK != 0, nil
}
