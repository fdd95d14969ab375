//go:build unix

// Package rawio reads and writes non-blocking descriptors (pipes and
// sockets) through the Go runtime's poller by read(2) and write(2) made as
// raw system calls, which are not announced to the scheduler.
//
// Why: a system call made the ordinary way (os.File, net.Conn) enters and
// leaves the scheduler's "in a system call" state, and whenever the
// runtime's monitor thread (sysmon) is asleep because every P was idle,
// entering that state wakes it; it then polls every 20 µs for the next
// millisecond, and each poll is a context switch. A proxy that serves one
// small message every few hundred microseconds thus keeps the monitor
// awake all the time: CPU profiles of foldproxy serving tiny calls showed
// the scheduler's work around these system calls, and the context switches
// it costs, above the system calls themselves. A raw read or write on a
// non-blocking descriptor never blocks (EAGAIN instead), so nothing is
// lost by not announcing it: waiting is done in the poller, with the P
// idle.
//
// It lives under policy/ because policy is at the bottom of the dependency
// table: fold, intercept, upstreams, proxy and cmd all import it, and it
// imports nothing of foldproxy's. Only import paths changed when it moved
// here from proxy/rawio.
package rawio

import (
	"errors"
	"io"
	"os"
	"syscall"
)

// IO reads and writes a non-blocking descriptor through the runtime's
// poller (rc), with raw system calls. Deadlines set on the descriptor's
// net.Conn or os.File apply, and closing it ends a wait.
type IO struct {
	rc syscall.RawConn
}

func (r *IO) Read(p []byte) (int, error) { return r.ReadFunc(p, nil) }

// ReadFunc is Read, calling got (when not nil) with the number of bytes
// read as soon as read(2) returns them, before the descriptor is let go:
// closing the descriptor's file waits for it, so that once Close has
// returned nothing read is left unrecorded (the attached daemon's journal
// records what it took from the agent's stdin this way).
func (r *IO) ReadFunc(p []byte, got func(n int)) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	var n int
	var rerr error
	err := r.rc.Read(func(fd uintptr) bool {
		for {
			n, rerr = read(int(fd), p)
			if !errors.Is(rerr, syscall.EINTR) {
				if n > 0 && got != nil {
					got(n)
				}
				return !errors.Is(rerr, syscall.EAGAIN)
			}
		}
	})
	switch {
	case err != nil:
		return 0, err
	case rerr != nil:
		return 0, rerr
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

func (r *IO) Write(p []byte) (int, error) { return r.WriteFunc(p, nil) }

// WriteFunc is Write, calling wrote (when not nil) with the number of
// bytes each write(2) took, as soon as it returns.
func (r *IO) WriteFunc(p []byte, wrote func(n int)) (int, error) {
	written := 0
	var werr error
	err := r.rc.Write(func(fd uintptr) bool {
		for written < len(p) {
			n, e := write(int(fd), p[written:])
			switch {
			case errors.Is(e, syscall.EINTR):
				continue
			case errors.Is(e, syscall.EAGAIN):
				return false
			case e != nil:
				werr = e
				return true
			}
			written += n
			if wrote != nil && n > 0 {
				wrote(n)
			}
		}
		return true
	})
	if err == nil {
		err = werr
	}
	if err == nil && written < len(p) {
		err = io.ErrShortWrite
	}
	return written, err
}

// WriteFile writes p to f, a regular file, as f.Write does, but by
// write(2) made as raw system calls (on Linux; see write). It is for the
// small appends on the reply path, the store's write-ahead log and the
// audit log, which must reach the operating system before a reply is
// released but do not wait for the disk: an ordinary write(2) there costs
// less than the runtime's work around it, since the daemon is idle
// between two requests and entering an announced system call then wakes
// the monitor thread (see the package comment). The price: a write that
// blocks in the kernel (dirty-page throttling, a slow file system) holds
// its P meanwhile, as any code running that long would.
func WriteFile(f *os.File, p []byte) (int, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return 0, err
	}
	written := 0
	var werr error
	if err := rc.Write(func(fd uintptr) bool {
		for written < len(p) && werr == nil {
			n, e := write(int(fd), p[written:])
			switch {
			case errors.Is(e, syscall.EINTR):
			case e != nil:
				werr = &os.PathError{Op: "write", Path: f.Name(), Err: e}
			case n == 0:
				werr = io.ErrShortWrite
			default:
				written += n
			}
		}
		return true
	}); err != nil {
		return written, err
	}
	return written, werr
}

// New returns the IO of a non-blocking descriptor registered with the
// poller: a net.Conn's or an os.File's SyscallConn.
func New(rc syscall.RawConn) *IO { return &IO{rc: rc} }

// File returns f's reader and writer by raw system calls when f is a
// pipe or a socket that is already non-blocking and registered with the
// poller, as os.Pipe and exec.Cmd's StdinPipe and StdoutPipe make them;
// anything else (a blocking descriptor, a regular file) is returned as it
// is, since a raw call on it could block its thread unseen.
func File(f *os.File) io.ReadWriter {
	sc, err := f.SyscallConn()
	if err != nil {
		return f
	}
	ok := false
	if err := sc.Control(func(d uintptr) {
		var st syscall.Stat_t
		if syscall.Fstat(int(d), &st) != nil {
			return
		}
		if t := st.Mode & syscall.S_IFMT; t != syscall.S_IFIFO && t != syscall.S_IFSOCK {
			return
		}
		nb, err := nonblocking(int(d))
		ok = err == nil && nb
	}); err != nil || !ok {
		return f
	}
	return &IO{rc: sc}
}

// Nonblocking reports whether fd's open file is in non-blocking mode.
func Nonblocking(fd int) (bool, error) { return nonblocking(fd) }
