package proxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"
)

// StdioOptions configures ServeStdio. The zero value is usable.
type StdioOptions struct {
	// MaxMessageBytes bounds one line from the agent; a longer line is
	// refused with CodeMessageTooLarge and discarded without being buffered.
	// 0 means DefaultMaxMessageBytes.
	MaxMessageBytes int64
	// Logger receives the front's diagnostics. It must not write to the
	// stdout that carries JSON-RPC. nil discards.
	Logger *slog.Logger
	// DrainTimeout bounds how long in-flight requests may still run after
	// the agent closes stdin, before they are cancelled. 0 means 5s.
	DrainTimeout time.Duration

	// The attach front (attach.go) serves each attached stdio process with
	// ServeStdio and sets these. SessionID names the session: when the
	// endpoint can resume it from the store (a daemon that restarted) it
	// continues there, else a new session gets that id. Transport is
	// recorded with the session ("stdio" when empty).
	SessionID string
	Transport string
	// Detach leaves the session in the store, to be resumed, when ctx ends
	// (the daemon is stopping) instead of ending it; EOF from the agent
	// still ends it.
	Detach bool
	// Opened, when set, is called with the session once it is open.
	Opened func(*Session)
}

const stdioDefaultDrain = 5 * time.Second

// ServeStdio serves one session over newline-delimited JSON-RPC: it reads the
// agent's messages from r and writes everything for the agent to w, one
// message per line, never interleaved.
//
// Each request is delivered to ep in its own goroutine, so a slow tool call
// does not hold up the others and a cancellation notification gets through;
// notifications and responses are delivered in the order they arrive. A
// malformed line is answered with a JSON-RPC error and the loop goes on; a
// line longer than MaxMessageBytes is refused with CodeMessageTooLarge and
// skipped without being buffered. A batch is answered with an array.
//
// ServeStdio returns nil when r reaches EOF, after in-flight requests have
// finished (or been cancelled once DrainTimeout passed), and ctx.Err() when ctx
// ends first, after cancelling them. Either way the session is closed and
// nothing is written to w once ServeStdio has returned. A Read from r that
// never returns keeps one goroutine blocked until it does; ServeStdio itself
// does not wait for it.
func ServeStdio(ctx context.Context, ep Endpoint, r io.Reader, w io.Writer, opts StdioOptions) error {
	if ep == nil || r == nil || w == nil {
		return errors.New("stdio: ServeStdio needs an endpoint, a reader and a writer")
	}
	if opts.MaxMessageBytes < 0 {
		return fmt.Errorf("stdio: MaxMessageBytes %d is negative", opts.MaxMessageBytes)
	}
	sv := &stdioServer{
		opts:  opts,
		ep:    ep,
		log:   frontLogger(opts.Logger),
		max:   opts.MaxMessageBytes,
		drain: opts.DrainTimeout,
		out:   &stdioWriter{w: w, broken: make(chan struct{})},
	}
	if sv.max == 0 {
		sv.max = DefaultMaxMessageBytes
	}
	if sv.drain <= 0 {
		sv.drain = stdioDefaultDrain
	}
	return sv.serve(ctx, r)
}

// stdioServer is the state of one ServeStdio call.
type stdioServer struct {
	opts  StdioOptions
	ep    Endpoint
	log   *slog.Logger
	max   int64
	drain time.Duration
	out   *stdioWriter

	s        *Session
	detach   bool            // leave the session in the store at shutdown
	reqCtx   context.Context // parent of every request's context
	inflight sync.WaitGroup
}

// stdioLine is one line read from the agent, or the error that ended reading.
type stdioLine struct {
	data     []byte
	tooLarge bool
	err      error
}

func (sv *stdioServer) serve(ctx context.Context, r io.Reader) error {
	reqCtx, cancelReqs := context.WithCancel(ctx)
	defer cancelReqs()
	sv.reqCtx = reqCtx

	sv.s = sv.openSession(ctx)
	if sv.s == nil {
		return errors.New("stdio: the endpoint opened no session")
	}
	if sv.opts.Opened != nil {
		sv.opts.Opened(sv.s)
	}

	lines := make(chan stdioLine)
	stop := make(chan struct{})
	defer close(stop)
	go stdioReadLines(r, sv.max, lines, stop)

	for {
		select {
		case <-ctx.Done():
			sv.detach = sv.opts.Detach
			sv.shutdown(ctx, cancelReqs, 0)
			return ctx.Err()
		case <-sv.out.broken:
			sv.shutdown(ctx, cancelReqs, 0)
			return sv.out.failure()
		case ln := <-lines:
			if ln.tooLarge || len(ln.data) > 0 {
				sv.handleLine(ln)
			}
			if ln.err == nil {
				continue
			}
			sv.shutdown(ctx, cancelReqs, sv.drain)
			if errors.Is(ln.err, io.EOF) {
				return nil
			}
			return fmt.Errorf("stdio: reading from the agent: %w", ln.err)
		}
	}
}

// shutdown lets in-flight requests run for up to drain (less if ctx ends),
// cancels the rest, closes the session, waits a bounded time for the
// requests to return and closes the writer so that no late message reaches w.
func (sv *stdioServer) shutdown(ctx context.Context, cancelReqs context.CancelFunc, drain time.Duration) {
	if drain > 0 {
		stdioWait(&sv.inflight, drain, ctx.Done())
	}
	cancelReqs()
	sv.closeSession()
	if !stdioWait(&sv.inflight, stdioDefaultDrain, nil) {
		sv.log.Warn("stdio: requests still running after cancellation; their answers are dropped")
	}
	sv.out.close()
}

func (sv *stdioServer) closeSession() {
	defer func() {
		if v := recover(); v != nil {
			sv.log.Error("panic while closing the stdio session", "panic", fmt.Sprint(v))
		}
	}()
	if d, ok := sv.ep.(interface{ DetachSession(*Session) }); ok && sv.detach {
		d.DetachSession(sv.s)
		return
	}
	sv.ep.CloseSession(sv.s)
}

// openSession opens the session: a new one, or with SessionID the one of
// that id, resumed from the store when the endpoint can.
func (sv *stdioServer) openSession(ctx context.Context) *Session {
	transport := sv.opts.Transport
	if transport == "" {
		transport = "stdio"
	}
	if id := sv.opts.SessionID; id != "" {
		if r, ok := sv.ep.(interface {
			ResumeSession(context.Context, string) (*Session, bool)
		}); ok {
			if s, ok := r.ResumeSession(ctx, id); ok {
				s.SetStandalone(sv.out)
				return s
			}
		}
	}
	return sv.ep.OpenSession(ctx, sv.opts.SessionID, transport, sv.out)
}

// stdioWait waits for wg up to d, or until stop is closed, and reports
// whether wg finished.
func stdioWait(wg *sync.WaitGroup, d time.Duration, stop <-chan struct{}) bool {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	case <-stop:
		return false
	}
}

// handleLine decodes one line and delivers its messages.
func (sv *stdioServer) handleLine(ln stdioLine) {
	if ln.tooLarge {
		sv.write(Response(nil, nil, Errorf(CodeMessageTooLarge,
			"message too large: a message may be at most %d bytes (maxMessageBytes)", sv.max)))
		return
	}
	if len(bytes.TrimSpace(ln.data)) == 0 {
		return // blank lines separate nothing; ignore them
	}
	items, batch := frontDecode(ln.data)
	if !batch {
		it := items[0]
		switch {
		case it.msg == nil:
			sv.write(it.fail)
		case it.msg.IsRequest():
			c := &stdioCollector{main: sv.out, await: newFrontAwait()}
			c.await.add(it.msg.ID)
			sv.inflight.Add(1)
			go func() {
				defer sv.inflight.Done()
				sv.deliverRequest(it.msg, c)
				c.finish()
			}()
		default:
			frontDeliver(sv.reqCtx, sv.log, sv.ep, sv.s, it.msg, sv.out)
		}
		return
	}

	// A batch: notifications and responses go in order, requests each in
	// their own goroutine, and the responses are gathered into one array.
	c := &stdioCollector{main: sv.out, await: newFrontAwait(), hold: true}
	for _, it := range items {
		switch {
		case it.msg == nil:
			c.held = append(c.held, it.fail)
		case it.msg.IsRequest():
			c.await.add(it.msg.ID)
		}
	}
	sv.inflight.Add(1)
	var batchWG sync.WaitGroup
	for _, it := range items {
		if it.msg == nil {
			continue
		}
		if it.msg.IsRequest() {
			batchWG.Add(1)
			go func() {
				defer batchWG.Done()
				sv.deliverRequest(it.msg, c)
			}()
			continue
		}
		frontDeliver(sv.reqCtx, sv.log, sv.ep, sv.s, it.msg, sv.out)
	}
	go func() {
		defer sv.inflight.Done()
		batchWG.Wait()
		c.finish()
	}()
}

// deliverRequest hands one request to the core.
func (sv *stdioServer) deliverRequest(msg *Message, out Outbound) {
	frontDeliver(sv.reqCtx, sv.log, sv.ep, sv.s, msg, out)
}

// write sends a message the front itself composed; a failure is already
// recorded by the writer and ends the loop.
func (sv *stdioServer) write(msg []byte) {
	if err := sv.out.WriteMessage(msg); err != nil && !errors.Is(err, ErrOutboundClosed) {
		sv.log.Debug("stdio: could not write an error response", "err", err)
	}
}

// stdioCollector is the Outbound the core answers one request or one batch
// on. It notes which owed responses were written, so that the front can
// answer for a core that returned without one. Without hold it passes every
// message straight through; with hold (a batch) it keeps the owed responses
// and writes them as one array once every request has been delivered.
type stdioCollector struct {
	main *stdioWriter
	hold bool

	mu    sync.Mutex
	await *frontAwait
	held  [][]byte
	done  bool
}

// WriteMessage is safe for concurrent use.
func (c *stdioCollector) WriteMessage(msg []byte) error {
	key, isResp, _ := frontClassify(msg)
	c.mu.Lock()
	owed := isResp && !c.done && c.await.pay(key)
	if owed && c.hold {
		line, err := frontCompact(msg)
		if err != nil {
			c.mu.Unlock()
			return fmt.Errorf("stdio: %w", err)
		}
		c.held = append(c.held, bytes.Clone(line))
		c.mu.Unlock()
		return nil
	}
	c.mu.Unlock()
	return c.main.WriteMessage(msg)
}

// forgetRequest settles a request the agent cancelled: it is owed no
// response.
func (c *stdioCollector) forgetRequest(id json.RawMessage) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.done {
		c.await.pay(frontIDKey(id))
	}
}

// finish answers every request still owed with an internal error and, for a
// batch, writes the array of responses.
func (c *stdioCollector) finish() {
	c.mu.Lock()
	c.done = true
	var unpaid [][]byte
	for _, id := range c.await.missing() {
		unpaid = append(unpaid, frontNoResponse(id))
	}
	if c.hold {
		c.held = append(c.held, unpaid...)
		unpaid = nil
		if len(c.held) > 0 {
			unpaid = [][]byte{stdioJoinArray(c.held)}
		}
		c.held = nil
	}
	c.mu.Unlock()
	for _, m := range unpaid {
		if err := c.main.WriteMessage(m); err != nil {
			return
		}
	}
}

// stdioJoinArray encodes messages as a JSON array.
func stdioJoinArray(msgs [][]byte) []byte {
	return append(append([]byte{'['}, bytes.Join(msgs, []byte{','})...), ']')
}

// stdioWriter is the session's Outbound to the agent: it writes one message
// per line, whole, one writer at a time.
type stdioWriter struct {
	w      io.Writer
	broken chan struct{} // closed at the first write error

	mu     sync.Mutex
	closed bool
	err    error
	buf    []byte
}

// WriteMessage is safe for concurrent use. It returns ErrOutboundClosed once
// ServeStdio is returning, and the first write error from then on.
func (o *stdioWriter) WriteMessage(msg []byte) error {
	line, err := frontCompact(msg)
	if err != nil {
		return fmt.Errorf("stdio: %w", err)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return ErrOutboundClosed
	}
	if o.err != nil {
		return o.err
	}
	o.buf = append(append(o.buf[:0], line...), '\n')
	_, werr := o.w.Write(o.buf)
	if cap(o.buf) > 1<<20 {
		o.buf = nil // do not pin one huge result's buffer for the session's life
	}
	if werr != nil {
		o.err = fmt.Errorf("stdio: writing to the agent: %w", werr)
		close(o.broken)
		return o.err
	}
	return nil
}

func (o *stdioWriter) failure() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.err
}

func (o *stdioWriter) close() {
	o.mu.Lock()
	o.closed = true
	o.mu.Unlock()
}

// stdioReadLines reads lines from r and sends them on lines until reading
// fails or stop is closed. The channel is unbuffered, so at most one line is
// read ahead of the loop.
func stdioReadLines(r io.Reader, max int64, lines chan<- stdioLine, stop <-chan struct{}) {
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		data, tooLarge, err := stdioReadLine(br, max)
		select {
		case lines <- stdioLine{data: data, tooLarge: tooLarge, err: err}:
		case <-stop:
			return
		}
		if err != nil {
			return
		}
	}
}

// stdioReadLine reads one line, without its line ending. A line longer than
// max is reported as tooLarge, and its bytes past max are read and dropped
// rather than kept. A final line without a newline is returned together with
// the error that ended it.
func stdioReadLine(br *bufio.Reader, max int64) (line []byte, tooLarge bool, err error) {
	for {
		frag, e := br.ReadSlice('\n')
		if !tooLarge {
			// max+2 leaves room for a "\r\n" line ending.
			if int64(len(line))+int64(len(frag)) > max+2 {
				tooLarge, line = true, nil
			} else {
				line = append(line, frag...)
			}
		}
		if errors.Is(e, bufio.ErrBufferFull) {
			continue
		}
		if tooLarge {
			return nil, true, e
		}
		line = bytes.TrimSuffix(line, []byte{'\n'})
		line = bytes.TrimSuffix(line, []byte{'\r'})
		if int64(len(line)) > max {
			return nil, true, e
		}
		return line, false, e
	}
}

// Compile-time checks that the front's writers are Outbounds.
var (
	_ Outbound = (*stdioWriter)(nil)
	_ Outbound = (*stdioCollector)(nil)
)
