package attach

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/foldproxy/foldproxy/policy/jsonrpc"
	"github.com/foldproxy/foldproxy/policy/jsonscan"
	"github.com/foldproxy/foldproxy/proxy"
)

// RelayOptions configure Relay.
type RelayOptions struct {
	// Dial connects to the daemon's socket, starting a daemon when none
	// answers. It is called again after the daemon went away.
	Dial func(ctx context.Context) (net.Conn, error)
	// WaitExit waits until the daemon that said it is exiting is gone.
	WaitExit func(ctx context.Context) error
	// Config is sent in the hello (Hello.Config).
	Config string
	// MaxMessageBytes bounds one line from the agent (0: the default).
	MaxMessageBytes int64
	// Stderr receives the daemon's log records.
	Stderr io.Writer
	Logger *slog.Logger
	// PassFDs offers the daemon the agent's stdin and stdout, so that it
	// reads and writes them itself and the relay only waits (Linux, when
	// they are pipes or sockets; see attachFDs). Without it, or where the
	// daemon does not take them, the relay relays every line.
	PassFDs bool
}

type relayPending struct {
	id     json.RawMessage
	method string
	line   []byte
	seq    int
}

type relayLost struct {
	gen     int
	exiting bool
}

// Relay copies JSON-RPC lines between an agent (stdin, stdout) and a
// foldproxy daemon, as one session. When the daemon goes away (killed, or
// stopped) it connects again, a new daemon being started by Dial, and
// resumes the same session: branches and everything the agent was told
// survive. Requests in flight at that moment are sent again when they
// change nothing (initialize, ping, lists) and answered with an error
// otherwise. Relay returns nil when stdin ends and the daemon has answered
// what was in flight.
//
// Each direction is one goroutine that copies lines as they come, as a
// plain byte relay does: the daemon validates what the agent sends, and
// what the daemon sends is already one valid line; the relay reads no more
// of a message than its id (and a request's method), for its bookkeeping.
func Relay(ctx context.Context, stdin io.Reader, stdout io.Writer, opts RelayOptions) error {
	if opts.Dial == nil {
		return errors.New("relay: RelayOptions.Dial is required")
	}
	if opts.MaxMessageBytes <= 0 {
		opts.MaxMessageBytes = proxy.DefaultMaxMessageBytes
	}
	if opts.Stderr == nil {
		opts.Stderr = io.Discard
	}
	// Pipes and sockets are read and written through the poller by raw
	// system calls (rawio_unix.go); restored last, once the rest is done.
	orig := proxy.PollablePipes(stdin, stdout)
	pp := orig // replaced by new duplicates when the pipes come back
	r := &relay{opts: opts, log: discardIfNil(opts.Logger), out: proxy.NewLineWriter(pp.Out),
		pending: make(map[string]*relayPending), lost: make(chan relayLost, 4)}
	defer func() {
		pp.Drop()
		// Not while a daemon may still read them: its reads, made
		// non-blocking, would block where nothing can end them.
		if !r.pipesLent {
			orig.Restore()
		}
	}()
	var carry []byte
	if opts.PassFDs && fdPassing && pp.InFile != nil && pp.OutFile != nil {
		var done bool
		var err error
		if carry, done, err = r.attachFDs(ctx, stdin, stdout, &pp); done {
			return err
		}
	}
	if r.conn == nil {
		if err := r.connect(ctx); err != nil {
			return err
		}
	}
	defer func() {
		r.connMu.Lock()
		r.conn.Close()
		r.connMu.Unlock()
	}()
	r.stopRead = make(chan struct{})
	defer close(r.stopRead)
	in := pp.In
	if len(carry) > 0 {
		// What a daemon that served the agent's pipes itself read and did
		// not handle comes first.
		in = io.MultiReader(bytes.NewReader(carry), in)
	}
	go r.readAgent(in)
	for {
		select {
		case <-ctx.Done():
			r.finish()
			return ctx.Err()
		case <-r.out.Broken():
			return r.out.Failure()
		case ev := <-r.lost:
			if ev.gen != r.generation() {
				continue
			}
			if ev.exiting && opts.WaitExit != nil {
				if err := opts.WaitExit(ctx); err != nil {
					r.log.Warn("relay: the daemon said it was exiting but is still there", "err", err)
				}
			}
			if r.stdinDone.Load() {
				return nil
			}
			r.log.Info("relay: the foldproxy daemon went away; reconnecting")
			if err := r.connect(ctx); err != nil {
				return err
			}
		}
	}
}

// attachFDs serves the session by passing the agent's stdin and stdout to
// the daemon, with a journal of the session (journal.go), and waiting: the
// daemon reads and writes the pipes itself. When the daemon goes away
// without ending the session (killed, or stopped), the relay takes the
// pipes back: it ends a line to the agent cut short, answers the requests
// the daemon took and did not answer (those that change nothing it sends
// again), and passes everything, with what the daemon read and did not
// handle, to the next daemon, which it starts as a relay would.
//
// done is true when the session is over (the daemon ended it, or the
// relay stops), with the error to return. Otherwise the relay relays from
// then on: on r.conn when a daemon did not take the descriptors (r.conn nil
// when none was attached), after carry, the agent's input that is to be
// read before stdin.
//
// While the daemon holds the pipes, the relay drops its own duplicates of
// them (pp.drop), which would wake its poller at every message; it makes
// new ones (*pp) when it takes them back.
func (r *relay) attachFDs(ctx context.Context, stdin io.Reader, stdout io.Writer, pp *proxy.Pipes) (carry []byte, done bool, err error) {
	var input []byte
	for {
		jf, err := newJournalFile(r.opts.MaxMessageBytes, input, false)
		if err != nil {
			r.log.Info("relay: the session journal could not be made; relaying", "err", err)
			return input, false, nil
		}
		c, rw, w, br, err := r.dialHello(ctx, true)
		if err != nil {
			jf.Close()
			return nil, true, err
		}
		r.session = w.Session
		if !w.FDs {
			jf.Close()
			r.adopt(c, rw, w, br)
			return input, false, nil
		}
		if err := sendFDs(c, pp.InFile, pp.OutFile, jf.f); err != nil {
			// The daemon opens the session only once it has them.
			jf.Close()
			c.Close()
			r.log.Info("relay: passing the agent's pipes to the daemon failed; relaying", "err", err)
			return input, false, nil
		}
		pp.Drop()
		ended, failure, exiting := r.waitDaemon(ctx, c, br)
		c.Close()
		if exiting && r.opts.WaitExit != nil {
			if err := r.opts.WaitExit(ctx); err != nil {
				r.log.Warn("relay: the daemon said it was exiting but is still there", "err", err)
			}
		}
		switch {
		case ended && failure == nil && ctx.Err() != nil:
			jf.Close()
			return nil, true, ctx.Err() // stopped, as a relay that relays
		case ended:
			jf.Close()
			return nil, true, failure
		case ctx.Err() != nil:
			jf.Close()
			return nil, true, ctx.Err()
		}
		// The pipes are the relay's again.
		*pp = proxy.PollablePipes(stdin, stdout)
		if pp.InFile == nil || pp.OutFile == nil {
			jf.Close()
			return nil, true, errors.New("relay: the agent's pipes could not be taken back from the daemon that went away")
		}
		r.out = proxy.NewLineWriter(pp.Out)
		rec, err := jf.recover(isPipe(pp.OutFile))
		jf.Close()
		if err != nil {
			return nil, true, fmt.Errorf("relay: reading the session journal of the daemon that went away: %w", err)
		}
		r.log.Info("relay: the foldproxy daemon went away; taking the session to the next one",
			"unhandled_bytes", len(rec.input), "unanswered", len(rec.pending))
		if input, err = r.takeBack(*pp, rec); err != nil {
			return nil, true, err
		}
		if err := r.out.Failure(); err != nil {
			return nil, true, err
		}
	}
}

// waitDaemon copies the daemon's log records to stderr until the
// connection ends, and reports what the daemon said: the session ended
// (with failure when the agent's side failed), and it is exiting. When ctx
// ends, the relay hangs up (the daemon ends the session) and waits at most
// 10 seconds more.
func (r *relay) waitDaemon(ctx context.Context, c net.Conn, br *bufio.Reader) (ended bool, failure error, exiting bool) {
	lines := make(chan []byte)
	go func() {
		defer close(lines)
		for {
			line, err := br.ReadBytes('\n')
			if len(line) > 0 {
				lines <- line
			}
			if err != nil {
				return
			}
		}
	}()
	stop := ctx.Done()
	var deadline <-chan time.Time
	for {
		select {
		case <-stop:
			stop = nil
			closeWrite(c)
			t := time.NewTimer(10 * time.Second)
			defer t.Stop()
			deadline = t.C
		case <-deadline:
			// The daemon did not end the session in time: it may still
			// hold the agent's pipes.
			r.pipesLent = true
			c.Close()
			for range lines {
			}
			return true, ctx.Err(), exiting
		case line, ok := <-lines:
			if !ok {
				return ended, failure, exiting
			}
			msg := bytes.TrimRight(line, "\r\n")
			switch {
			case len(msg) > 0 && msg[0] == attachLogPrefix:
				_, _ = r.opts.Stderr.Write(append(msg[1:], '\n'))
			case string(msg) == attachExiting:
				exiting = true
			case string(msg) == attachEnded:
				ended = true
			case bytes.HasPrefix(msg, []byte(attachFailed)):
				ended, failure = true, errors.New(string(msg[len(attachFailed):]))
			}
		}
	}
}

// takeBack deals with what the journal of a daemon that went away holds
// (rec): a line to the agent cut short is ended, the requests it took and
// did not answer are answered with an error, but those that change nothing
// and are alone on their line, which it returns to be sent again, before
// what the daemon read and did not handle. A line too long that the daemon
// was dropping is dropped to its end (reading stdin on) and refused.
func (r *relay) takeBack(pp proxy.Pipes, rec journalRecovery) ([]byte, error) {
	if rec.mend {
		if err := r.out.WriteLine([]byte{'\n'}); err != nil {
			return nil, err
		}
	}
	var again []byte
	batches := map[uint64][][]byte{}
	var order []uint64
	for _, p := range rec.pending {
		if p.group == 0 && p.line != nil && proxy.Resendable(p.method) {
			again = append(append(again, p.line...), '\n')
			continue
		}
		msg := proxy.Response(p.id, nil, proxy.Errorf(proxy.CodeInternalError,
			"foldproxy's daemon stopped while handling %s; it may or may not have been carried out: check before retrying", p.method))
		if p.group == 0 {
			r.write(msg)
			continue
		}
		if _, ok := batches[p.group]; !ok {
			order = append(order, p.group)
		}
		batches[p.group] = append(batches[p.group], msg)
	}
	for _, g := range order {
		r.write(proxy.JoinArray(batches[g]))
	}
	input := rec.input
	if rec.discarding {
		buf := make([]byte, 64<<10)
		i := bytes.IndexByte(input, '\n')
		for i < 0 {
			n, err := pp.In.Read(buf)
			if err != nil {
				input, i = nil, -1
				break
			}
			input = buf[:n]
			i = bytes.IndexByte(input, '\n')
		}
		if i >= 0 {
			input = input[i+1:]
		}
		r.write(proxy.Response(nil, nil, proxy.Errorf(proxy.CodeMessageTooLarge,
			"message too large: a message may be at most %d bytes (maxMessageBytes)", r.opts.MaxMessageBytes)))
	}
	return append(again, input...), nil
}

// readAgent reads the agent's lines and sends each to the daemon, until
// stdin ends; then it closes the connection for writing: the daemon
// answers what is in flight, ends the session and closes, and the loop
// ends when the connection does.
func (r *relay) readAgent(stdin io.Reader) {
	br := bufio.NewReaderSize(stdin, 64<<10)
	for {
		line, tooLarge, err := proxy.ReadLine(br, r.opts.MaxMessageBytes)
		select {
		case <-r.stopRead:
			return
		default:
		}
		if tooLarge {
			r.write(proxy.Response(nil, nil, proxy.Errorf(proxy.CodeMessageTooLarge,
				"message too large: a message may be at most %d bytes (maxMessageBytes)", r.opts.MaxMessageBytes)))
		} else if len(bytes.TrimSpace(line)) > 0 {
			r.forward(line)
		}
		if err != nil {
			r.connMu.Lock()
			r.stdinDone.Store(true)
			closeWrite(r.conn)
			r.connMu.Unlock()
			return
		}
	}
}

// closeWrite closes c for writing, or altogether when it cannot.
func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	} else {
		_ = c.Close()
	}
}

// finish ends the session when the relay is stopped (SIGTERM) rather than
// by the end of stdin: the daemon ends the session, and when it was its
// last, the relay waits (bounded) for the daemon to be gone, so that whoever
// stopped the relay finds the state folder released once it has exited.
func (r *relay) finish() {
	r.connMu.Lock()
	if !r.stdinDone.Load() {
		closeWrite(r.conn)
	}
	r.connMu.Unlock()
	t := time.NewTimer(10 * time.Second)
	defer t.Stop()
	for {
		select {
		case ev := <-r.lost:
			if ev.gen != r.generation() {
				continue
			}
			if ev.exiting && r.opts.WaitExit != nil {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_ = r.opts.WaitExit(ctx)
				cancel()
			}
			return
		case <-t.C:
			return
		}
	}
}

type relay struct {
	opts RelayOptions
	log  *slog.Logger
	out  *proxy.LineWriter

	// connMu guards the connection, which the loop replaces when the
	// daemon went away while the agent's reader writes to it: a request
	// is noted pending and sent under it, and a new connection is set
	// and sent what is pending under it, so that each request reaches
	// the new daemon or is answered.
	// pipesLent: a daemon the relay gave the agent's pipes to may still
	// hold them as the relay returns (it did not end the session in
	// time when the relay was stopped).
	pipesLent bool

	connMu    sync.Mutex
	conn      net.Conn
	connW     io.Writer // conn's writer (rawConnIO)
	gen       int
	stdinDone atomic.Bool // stdin has ended; set under connMu
	session   string
	lost      chan relayLost
	stopRead  chan struct{}

	mu      sync.Mutex
	pending map[string]*relayPending
	seq     int
}

func (r *relay) generation() int {
	r.connMu.Lock()
	defer r.connMu.Unlock()
	return r.gen
}

// connect attaches to the daemon, with the session id once there is one,
// and deals with the requests the previous daemon left unanswered.
func (r *relay) connect(ctx context.Context) error {
	c, rw, w, br, err := r.dialHello(ctx, false)
	if err != nil {
		return err
	}
	r.adopt(c, rw, w, br)
	return nil
}

// dialHello connects to the daemon and says hello, offering the agent's
// descriptors with fds, until a daemon welcomes the session.
func (r *relay) dialHello(ctx context.Context, fds bool) (net.Conn, io.ReadWriter, Welcome, *bufio.Reader, error) {
	var lastErr error
	for attempt := 0; ; attempt++ {
		if ctx.Err() != nil {
			return nil, nil, Welcome{}, nil, ctx.Err()
		}
		if attempt >= 50 {
			return nil, nil, Welcome{}, nil, fmt.Errorf("relay: could not attach to a foldproxy daemon: %w", lastErr)
		}
		c, err := r.opts.Dial(ctx)
		if err != nil {
			return nil, nil, Welcome{}, nil, err
		}
		rw := proxy.RawConnIO(c)
		w, br, err := r.hello(c, rw, fds)
		if err != nil {
			c.Close()
			lastErr = err
			continue
		}
		if w.Error != "" {
			c.Close()
			if !w.Exiting {
				return nil, nil, Welcome{}, nil, errors.New(w.Error)
			}
			lastErr = errors.New(w.Error)
			if r.opts.WaitExit != nil {
				_ = r.opts.WaitExit(ctx)
			}
			continue
		}
		return c, rw, w, br, nil
	}
}

// adopt relays on c, which a daemon welcomed: the daemon's lines are
// copied to the agent, and the requests the previous daemon left
// unanswered are dealt with.
func (r *relay) adopt(c net.Conn, rw io.ReadWriter, w Welcome, br *bufio.Reader) {
	r.connMu.Lock()
	defer r.connMu.Unlock()
	if r.conn != nil {
		r.conn.Close()
	}
	r.conn = c
	r.connW = rw
	r.gen++
	r.session = w.Session
	go r.readDaemon(br, r.gen)
	r.replay()
	if r.stdinDone.Load() {
		closeWrite(c)
	}
}

// hello sends the hello on c and reads the welcome from rw, c's reader, on
// which the returned reader goes on.
func (r *relay) hello(c net.Conn, rw io.Reader, fds bool) (Welcome, *bufio.Reader, error) {
	b, _ := json.Marshal(Hello{Version: Version, Session: r.session, Config: r.opts.Config, FDs: fds})
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	defer c.SetDeadline(time.Time{})
	if _, err := c.Write(append(b, '\n')); err != nil {
		return Welcome{}, nil, fmt.Errorf("sending the attach hello: %w", err)
	}
	br := bufio.NewReaderSize(rw, 64<<10)
	line, _, err := proxy.ReadLine(br, attachHelloMax)
	if len(line) == 0 && err != nil {
		return Welcome{}, nil, fmt.Errorf("reading the daemon's welcome: %w", err)
	}
	var w Welcome
	if json.Unmarshal(line, &w) != nil || (w.Session == "" && w.Error == "") {
		return Welcome{}, nil, fmt.Errorf("the daemon's welcome is not valid: %.200q", line)
	}
	return w, br, nil
}

// replay sends again, in their order, the requests the previous daemon did
// not answer and that change nothing, and answers the others with an error.
func (r *relay) replay() {
	r.mu.Lock()
	list := make([]*relayPending, 0, len(r.pending))
	for _, p := range r.pending {
		list = append(list, p)
	}
	r.mu.Unlock()
	if len(list) == 0 {
		return
	}
	for i := 1; i < len(list); i++ {
		for j := i; j > 0 && list[j].seq < list[j-1].seq; j-- {
			list[j], list[j-1] = list[j-1], list[j]
		}
	}
	for _, p := range list {
		if proxy.Resendable(p.method) {
			r.send(p.line)
			continue
		}
		r.mu.Lock()
		delete(r.pending, jsonrpc.IDKey(p.id))
		r.mu.Unlock()
		r.write(proxy.Response(p.id, nil, proxy.Errorf(proxy.CodeInternalError,
			"foldproxy's daemon stopped while handling %s; it may or may not have been carried out: check before retrying", p.method)))
	}
}

// forward sends one line from the agent to the daemon, noting the requests
// it carries.
func (r *relay) forward(line []byte) {
	r.connMu.Lock()
	defer r.connMu.Unlock()
	if id, method, ok := relayRequestOf(line); ok {
		r.note(id, method, line)
	} else if line = bytes.TrimSpace(line); len(line) > 0 && line[0] == '[' {
		for _, msg := range proxy.Requests(line) {
			r.note(msg.ID, msg.Method, line)
		}
	}
	r.send(line)
}

// note records a request as pending until the daemon answers it.
func (r *relay) note(id json.RawMessage, method string, line []byte) {
	r.mu.Lock()
	r.seq++
	r.pending[jsonrpc.IDKey(id)] = &relayPending{id: bytes.Clone(id), method: method, line: bytes.Clone(line), seq: r.seq}
	r.mu.Unlock()
}

// relayRequestOf returns the id and method of line when it is a single
// request whose id is a string or a number, read as the daemon reads it
// (of repeated members the last counts) but without decoding it: the
// daemon validates the message, and answers an invalid one with an error
// that carries this id, which settles it here too.
func relayRequestOf(line []byte) (id json.RawMessage, method string, ok bool) {
	members, err := jsonscan.Object(line)
	if err != nil {
		return nil, "", false
	}
	var rawMethod []byte
	for _, m := range members {
		switch m.Key {
		case "id":
			id = m.Value.Of(line)
		case "method":
			rawMethod = m.Value.Of(line)
		}
	}
	if len(id) == 0 || len(rawMethod) == 0 || rawMethod[0] != '"' {
		return nil, "", false
	}
	switch id[0] {
	case '"', '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
	default:
		return nil, "", false
	}
	if method, err = jsonscan.Unquote(rawMethod); err != nil || method == "" {
		return nil, "", false
	}
	return id, method, true
}

// send writes one line to the daemon; the caller holds connMu. A failed
// write is not an error here: the reader sees the connection end and the
// loop reconnects.
func (r *relay) send(line []byte) {
	// One write for the line and its line break; line is the relay's own
	// copy (read from stdin, or noted), so it may be extended in place.
	if _, err := r.connW.Write(append(line, '\n')); err != nil {
		r.log.Debug("relay: writing to the daemon", "err", err)
	}
}

func (r *relay) write(msg []byte) {
	if err := r.out.WriteMessage(msg); err != nil && !errors.Is(err, proxy.ErrOutboundClosed) {
		r.log.Debug("relay: writing to the agent", "err", err)
	}
}

// readDaemon copies the daemon's lines to the agent until the connection
// ends, then reports it.
func (r *relay) readDaemon(br *bufio.Reader, gen int) {
	exiting := false
	defer func() { r.lost <- relayLost{gen: gen, exiting: exiting} }()
	var long []byte
	for {
		frag, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			long = append(long, frag...)
			continue
		}
		// A line that fits the reader's buffer is used in place, until
		// the next read.
		line := frag
		if long != nil {
			line = append(long, frag...)
		}
		msg := bytes.TrimRight(line, "\r\n")
		switch {
		case len(msg) == 0:
		case msg[0] == attachLogPrefix:
			_, _ = r.opts.Stderr.Write(append(bytes.Clone(msg[1:]), '\n'))
		case string(msg) == attachExiting:
			exiting = true
		default:
			if key, isResp, _ := proxy.Classify(msg); isResp {
				r.mu.Lock()
				delete(r.pending, key)
				r.mu.Unlock()
			} else if msg[0] == '[' {
				r.settleBatch(msg)
			}
			// The daemon wrote the message as one valid line (its
			// stdio front compacts and validates): it goes to the agent
			// as it came, with its line break, in one write.
			if len(msg)+1 <= len(line) && line[len(msg)] == '\n' {
				r.writeLine(line[:len(msg)+1])
			} else {
				r.writeLine(append(bytes.Clone(msg), '\n'))
			}
		}
		if cap(long) > 1<<20 {
			long = nil
		} else if long != nil {
			long = long[:0]
		}
		if err != nil {
			return
		}
	}
}

// writeLine writes one line from the daemon to the agent.
func (r *relay) writeLine(line []byte) {
	if err := r.out.WriteLine(line); err != nil && !errors.Is(err, proxy.ErrOutboundClosed) {
		r.log.Debug("relay: writing to the agent", "err", err)
	}
}

// settleBatch forgets the requests answered by a batch response.
func (r *relay) settleBatch(msg []byte) {
	var items []json.RawMessage
	if json.Unmarshal(msg, &items) != nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, it := range items {
		if key, isResp, _ := proxy.Classify(it); isResp {
			delete(r.pending, key)
		}
	}
}
