//go:build unix

package proxy

import (
	"errors"
	"io"
	"net"
	"os"
	"syscall"

	"github.com/foldproxy/foldproxy/policy/rawio"
)

// The default mode's second hop (relay <-> daemon over the attach socket)
// cost a tiny call more in the Go runtime's work around each blocking
// system call than in the system calls themselves (CPU profiles of both
// processes): a read blocked in the kernel holds its P "in a system call",
// so the runtime's monitor thread (sysmon) stays awake, polling every
// 20 µs, takes the P back and wakes a thread to look for work that is not
// there, and each return from a system call wakes the monitor again. Both
// ends of the hop therefore read and write through the runtime's poller,
// by read(2) and write(2) made as raw system calls on non-blocking
// descriptors, which never block: the relay waits in one epoll_wait with
// its P idle and the monitor asleep, and a message costs the wake-up, its
// read and its write. The relay's stdin and stdout get the same treatment
// when they are pipes or sockets (pollableStdio), and so do the stdin and
// stdout that ServeStdio serves a session on (--standalone).

// rawConnIO returns c's reader and writer by raw system calls through the
// poller when c is a unix socket, else c itself.
func rawConnIO(c net.Conn) io.ReadWriter {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return c
	}
	rc, err := uc.SyscallConn()
	if err != nil {
		return c
	}
	return rawio.New(rc)
}

// pollableStdio returns what a relay reads the agent's messages from and
// writes its answers to: for stdin and stdout that are pipes or sockets
// (as an agent starts an MCP server), the descriptors set non-blocking and
// read and written by raw system calls through the poller; anything else
// (a terminal, a file, a test's reader) as it is. restore puts the
// descriptors back in the mode they had; call it once the relay (or the
// stdio session) is done.
func pollableStdio(stdin io.Reader, stdout io.Writer) (io.Reader, io.Writer, func()) {
	p := pollablePipes(stdin, stdout)
	return p.in, p.out, p.restore
}

// stdioPipes are pollableStdio's reader and writer, with the duplicates
// of stdin's and stdout's descriptors behind them (nil where they are not
// pipes or sockets), which a relay passes to the daemon.
// drop closes the duplicates only, leaving the descriptors' mode as it
// is: a relay that passed the pipes to the daemon drops its duplicates, so
// that its poller is not woken by every message the daemon reads and
// writes, and makes new ones if it takes the pipes back.
type stdioPipes struct {
	in              io.Reader
	out             io.Writer
	inFile, outFile *os.File
	restore, drop   func()
}

// pollablePipes is pollableStdio, with the files.
func pollablePipes(stdin io.Reader, stdout io.Writer) stdioPipes {
	var restores []func()
	var dups []*os.File
	p := stdioPipes{in: stdin, out: stdout}
	if f, ok := stdin.(*os.File); ok {
		if rw, dup, restore := pollableFile(f); rw != nil {
			p.in, p.inFile = rw, dup
			restores = append(restores, restore)
			dups = append(dups, dup)
		}
	}
	if f, ok := stdout.(*os.File); ok {
		if rw, dup, restore := pollableFile(f); rw != nil {
			p.out, p.outFile = rw, dup
			restores = append(restores, restore)
			dups = append(dups, dup)
		}
	}
	p.restore = func() {
		for _, r := range restores {
			r()
		}
	}
	p.drop = func() {
		for _, d := range dups {
			d.Close() // a second close is harmless
		}
	}
	return p
}

// pollableFile returns a duplicate of f's descriptor, non-blocking and
// registered with the poller, when it is a pipe or a socket; nil otherwise.
// Non-blocking mode belongs to the open file that both descriptors share:
// restore closes the duplicate (ending a read still waiting on it) and
// puts the open file back in the mode it had (blocking, as a process is
// usually given its stdin and stdout; non-blocking when it already was,
// as os.Pipe makes them); f and its descriptor are left as they were.
func pollableFile(f *os.File) (*rawio.IO, *os.File, func()) {
	sc, err := f.SyscallConn()
	if err != nil {
		return nil, nil, nil
	}
	dup := -1
	wasNonblock := false
	var derr error
	if err := sc.Control(func(d uintptr) {
		var st syscall.Stat_t
		if derr = syscall.Fstat(int(d), &st); derr != nil {
			return
		}
		if t := st.Mode & syscall.S_IFMT; t != syscall.S_IFIFO && t != syscall.S_IFSOCK {
			derr = errors.New("neither a pipe nor a socket")
			return
		}
		if wasNonblock, derr = rawio.Nonblocking(int(d)); derr != nil {
			return
		}
		dup, derr = rawio.DupCloexec(int(d))
	}); err != nil || derr != nil || dup < 0 {
		return nil, nil, nil
	}
	if err := syscall.SetNonblock(dup, true); err != nil {
		syscall.Close(dup)
		return nil, nil, nil
	}
	// Made non-blocking, the new file is registered with the poller.
	pf := os.NewFile(uintptr(dup), f.Name())
	rc, err := pf.SyscallConn()
	if err != nil {
		_ = syscall.SetNonblock(dup, wasNonblock)
		pf.Close()
		return nil, nil, nil
	}
	return rawio.New(rc), pf, func() {
		// Closed first: a read or write on the duplicate then ends (it
		// never blocks, the open file being non-blocking until below),
		// and Close returns once none is left.
		pf.Close()
		if !wasNonblock {
			_ = sc.Control(func(d uintptr) { _ = syscall.SetNonblock(int(d), false) })
		}
	}
}
