package store

import (
	"errors"
	"io"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// writeAtv writes bufs one after the other at off in f, with as few
// pwritev(2) calls as the kernel allows (1,024 buffers a call), copying
// nothing.
func writeAtv(f *os.File, bufs [][]byte, off int64) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	for len(bufs) > 0 {
		chunk := bufs[:min(len(bufs), 1024)]
		var n int
		var werr error
		if err := rc.Write(func(fd uintptr) bool {
			for {
				n, werr = unix.Pwritev(int(fd), chunk, off)
				if !errors.Is(werr, syscall.EINTR) {
					return true
				}
			}
		}); err != nil {
			return err
		}
		if werr != nil {
			return werr
		}
		if n == 0 {
			return io.ErrShortWrite
		}
		off += int64(n)
		// Drop what was written, and the written part of a buffer cut.
		for n > 0 && len(bufs) > 0 {
			if n < len(bufs[0]) {
				bufs[0] = bufs[0][n:]
				break
			}
			n -= len(bufs[0])
			bufs = bufs[1:]
		}
	}
	return nil
}
