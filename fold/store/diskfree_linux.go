//go:build linux && (amd64 || arm64)

package store

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// freeBytes reports the bytes an unprivileged writer may still use on the
// file system holding dir. The statfs(2) is a raw system call, for the
// reason rawio.WriteFile gives: it runs on the reply path of a write every
// freeRecheckAfter, and announced to the scheduler it woke the runtime's
// monitor thread each time, which cost more than the call.
func freeBytes(dir string) (int64, bool) {
	p, err := syscall.BytePtrFromString(dir)
	if err != nil {
		return 0, false
	}
	var st unix.Statfs_t
	for {
		_, _, e := syscall.RawSyscall(syscall.SYS_STATFS, uintptr(unsafe.Pointer(p)), uintptr(unsafe.Pointer(&st)), 0)
		if e == syscall.EINTR {
			continue
		}
		if e != 0 {
			return 0, false
		}
		return int64(st.Bavail) * int64(st.Bsize), true
	}
}
