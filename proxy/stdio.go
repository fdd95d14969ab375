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
	"sync/atomic"
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

	// The attach front (package proxy/attach) serves each attached stdio process with
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

	// hangup, when set, ends the session as the end of its input does
	// (the relay of an attached session whose pipes the daemon reads
	// itself went away).
	hangup <-chan struct{}
}

const stdioDefaultDrain = 5 * time.Second

// ServeStdio serves one session over newline-delimited JSON-RPC: it reads the
// agent's messages from r and writes everything for the agent to w, one
// message per line, never interleaved.
//
// Each request is delivered to ep in its own goroutine, so a slow tool call
// does not hold up the others and a cancellation notification gets through
// (a request that arrives alone is served on the goroutine that read it,
// which reads on after stdioLendFor at the latest); notifications and
// responses are delivered in the order they arrive. A
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
	// Pipes and sockets are read and written through the poller by raw
	// system calls (rawio_unix.go), as the relay does: a read waiting for
	// the agent then holds no thread in a blocking system call. Restored
	// once the session is over and nothing more is written.
	r, w, restore := pollableStdio(r, w)
	defer restore()
	return serveStdio(ctx, ep, bufSource{bufio.NewReaderSize(r, 64<<10)}, &stdioWriter{w: w, broken: make(chan struct{})}, opts)
}

// serveStdio is ServeStdio on a source of lines and a writer: a buffered
// reader of the agent's stdin, or the journal of an attached session whose
// pipes the daemon reads and writes itself (attach_fd_linux.go).
func serveStdio(ctx context.Context, ep Endpoint, src stdioSource, out *stdioWriter, opts StdioOptions) error {
	sv := &stdioServer{
		opts:  opts,
		ep:    ep,
		log:   frontLogger(opts.Logger),
		max:   opts.MaxMessageBytes,
		drain: opts.DrainTimeout,
		out:   out,
		src:   src,
	}
	if sv.max == 0 {
		sv.max = DefaultMaxMessageBytes
	}
	if sv.drain <= 0 {
		sv.drain = stdioDefaultDrain
	}
	return sv.serve(ctx)
}

// stdioSource is where a session's lines come from. One goroutine at a
// time reads.
type stdioSource interface {
	// readLine reads one line as stdioReadLine does.
	readLine(max int64) (line []byte, tooLarge bool, err error)
	// more reports whether input past the line last read is at hand.
	more() bool
	// handled is called once the line last read has been handled: its
	// requests noted as owed and handed on, its other messages
	// delivered. A line read and not handled is read again by whoever
	// serves the session after this process (see package proxy/attach).
	handled()
}

// bufSource reads lines from a buffered reader.
type bufSource struct{ br *bufio.Reader }

func (b bufSource) readLine(max int64) ([]byte, bool, error) { return stdioReadLine(b.br, max) }
func (b bufSource) more() bool                               { return b.br.Buffered() > 0 }
func (b bufSource) handled()                                 {}

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
	active   atomic.Int32 // requests (and batches) in flight

	// lent is true while the goroutine that read a request serves it
	// itself and nobody else reads (see read); ensureReading, which
	// lendTimer runs, takes the reading back from it.
	lent      atomic.Bool
	lendTimer *time.Timer

	src   stdioSource
	pool  stdioPool
	ended chan error // the error that ended reading (io.EOF at the end of input)

	// gate orders the reader's deliveries against shutdown: a line is
	// delivered, and its requests counted in inflight, under the read
	// lock, and shutdown sets stopped under the write lock, so that
	// nothing is delivered once the session is being closed.
	gate    sync.RWMutex
	stopped bool
}

// stdioLine is one line read from the agent, or the error that ended reading.
type stdioLine struct {
	data     []byte
	tooLarge bool
	err      error
}

func (sv *stdioServer) serve(ctx context.Context) error {
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

	sv.lendTimer = time.AfterFunc(time.Hour, sv.ensureReading)
	sv.lendTimer.Stop()
	defer sv.lendTimer.Stop()
	sv.ended = make(chan error, 1)
	defer sv.pool.close()
	sv.pool.run(sv.read)

	select {
	case <-ctx.Done():
		sv.detach = sv.opts.Detach
		sv.shutdown(ctx, cancelReqs, 0)
		return ctx.Err()
	case <-sv.out.broken:
		sv.shutdown(ctx, cancelReqs, 0)
		return sv.out.failure()
	case err := <-sv.ended:
		sv.shutdown(ctx, cancelReqs, sv.drain)
		if errors.Is(err, io.EOF) {
			return nil
		}
		return fmt.Errorf("stdio: reading from the agent: %w", err)
	case <-sv.opts.hangup:
		sv.shutdown(ctx, cancelReqs, sv.drain)
		return nil
	}
}

// read reads the agent's lines and delivers them until reading fails or
// the server stops. A request is served on the goroutine that read it:
// that goroutine first passes the reading on to another one of the pool,
// so that the request starts at once, on a thread already running, and a
// notification behind it (its cancellation) still gets through.
//
// Except when the request is alone: no other request in flight and
// nothing more read yet. The goroutine then serves it without passing the
// reading on first, and reads on once it is answered, unless the request
// took longer than stdioLendFor: lendTimer then passes the reading on
// (ensureReading) and the goroutine returns to the pool when done. The
// agent of a tool call at a time thus costs no goroutine hand-off (a
// goroutine readied, often a thread woken for it, and its own system call
// that finds nothing to read) per call; a message that arrives while the
// request is served is read at most stdioLendFor late, and no wait of the
// request (on the agent reading its output, say) can hold the reading up
// longer.
func (sv *stdioServer) read() {
	for {
		data, tooLarge, err := sv.src.readLine(sv.max)
		sv.gate.RLock()
		if sv.stopped {
			sv.gate.RUnlock()
			return
		}
		var serve func()
		inline := false
		if tooLarge || len(data) > 0 {
			serve, inline = sv.handleLine(stdioLine{data: data, tooLarge: tooLarge})
		}
		sv.src.handled()
		sv.gate.RUnlock()
		if err != nil {
			if serve != nil {
				sv.pool.run(serve)
			}
			sv.ended <- err // once: this goroutine reads no more
			return
		}
		if serve != nil && inline && !sv.src.more() {
			// Alone: serve it here, reading lent out (see above).
			sv.lent.Store(true)
			sv.lendTimer.Reset(stdioLendFor)
			serve()
			sv.lendTimer.Stop()
			if sv.lent.CompareAndSwap(true, false) {
				continue // nobody took the reading over: read on
			}
			return // another goroutine reads now
		}
		if serve != nil {
			sv.pool.run(sv.read)
			serve()
			return
		}
	}
}

// stdioLendFor is how long the goroutine that read a request may serve
// it itself before the reading passes to another one (see read): the
// longest a message that arrives meanwhile (another request, a
// cancellation) waits to be read.
const stdioLendFor = time.Millisecond

// ensureReading makes sure that the agent's input is being read: when the
// goroutine that reads it is serving a request itself (lent), another one
// of the pool takes the reading over. It is safe to call from any
// goroutine, any number of times.
func (sv *stdioServer) ensureReading() {
	if sv.lent.CompareAndSwap(true, false) {
		sv.pool.run(sv.read)
	}
}

// stdioPoolIdle bounds how many idle goroutines a session's pool keeps.
const stdioPoolIdle = 8

// stdioPool runs functions on goroutines that it keeps, up to
// stdioPoolIdle of them, once their function has returned: the next
// request then runs on a goroutine whose stack has already grown to what
// serving one takes, rather than on a new one whose small stack is copied
// each time it doubles. Its zero value is ready; close ends the idle
// goroutines, and those still running end when their function returns.
type stdioPool struct {
	mu     sync.Mutex
	idle   []chan func()
	closed bool
}

// run runs f on an idle goroutine, or a new one.
func (p *stdioPool) run(f func()) {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		ch := p.idle[n-1]
		p.idle = p.idle[:n-1]
		ch <- f // buffered and empty: the goroutine waits on it
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	go p.work(f)
}

func (p *stdioPool) work(f func()) {
	var ch chan func()
	for f != nil {
		f()
		p.mu.Lock()
		if p.closed || len(p.idle) >= stdioPoolIdle {
			p.mu.Unlock()
			return
		}
		if ch == nil {
			ch = make(chan func(), 1)
		}
		p.idle = append(p.idle, ch)
		p.mu.Unlock()
		f = <-ch // nil once the pool is closed
	}
}

// close ends the idle goroutines and keeps none from then on.
func (p *stdioPool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for _, ch := range p.idle {
		ch <- nil
	}
	p.idle = nil
}

// shutdown lets in-flight requests run for up to drain (less if ctx ends),
// cancels the rest, closes the session, waits a bounded time for the
// requests to return and closes the writer so that no late message reaches w.
func (sv *stdioServer) shutdown(ctx context.Context, cancelReqs context.CancelFunc, drain time.Duration) {
	sv.gate.Lock()
	sv.stopped = true
	sv.gate.Unlock()
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

// handleLine decodes one line and delivers its notifications and
// responses. A single request is counted in flight and returned as serve,
// for the caller to run, with inline true when no other request is in
// flight (see read); a batch's requests run in goroutines of their own.
func (sv *stdioServer) handleLine(ln stdioLine) (serve func(), inline bool) {
	if ln.tooLarge {
		sv.write(Response(nil, nil, Errorf(CodeMessageTooLarge,
			"message too large: a message may be at most %d bytes (maxMessageBytes)", sv.max)))
		return nil, false
	}
	if len(bytes.TrimSpace(ln.data)) == 0 {
		return nil, false // blank lines separate nothing; ignore them
	}
	items, batch := frontDecode(ln.data)
	if !batch {
		it := items[0]
		switch {
		case it.msg == nil:
			sv.write(it.fail)
		case it.msg.IsRequest():
			if err := sv.note(it.msg, ln.data, 0); err != nil {
				sv.write(Response(it.msg.ID, nil, Errorf(CodeInternalError, "foldproxy: %v", err)))
				return nil, false
			}
			c := &stdioCollector{main: sv.out, await: newFrontAwait()}
			c.await.add(it.msg.ID)
			inline = sv.active.Load() == 0
			sv.inflight.Add(1)
			sv.active.Add(1)
			return func() {
				defer sv.inflight.Done()
				defer sv.active.Add(-1)
				sv.deliverRequest(it.msg, c)
				c.finish()
			}, inline
		default:
			frontDeliver(sv.reqCtx, sv.log, sv.ep, sv.s, it.msg, sv.out)
		}
		return nil, false
	}

	// A batch: notifications and responses go in order, requests each in
	// their own goroutine, and the responses are gathered into one array.
	c := &stdioCollector{main: sv.out, await: newFrontAwait(), hold: true}
	var group uint64
	if sv.out.j != nil {
		group = sv.out.j.NewGroup()
	}
	for i, it := range items {
		switch {
		case it.msg == nil:
			c.held = append(c.held, it.fail)
		case it.msg.IsRequest():
			if err := sv.note(it.msg, nil, group); err != nil {
				c.held = append(c.held, Response(it.msg.ID, nil, Errorf(CodeInternalError, "foldproxy: %v", err)))
				items[i].msg = nil // answered: not delivered
				continue
			}
			c.await.add(it.msg.ID)
			c.keys = append(c.keys, frontIDKey(it.msg.ID))
		}
	}
	sv.inflight.Add(1)
	sv.active.Add(1)
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
		defer sv.active.Add(-1)
		batchWG.Wait()
		c.finish()
	}()
	return nil, false
}

// note records a request read from line (nil: one of a batch, group) as
// owed in the session's journal, when it has one, before it is delivered:
// should this process die before answering, whoever serves the session
// next answers it (see package proxy/attach). A request that changes nothing and is
// alone on its line is kept whole, to be sent again.
func (sv *stdioServer) note(msg *Message, line []byte, group uint64) error {
	j := sv.out.j
	if j == nil {
		return nil
	}
	return j.Track(msg.ID, msg.Method, line, j.LineEndPos(), group, line != nil && relayResendable[msg.Method])
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
	keys  []string // a batch's requests' id keys
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
	if owed {
		return c.main.writeAnswer(msg, []string{key})
	}
	return c.main.WriteMessage(msg)
}

// forgetRequest settles a request the agent cancelled: it is owed no
// response.
func (c *stdioCollector) forgetRequest(id json.RawMessage) {
	key := frontIDKey(id)
	c.mu.Lock()
	paid := !c.done && c.await.pay(key)
	c.mu.Unlock()
	if paid {
		c.main.untrack(key)
	}
}

// finish answers every request still owed with an internal error and, for a
// batch, writes the array of responses.
func (c *stdioCollector) finish() {
	c.mu.Lock()
	c.done = true
	var unpaid [][]byte
	var keys [][]string
	for _, id := range c.await.missing() {
		unpaid = append(unpaid, frontNoResponse(id))
		keys = append(keys, []string{frontIDKey(id)})
	}
	if c.hold {
		c.held = append(c.held, unpaid...)
		unpaid, keys = nil, nil
		if len(c.held) > 0 {
			unpaid, keys = [][]byte{stdioJoinArray(c.held)}, [][]string{c.keys}
		}
		c.held = nil
	}
	c.mu.Unlock()
	for i, m := range unpaid {
		if err := c.main.writeAnswer(m, keys[i]); err != nil {
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
	// j, when set, is the session's journal (an attached session whose
	// stdout the daemon writes itself): every message is recorded there
	// as it goes out, through wf, w's write that reports each write(2).
	j  Journal
	wf func(p []byte, wrote func(int)) (int, error)

	mu     sync.Mutex
	closed bool
	err    error
	buf    []byte
}

// WriteMessage is safe for concurrent use. It returns ErrOutboundClosed once
// ServeStdio is returning, and the first write error from then on.
func (o *stdioWriter) WriteMessage(msg []byte) error { return o.writeAnswer(msg, nil) }

// writeAnswer is WriteMessage for a message that answers the requests of
// id keys (one, or a batch's).
func (o *stdioWriter) writeAnswer(msg []byte, keys []string) error {
	line, err := frontCompact(msg)
	if err != nil {
		return fmt.Errorf("stdio: %w", err)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(line) > stdioCopyMax {
		// A large message is not copied to be followed by its line
		// break: the break goes in a write of its own.
		return o.writeLocked(line, stdioNewline, keys)
	}
	o.buf = append(append(o.buf[:0], line...), '\n')
	return o.writeLocked(o.buf, nil, keys)
}

// stdioCopyMax is the longest message that stdioWriter copies to append
// its line break, so that it goes out in one write(2) (whole, to a pipe,
// up to 4 KiB); a longer one is written as it is, and the line break
// after it.
const stdioCopyMax = 64 << 10

var stdioNewline = []byte{'\n'}

// untrack forgets a request that is owed no answer (the agent cancelled
// it).
func (o *stdioWriter) untrack(key string) {
	if o.j != nil {
		o.j.Untrack(key)
	}
}

// writeLine writes line, one whole message that is already one valid line
// and ends with its line break, as it is.
func (o *stdioWriter) writeLine(line []byte) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.writeLocked(line, nil, nil)
}

// writeLocked writes b and then tail, one message that answers the
// requests of keys, with o.mu held: nothing once the writer is closed or
// broken, and the first write error breaks it.
func (o *stdioWriter) writeLocked(b, tail []byte, keys []string) error {
	if o.closed {
		return ErrOutboundClosed
	}
	if o.err != nil {
		return o.err
	}
	var err error
	if o.j != nil {
		ref, slots := o.j.Answering(keys)
		o.j.BeginOut(len(b)+len(tail), ref)
		_, err = o.wf(b, o.j.Wrote)
		if err == nil && len(tail) > 0 {
			_, err = o.wf(tail, o.j.Wrote)
		}
		o.j.EndOut(slots, err == nil)
	} else {
		_, err = o.w.Write(b)
		if err == nil && len(tail) > 0 {
			_, err = o.w.Write(tail)
		}
	}
	if err != nil {
		o.err = fmt.Errorf("stdio: writing to the agent: %w", err)
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
