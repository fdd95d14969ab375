//go:build linux

package attach

import (
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"syscall"
	"time"

	"github.com/foldproxy/foldproxy/policy/rawio"
	"golang.org/x/sys/unix"
)

// fdPassing says that this build passes an attached agent's stdin and
// stdout to the daemon (SCM_RIGHTS), with the session's journal (a memfd):
// the daemon then reads and writes the agent's pipes itself, and the relay
// only waits, to take over if the daemon dies.
const fdPassing = true

// journalFile is a session journal in a memfd, as the relay makes it.
type journalFile struct {
	f    *os.File
	size int64
}

// newJournalFile makes a journal whose input buffer holds lines of up to
// maxLine bytes and starts with initial (discarding: in a line too long).
// It can only grow: the daemon that maps it never faults on a page cut
// off under it.
func newJournalFile(maxLine int64, initial []byte, discarding bool) (*journalFile, error) {
	size, off, rcap := journalSize(maxLine, len(initial))
	fd, err := unix.MemfdCreate("foldproxy-session", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("memfd_create: %w", err)
	}
	f := os.NewFile(uintptr(fd), "foldproxy-session")
	if err := f.Truncate(size); err != nil {
		f.Close()
		return nil, fmt.Errorf("sizing the session journal: %w", err)
	}
	if _, err := unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_SEAL); err != nil {
		f.Close()
		return nil, fmt.Errorf("sealing the session journal: %w", err)
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("mapping the session journal: %w", err)
	}
	journalInit(mem, off, rcap, initial, discarding)
	_ = unix.Munmap(mem)
	return &journalFile{f: f, size: size}, nil
}

// recover reads the journal once the daemon that used it is gone.
func (jf *journalFile) recover(pipeOut bool) (journalRecovery, error) {
	mem, err := unix.Mmap(int(jf.f.Fd()), 0, int(jf.size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return journalRecovery{}, fmt.Errorf("mapping the session journal: %w", err)
	}
	defer unix.Munmap(mem)
	return recoverJournal(mem, pipeOut)
}

func (jf *journalFile) Close() error { return jf.f.Close() }

// mapJournal maps the journal a relay passed (f) and returns the daemon's
// side of it, and what unmaps it.
func mapJournal(f *os.File, maxLine int64) (*journal, func(), error) {
	seals, err := unix.FcntlInt(f.Fd(), unix.F_GET_SEALS, 0)
	if err != nil || seals&unix.F_SEAL_SHRINK == 0 {
		return nil, nil, errors.New("the session journal is not a sealed memfd")
	}
	fi, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	size, off, _ := journalSize(maxLine, 0)
	if fi.Size() < size || fi.Size() > 1<<40 {
		return nil, nil, fmt.Errorf("the session journal has %d bytes, fewer than this daemon's %d", fi.Size(), size)
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, int(fi.Size()), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, nil, fmt.Errorf("mapping the session journal: %w", err)
	}
	// Large ranges of the input buffer are given back to the system
	// rather than cleared: their pages read as zero afterwards, and a
	// request of megabytes does not leave them resident.
	fd := int(f.Fd())
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		_ = unix.Munmap(mem)
		return nil, nil, err
	}
	zero := func(ring []byte, a, b int) {
		const page = 4096
		if b-a < 256<<10 {
			clear(ring[a:b])
			return
		}
		pa, pb := (a+page-1)&^(page-1), b&^(page-1)
		clear(ring[a:pa])
		clear(ring[pb:b])
		if unix.Fallocate(dup, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off+int64(pa), int64(pb-pa)) != nil {
			clear(ring[pa:pb])
		}
	}
	j, err := openJournal(mem, maxLine, zero)
	if err != nil {
		_ = unix.Munmap(mem)
		unix.Close(dup)
		return nil, nil, err
	}
	return j, func() {
		_ = unix.Munmap(mem)
		unix.Close(dup)
	}, nil
}

// sendFDs passes files over c, a unix socket, with one byte.
func sendFDs(c net.Conn, files ...*os.File) error {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return errors.New("not a unix socket")
	}
	fds := make([]int, len(files))
	for i, f := range files {
		fds[i] = int(f.Fd())
	}
	_ = c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	defer c.SetWriteDeadline(time.Time{})
	_, _, err := uc.WriteMsgUnix([]byte{'F'}, syscall.UnixRights(fds...), nil)
	runtime.KeepAlive(files)
	return err
}

// recvFDs receives the n descriptors a relay passes with sendFDs
// (close-on-exec: the upstream processes the daemon starts do not inherit
// them).
func recvFDs(c net.Conn, n int) ([]int, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return nil, errors.New("not a unix socket")
	}
	b := make([]byte, 1)
	oob := make([]byte, syscall.CmsgSpace(4*n))
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	defer c.SetReadDeadline(time.Time{})
	m, oobn, _, _, err := uc.ReadMsgUnix(b, oob)
	if err != nil {
		return nil, err
	}
	msgs, err := syscall.ParseSocketControlMessage(oob[:oobn])
	var fds []int
	for i := range msgs {
		if err == nil {
			var got []int
			if got, err = syscall.ParseUnixRights(&msgs[i]); err == nil {
				fds = append(fds, got...)
			}
		}
	}
	if err == nil && (m != 1 || b[0] != 'F' || len(fds) != n) {
		err = fmt.Errorf("the relay passed %d descriptors with %q, want %d with \"F\"", len(fds), b[:m], n)
	}
	if err != nil {
		for _, fd := range fds {
			syscall.Close(fd)
		}
		return nil, err
	}
	return fds, nil
}

// pollableFD returns fd, a pipe or a socket, as a file registered with the
// runtime's poller (non-blocking).
func pollableFD(fd int, name string) (*os.File, error) {
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		syscall.Close(fd)
		return nil, err
	}
	if t := st.Mode & syscall.S_IFMT; t != syscall.S_IFIFO && t != syscall.S_IFSOCK {
		syscall.Close(fd)
		return nil, fmt.Errorf("%s is neither a pipe nor a socket", name)
	}
	if err := syscall.SetNonblock(fd, true); err != nil {
		syscall.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), name), nil
}

// receiveSession receives what a relay passes after a welcome that takes
// its descriptors: stdin, stdout and the journal, mapped.
func receiveSession(c net.Conn, max int64) (*attachedPipes, error) {
	fds, err := recvFDs(c, 3)
	if err != nil {
		return nil, err
	}
	jf := os.NewFile(uintptr(fds[2]), "journal")
	defer jf.Close() // the mapping stays
	in, err := pollableFD(fds[0], "the agent's stdin")
	if err != nil {
		syscall.Close(fds[1])
		return nil, err
	}
	out, err := pollableFD(fds[1], "the agent's stdout")
	if err != nil {
		in.Close()
		return nil, err
	}
	p := &attachedPipes{in: in, out: out}
	inRC, err1 := in.SyscallConn()
	outRC, err2 := out.SyscallConn()
	if err := errors.Join(err1, err2); err != nil {
		in.Close()
		out.Close()
		return nil, err
	}
	inIO, outIO := rawio.New(inRC), rawio.New(outRC)
	p.read, p.write = inIO.ReadFunc, outIO.WriteFunc
	if p.j, p.unmap, err = mapJournal(jf, max); err != nil {
		in.Close()
		out.Close()
		return nil, err
	}
	return p, nil
}

// isPipe reports whether f is a pipe (where a write of up to 4 KiB is
// atomic).
func isPipe(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeNamedPipe != 0
}
