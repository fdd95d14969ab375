package upstreams

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/foldproxy/foldproxy/policy/rawio"
)

const (
	// stdioGracefulExit is how long a child has to exit once its stdin
	// is closed, and stdioSignalWait how long after each signal.
	stdioGracefulExit = 2 * time.Second
	stdioSignalWait   = 3 * time.Second
	// maxStdioLine bounds one message from a stdio child; a longer line
	// ends the connection.
	maxStdioLine = 256 << 20
)

// stdioWire speaks newline-delimited JSON-RPC with a child process. Each
// line is one message, read once and relayed raw.
type stdioWire struct {
	newCmd  func() *exec.Cmd
	handle  wireHandler
	lost    func(error)
	log     *slog.Logger
	tracked func(func()) bool // runs a goroutine that the upstream's Close waits for

	cmd    *exec.Cmd
	stdin  *os.File
	stdout *os.File
	stderr *os.File
	// in and out are stdin's writer and stdout's reader: raw system calls
	// through the poller (policy/rawio), which spare the scheduler's work
	// around a system call, twice per message each way.
	in  io.Writer
	out io.Reader
	ctx context.Context // the wire's life, for the requests of the child

	writeMu sync.Mutex
	calls   pending

	// The reading of stdout is a role (see read): the wire's reader
	// goroutine (read) holds it, or lends it out while no call is in
	// flight, so that the next call's goroutine reads its answer itself.
	role      atomic.Int32
	resume    chan struct{} // buffered: the role is back with read
	lendTimer *time.Timer
	canLend   bool            // stdout takes read deadlines
	br        *bufio.Reader   // used by the role's holder only
	long      []byte          // a line longer than br's buffer, so far
	life      context.Context // ends when the wire finishes (done)
	endLife   context.CancelFunc

	done      chan struct{} // closed once the wire is closed or stdout ended
	doneOnce  sync.Once
	exited    chan struct{} // closed once the child has been waited for
	waitErr   error
	closeOnce sync.Once
	closeErr  error
	closing   chan struct{}
}

// start starts the child with its three pipes and reads its stdout.
func (w *stdioWire) start(ctx context.Context) error {
	w.ctx = ctx
	w.done = make(chan struct{})
	w.exited = make(chan struct{})
	w.closing = make(chan struct{})
	cmd := w.newCmd()
	var pipes [6]*os.File
	for i := 0; i < 3; i++ {
		r, wr, err := os.Pipe()
		if err != nil {
			for _, f := range pipes {
				if f != nil {
					f.Close()
				}
			}
			return fmt.Errorf("creating pipes: %w", err)
		}
		pipes[2*i], pipes[2*i+1] = r, wr
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = pipes[0], pipes[3], pipes[5]
	err := cmd.Start()
	// The child's ends are its own now (or nobody's).
	pipes[0].Close()
	pipes[3].Close()
	pipes[5].Close()
	if err != nil {
		pipes[1].Close()
		pipes[2].Close()
		pipes[4].Close()
		close(w.exited)
		w.finish()
		return err
	}
	w.cmd = cmd
	w.stdin, w.stdout, w.stderr = pipes[1], pipes[2], pipes[4]
	w.in, w.out = rawio.File(w.stdin), rawio.File(w.stdout)
	w.br = bufio.NewReaderSize(w.out, 64<<10)
	w.resume = make(chan struct{}, 1)
	w.life, w.endLife = context.WithCancel(context.Background())
	w.lendTimer = time.AfterFunc(time.Hour, func() { w.giveBack(roleLent) })
	w.lendTimer.Stop()
	w.canLend = w.stdout.SetReadDeadline(time.Time{}) == nil
	if !w.tracked(func() {
		w.waitErr = cmd.Wait()
		close(w.exited)
	}) {
		// The upstream is closing: nothing may outlive it.
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		close(w.exited)
		w.stdin.Close()
		w.stdout.Close()
		w.stderr.Close()
		w.finish()
		return errClosing
	}
	if !w.tracked(w.read) {
		w.finish()
		return errClosing
	}
	return nil
}

// stderrReader returns the child's stderr; the caller reads it to the end.
func (w *stdioWire) stderrReader() io.Reader { return w.stderr }

// exitState says how the child ended ("exit status 3"), once close has
// seen it exit; "" before, or when it did not.
func (w *stdioWire) exitState() string {
	if w.cmd == nil {
		return ""
	}
	select {
	case <-w.exited:
	default:
		return ""
	}
	if w.cmd.ProcessState == nil {
		return ""
	}
	return w.cmd.ProcessState.String()
}

// The roles of the reading of stdout (stdioWire.role).
const (
	roleWire   = iota // read, the wire's reader goroutine, reads
	roleLent          // nobody reads: the next call may take the reading
	roleCaller        // a call's goroutine reads, for its own answer
	roleEnded         // the stream has ended: read returns
)

// stdioLendFor is how long the reading may stay lent out (roleLent)
// before read takes it back: the longest a message the server sends
// between two calls (a notification, a request, its end) waits to be
// read.
const stdioLendFor = time.Millisecond

// read reads the child's stdout, one message a line, until it ends.
//
// While no call is in flight, read lends the reading out (roleLent) for
// up to stdioLendFor: a call that starts meanwhile takes it (readFor) and
// reads its own answer, so that the answer wakes the goroutine that waits
// for it, from the poller, rather than this one, which would then have
// to wake that one: a tiny call costs one goroutine hand-off less. The
// reading comes back to read when the lend times out, when the caller
// has its answer while other calls wait for theirs, or when the caller's
// context ends.
func (w *stdioWire) read() {
	defer w.stdout.Close()
	for {
		if w.role.Load() != roleWire {
			<-w.resume
			if w.role.Load() == roleEnded {
				return
			}
			continue
		}
		m, err := w.readOne()
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				// A late kick meant for a caller (readFor).
				_ = w.stdout.SetReadDeadline(time.Time{})
				continue
			}
			w.role.Store(roleEnded)
			w.end(err)
			return
		}
		if m != nil && m.IsResponse() && w.canLend && w.calls.idle() && w.role.CompareAndSwap(roleWire, roleLent) {
			w.lendTimer.Reset(stdioLendFor)
		}
	}
}

// giveBack returns the reading to read from the role from.
func (w *stdioWire) giveBack(from int32) {
	if w.role.CompareAndSwap(from, roleWire) {
		select {
		case w.resume <- struct{}{}:
		default:
		}
	}
}

// readOne reads and dispatches one line; it returns the message read
// (nil for a blank or unreadable line) or the error that ended the
// stream (os.ErrDeadlineExceeded when a read deadline cut the wait).
func (w *stdioWire) readOne() (*envelope, error) {
	for {
		chunk, err := w.br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			if len(w.long)+len(chunk) > maxStdioLine {
				return nil, fmt.Errorf("the server wrote a line longer than %d bytes", maxStdioLine)
			}
			w.long = append(w.long, chunk...)
			continue
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			// ReadSlice returned, and dropped from its buffer, the
			// start of a line: keep it for the next read.
			if len(w.long)+len(chunk) > maxStdioLine {
				return nil, fmt.Errorf("the server wrote a line longer than %d bytes", maxStdioLine)
			}
			w.long = append(w.long, chunk...)
			return nil, err
		}
		line := chunk
		if w.long != nil {
			line = append(w.long, chunk...)
			w.long = nil
		} else {
			// ReadSlice's buffer is reused: the message keeps a copy.
			line = bytes.Clone(chunk)
		}
		var m *envelope
		if msg := bytes.TrimSpace(line); len(msg) > 0 {
			m = w.dispatch(msg)
		}
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, os.ErrClosed) {
				err = errors.New("the server closed its stdout")
			}
			return m, err
		}
		return m, nil
	}
}

// readFor reads stdout on the caller's goroutine, the reading taken from
// roleLent, until the answer to the call arrives on ch, the stream ends
// or ctx ends; then it passes the reading on: lent again when no other
// call is in flight, else back to read. ok is false when it returns
// without an answer or error of its own (the caller then waits on ch).
func (w *stdioWire) readFor(ctx context.Context, ch chan *envelope) (m *envelope, err error, ok bool) {
	kick := func() { _ = w.stdout.SetReadDeadline(time.Unix(1, 0)) }
	stop := context.AfterFunc(ctx, kick)
	defer stop()
	stopLife := context.AfterFunc(w.life, kick)
	defer stopLife()
	for {
		// First ch: read may have read the answer, and lent the reading
		// out, before this call took it.
		select {
		case m := <-ch:
			if w.calls.idle() && w.role.CompareAndSwap(roleCaller, roleLent) {
				w.lendTimer.Reset(stdioLendFor)
			} else {
				w.giveBack(roleCaller)
			}
			return m, nil, true
		default:
		}
		_, rerr := w.readOne()
		switch {
		case rerr == nil:
		case errors.Is(rerr, os.ErrDeadlineExceeded):
			// A kick: this call's context or the wire's life ended, or
			// a late one meant for an earlier caller. Cleared before the
			// reading passes on, as a kick for the next holder must
			// find it set.
			_ = w.stdout.SetReadDeadline(time.Time{})
			if ctx.Err() != nil || w.life.Err() != nil {
				w.giveBack(roleCaller)
				return nil, nil, false
			}
		default:
			w.endFrom(rerr)
			return nil, nil, false // the answer too, if it came, is on ch
		}
	}
}

// endFrom ends the stream from a caller that held the reading: read
// returns, and the wire ends as read would have ended it.
func (w *stdioWire) endFrom(err error) {
	w.role.Store(roleEnded)
	select {
	case w.resume <- struct{}{}:
	default:
	}
	w.end(err)
}

// dispatch passes one message on: a response to its call, anything else to
// the handler. It returns the message, nil when it could not be read.
func (w *stdioWire) dispatch(line []byte) *envelope {
	m, err := parseIn(line)
	if err != nil {
		w.log.Warn("ignoring a line from the server that is not a JSON-RPC message", "err", err, "bytes", len(line))
		return nil
	}
	if m.IsResponse() {
		if !w.calls.deliver(m) {
			w.log.Debug("ignoring a response to no request in flight", "id", string(m.ID))
		}
		return m
	}
	if m.Method == "" {
		w.log.Warn("ignoring a message from the server with neither a method nor an id")
		return m
	}
	w.handle(w.ctx, m)
	return m
}

// end marks the stream over; unless the wire is being closed, the
// connection is lost.
func (w *stdioWire) end(err error) {
	select {
	case <-w.closing:
		w.finish()
		return
	default:
	}
	w.finish()
	w.lost(err)
}

func (w *stdioWire) finish() {
	w.doneOnce.Do(func() {
		close(w.done)
		if w.endLife != nil {
			w.endLife()
		}
		if w.lendTimer != nil {
			// read takes the reading back, to drain stdout to its end.
			w.giveBack(roleLent)
		}
	})
}

// write writes one message on one line.
func (w *stdioWire) write(body []byte) error {
	line, err := oneLine(body)
	if err != nil {
		return fmt.Errorf("the message is not valid JSON: %w", err)
	}
	w.writeMu.Lock()
	defer w.writeMu.Unlock()
	select {
	case <-w.done:
		return errTransportClosed
	default:
	}
	// One write for the message and its line break: a child reading
	// line by line never sees half a message on its own.
	buf := make([]byte, 0, len(line)+1)
	buf = append(append(buf, line...), '\n')
	if _, err := w.in.Write(buf); err != nil {
		return fmt.Errorf("writing to the server's stdin: %w", err)
	}
	return nil
}

func (w *stdioWire) call(ctx context.Context, id int64, _ string, body []byte) (*envelope, error) {
	return w.calls.callWith(ctx, w.done, id, func() error { return w.write(body) }, func(ch chan *envelope) (*envelope, error, bool) {
		if !w.role.CompareAndSwap(roleLent, roleCaller) {
			return nil, nil, false
		}
		w.lendTimer.Stop()
		return w.readFor(ctx, ch)
	})
}

func (w *stdioWire) send(ctx context.Context, body []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return w.write(body)
}

// close closes the child's stdin and waits for it to exit: stdioGracefulExit,
// then SIGTERM, then SIGKILL. The caller kills the process group after.
func (w *stdioWire) close() error {
	w.closeOnce.Do(func() {
		if w.closing != nil {
			close(w.closing)
		}
		if w.done != nil {
			w.finish()
		}
		if w.cmd == nil {
			return
		}
		w.writeMu.Lock()
		w.stdin.Close()
		w.writeMu.Unlock()
		wait := func(d time.Duration) bool {
			t := time.NewTimer(d)
			defer t.Stop()
			select {
			case <-w.exited:
				return true
			case <-t.C:
				return false
			}
		}
		exited := wait(stdioGracefulExit)
		if !exited {
			_ = w.cmd.Process.Signal(syscall.SIGTERM)
			exited = wait(stdioSignalWait)
		}
		if !exited {
			_ = w.cmd.Process.Kill()
			exited = wait(stdioSignalWait)
		}
		// The readers may be blocked on pipes a grandchild holds open.
		w.stdout.Close()
		w.stderr.Close()
		switch {
		case !exited:
			w.closeErr = errChildShutdownTimeout
		default:
			var ee *exec.ExitError
			if w.waitErr != nil && !errors.As(w.waitErr, &ee) {
				w.closeErr = w.waitErr
			}
		}
	})
	return w.closeErr
}
