package fold

import (
	"io"
	"os"
	"syscall"
	"unsafe"
)

// WriteRaw writes p to f, a regular file, as f.Write does, but by write(2)
// made as raw system calls, not announced to the Go scheduler. It is for
// the small appends on the reply path (the store's write-ahead log, the
// audit log), which must reach the operating system before a reply is
// released but do not wait for the disk: an ordinary write(2) costs less
// than the runtime's work around it. Entering an announced system call
// wakes the runtime's monitor thread (sysmon) whenever the process was
// idle, as a daemon between two requests is, and the monitor then polls
// every 20 µs and may hand the P to another thread; in CPU profiles of
// the daemon serving branch_create and branch_return, that wake-up was
// most of the write-ahead log's append. The price: a write that blocks
// in the kernel (dirty-page throttling, a slow file system) holds its P
// meanwhile, as any code running that long would.
func WriteRaw(f *os.File, p []byte) (int, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return 0, err
	}
	written := 0
	var werr error
	if err := rc.Write(func(fd uintptr) bool {
		for written < len(p) && werr == nil {
			n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(unsafe.SliceData(p[written:]))), uintptr(len(p)-written))
			switch {
			case e == syscall.EINTR:
			case e != 0:
				werr = &os.PathError{Op: "write", Path: f.Name(), Err: e}
			case n == 0:
				werr = io.ErrShortWrite
			default:
				written += int(n)
			}
		}
		return true
	}); err != nil {
		return written, err
	}
	return written, werr
}
