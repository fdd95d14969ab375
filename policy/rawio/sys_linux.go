package rawio

import (
	"syscall"
	"unsafe"
)

// read and write are read(2) and write(2) as raw system calls: not
// announced to the scheduler, which is right for a descriptor that is
// non-blocking and so never blocks (see IO).
func read(fd int, p []byte) (int, error) {
	n, _, e := syscall.RawSyscall(syscall.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(len(p)))
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

func write(fd int, p []byte) (int, error) {
	n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(len(p)))
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// DupCloexec duplicates fd, close-on-exec.
func DupCloexec(fd int) (int, error) {
	n, _, e := syscall.RawSyscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_DUPFD_CLOEXEC, 0)
	if e != 0 {
		return -1, e
	}
	return int(n), nil
}

func nonblocking(fd int) (bool, error) {
	fl, _, e := syscall.RawSyscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_GETFL, 0)
	if e != 0 {
		return false, e
	}
	return fl&syscall.O_NONBLOCK != 0, nil
}
