//go:build unix

package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// attachReader returns what the daemon reads an attached relay's messages
// from: the connection read by blocking system calls, as stdio is read in
// standalone mode, rather than through the runtime's poller, whose wake-ups
// (an epoll wait, threads woken to look for work) cost a tiny call more than
// the read. It waits in poll(2), so that the socket stays non-blocking for
// the writes and their deadlines. br holds what was read with the hello; it
// is returned as it is for anything but a unix socket. stop ends a read in
// progress (the socket is shut down) and must be called once the session
// is over, before the connection is closed.
func attachReader(c net.Conn, br *bufio.Reader) (r io.Reader, stop func()) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return br, func() {}
	}
	rc, err := uc.SyscallConn()
	if err != nil {
		return br, func() {}
	}
	pr := &pollReader{rc: rc}
	r = pr
	if n := br.Buffered(); n > 0 {
		pre, _ := br.Peek(n)
		r = io.MultiReader(bytes.NewReader(bytes.Clone(pre)), pr)
	}
	return r, func() {
		_ = rc.Control(func(fd uintptr) { _ = syscall.Shutdown(int(fd), syscall.SHUT_RDWR) })
	}
}

// pollReader reads a non-blocking socket by blocking system calls: poll(2)
// until it is readable, then read(2).
type pollReader struct {
	rc      syscall.RawConn
	drained bool // the last read took all there was: wait before the next
}

func (r *pollReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for {
		if r.drained {
			var perr error
			if err := r.rc.Control(func(fd uintptr) {
				_, perr = unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, -1)
			}); err != nil {
				return 0, err
			}
			if perr != nil && !errors.Is(perr, syscall.EINTR) {
				return 0, perr
			}
		}
		var n int
		var rerr error
		if err := r.rc.Control(func(fd uintptr) { n, rerr = syscall.Read(int(fd), p) }); err != nil {
			return 0, err
		}
		switch {
		case errors.Is(rerr, syscall.EAGAIN), errors.Is(rerr, syscall.EINTR):
			r.drained = true
			continue
		case rerr != nil:
			return 0, rerr
		case n == 0:
			return 0, io.EOF
		}
		r.drained = n < len(p)
		return n, nil
	}
}
