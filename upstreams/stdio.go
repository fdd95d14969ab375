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
	"syscall"
	"time"

	"github.com/foldproxy/foldproxy/proxy/rawio"
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
	// through the poller (proxy/rawio), which spare the scheduler's work
	// around a system call, twice per message each way.
	in  io.Writer
	out io.Reader
	ctx context.Context // the wire's life, for the requests of the child

	writeMu sync.Mutex
	calls   pending

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

// read reads the child's stdout, one message a line, until it ends.
func (w *stdioWire) read() {
	defer w.stdout.Close()
	r := bufio.NewReaderSize(w.out, 64<<10)
	var long []byte
	for {
		chunk, err := r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			if len(long)+len(chunk) > maxStdioLine {
				w.end(fmt.Errorf("the server wrote a line longer than %d bytes", maxStdioLine))
				return
			}
			long = append(long, chunk...)
			continue
		}
		line := chunk
		if long != nil {
			line = append(long, chunk...)
			long = nil
		} else {
			// ReadSlice's buffer is reused: the message keeps a copy.
			line = bytes.Clone(chunk)
		}
		if msg := bytes.TrimSpace(line); len(msg) > 0 {
			w.dispatch(msg)
		}
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, os.ErrClosed) {
				err = errors.New("the server closed its stdout")
			}
			w.end(err)
			return
		}
	}
}

// dispatch passes one message on: a response to its call, anything else to
// the handler.
func (w *stdioWire) dispatch(line []byte) {
	m, err := parseIn(line)
	if err != nil {
		w.log.Warn("ignoring a line from the server that is not a JSON-RPC message", "err", err, "bytes", len(line))
		return
	}
	if m.isResponse() {
		if !w.calls.deliver(m) {
			w.log.Debug("ignoring a response to no request in flight", "id", string(m.ID))
		}
		return
	}
	if m.Method == "" {
		w.log.Warn("ignoring a message from the server with neither a method nor an id")
		return
	}
	w.handle(w.ctx, m)
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

func (w *stdioWire) finish() { w.doneOnce.Do(func() { close(w.done) }) }

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

func (w *stdioWire) call(ctx context.Context, id int64, _ string, body []byte) (*inMsg, error) {
	return w.calls.call(ctx, w.done, id, func() error { return w.write(body) })
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
