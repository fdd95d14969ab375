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
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/foldproxy/foldproxy/policy/jsonscan"
)

// The attach front lets any number of stdio processes of one project share
// one foldproxy: the daemon, which owns the state store and the upstream
// processes, serves each attached process as its own session over a unix
// socket in the state folder, and each stdio process that an agent starts is
// a thin relay of JSON-RPC lines between its stdin/stdout and that socket.
//
// The protocol on the socket is newline-delimited: the relay sends one
// AttachHello line, the daemon answers one AttachWelcome line, and from then
// on each side writes whole JSON-RPC messages, one per line, exactly as
// over stdio. The daemon also writes two kinds of lines that are not
// JSON-RPC: "#" followed by one of its log records, which the relay copies
// to its stderr, and "!exiting", which says the daemon stops once this
// connection ends (its last session ended), so that the relay waits for it
// to be gone before exiting itself.

// TransportAttach is the transport recorded for sessions of attached stdio
// processes. Unlike plain stdio sessions they resume after a restart of the
// daemon: the relay keeps the session id and presents it again.
const TransportAttach = "attach"

// AttachVersion is the attach protocol's version.
const AttachVersion = 1

// AttachHello is the first line a relay sends.
type AttachHello struct {
	Version int `json:"foldproxyAttach"`
	// Session is the id to resume; empty for a new session.
	Session string `json:"session,omitempty"`
	// Config identifies the configuration the relay was started with; the
	// daemon refuses a relay whose configuration differs from its own.
	Config string `json:"config"`
	// Hold asks for no session: the connection only keeps the daemon up
	// while it is open ("foldproxy run" holds one for the agent's life,
	// so that an agent whose MCP servers start late, or that has none,
	// keeps its model endpoint). Nothing is written to it after the
	// welcome, log records included.
	Hold bool `json:"hold,omitempty"`
	// FDs offers the agent's stdin and stdout, and the session's journal,
	// for the daemon to serve the session on itself (see attachFDs).
	FDs bool `json:"fds,omitempty"`
}

// AttachWelcome is the daemon's answer to a hello.
type AttachWelcome struct {
	Session string `json:"session,omitempty"`
	PID     int    `json:"pid,omitempty"`
	// HTTP is the address on which the daemon serves HTTP (the model
	// front, /mcp, /ui), "" when it serves none.
	HTTP string `json:"http,omitempty"`
	// Error refuses the attachment; Exiting says it is refused because the
	// daemon is stopping, so that a new one may be started.
	Error   string `json:"error,omitempty"`
	Exiting bool   `json:"exiting,omitempty"`
	// FDs takes the descriptors a hello offered: the relay sends them
	// next, and relays nothing.
	FDs bool `json:"fds,omitempty"`
}

const (
	attachLogPrefix = '#'
	attachExiting   = "!exiting"
	// attachEnded says that the session of a relay whose descriptors the
	// daemon took is over (the agent closed stdin, or the relay hung up):
	// the relay exits. attachFailed, followed by a reason, says it ended
	// because the agent's side failed (its stdout closed): the relay exits
	// with that error. A connection that ends without either leaves the
	// session to the relay, which takes it to the next daemon.
	attachEnded    = "!ended"
	attachFailed   = "!failed "
	attachHelloMax = 64 << 10
)

// AttachOptions configure an AttachServer.
type AttachOptions struct {
	// Config is the identity of the daemon's configuration (see
	// AttachHello.Config).
	Config string
	// MaxMessageBytes bounds one message from an agent (0: the default).
	MaxMessageBytes int64
	Logger          *slog.Logger
	// CheckPeer, when set, vets each connection before anything is read
	// from it (the daemon checks that the peer runs as the same user).
	CheckPeer func(net.Conn) error
	// IdleExit makes Serve return once no process has been attached for
	// this long, 0 meaning as soon as the last one detaches; negative:
	// never (a daemon that also serves HTTP). FirstWait bounds the wait
	// for the first attachment (default 30s).
	IdleExit  time.Duration
	FirstWait time.Duration
	// HTTP, when set, returns the address told to every process that
	// attaches (AttachWelcome.HTTP); "" while there is none.
	HTTP func() string
	// HoldReady, when set, is waited for before a holding connection is
	// welcomed (the daemon waits, bounded, for its upstreams), so that the
	// agent "foldproxy run" starts next finds every tool listed at once.
	HoldReady func(ctx context.Context)
}

// AttachServer serves attached stdio processes. Its Write method copies a
// log record to every attached relay, so that it can be a log handler's
// writer.
type AttachServer struct {
	ep   *Server
	opts AttachOptions
	log  *slog.Logger

	mu      sync.Mutex
	conns   map[*attachConn]bool
	exiting bool
	idle    *time.Timer
	stop    context.CancelFunc
	wg      sync.WaitGroup
}

type attachConn struct {
	c  net.Conn
	rw io.ReadWriter // c's reader and writer (rawConnIO)
	mu sync.Mutex    // one writer at a time
	// torn: a log record's write was cut short by its deadline; its line
	// is ended before anything else is written (under mu).
	torn bool
	// hold: the connection holds the daemon up and serves no session
	// (AttachHello.Hold); nothing is written to it after the welcome.
	hold bool
}

func (a *attachConn) Write(p []byte) (int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.mendLocked(); err != nil {
		return 0, err
	}
	return a.rw.Write(p)
}

// mendLocked ends the line of a log record cut short, so that what comes
// next is a line of its own and not taken for the rest of the record.
func (a *attachConn) mendLocked() error {
	if !a.torn {
		return nil
	}
	if _, err := a.rw.Write([]byte{'\n'}); err != nil {
		return err
	}
	a.torn = false
	return nil
}

// NewAttachServer returns an attach front for ep.
func NewAttachServer(ep *Server, opts AttachOptions) *AttachServer {
	if opts.FirstWait <= 0 {
		opts.FirstWait = 30 * time.Second
	}
	return &AttachServer{ep: ep, opts: opts, log: frontLogger(opts.Logger), conns: make(map[*attachConn]bool)}
}

// Write copies one log record to every attached relay. A relay that is
// busy receiving a message misses the record rather than holding up the
// daemon's logging, and one that does not read for 100 ms gets it cut
// short (its line is ended before the next message).
func (a *AttachServer) Write(p []byte) (int, error) {
	line := make([]byte, 0, len(p)+2)
	line = append(line, attachLogPrefix)
	line = append(line, bytes.TrimRight(p, "\n")...)
	line = append(line, '\n')
	a.mu.Lock()
	conns := make([]*attachConn, 0, len(a.conns))
	for c, welcomed := range a.conns {
		if welcomed && !c.hold {
			conns = append(conns, c)
		}
	}
	a.mu.Unlock()
	for _, c := range conns {
		if c.mu.TryLock() {
			_ = c.c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
			if c.mendLocked() == nil {
				if n, err := c.rw.Write(line); err != nil && n > 0 {
					c.torn = true
				}
			}
			_ = c.c.SetWriteDeadline(time.Time{})
			c.mu.Unlock()
		}
	}
	return len(p), nil
}

// Attached returns how many processes are attached.
func (a *AttachServer) Attached() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.conns)
}

// Serve accepts attachments on ln until ctx ends or, with IdleExit, the
// daemon has been idle; then it stops accepting, detaches the sessions
// still attached (they stay in the store, to be resumed by the next
// daemon) and returns once every connection is finished.
func (a *AttachServer) Serve(ctx context.Context, ln net.Listener) error {
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	a.mu.Lock()
	a.stop = stop
	if a.opts.IdleExit >= 0 {
		a.idle = time.AfterFunc(a.opts.FirstWait, a.idleOver)
	}
	a.mu.Unlock()
	go func() {
		<-ctx.Done()
		_ = ln.Close()
	}()
	var err error
	for {
		c, aerr := ln.Accept()
		if aerr != nil {
			if ctx.Err() == nil {
				err = fmt.Errorf("attach: accepting: %w", aerr)
			}
			break
		}
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			a.handle(ctx, c)
		}()
	}
	stop()
	a.wg.Wait()
	a.mu.Lock()
	if a.idle != nil {
		a.idle.Stop()
	}
	a.mu.Unlock()
	return err
}

// idleOver stops the server if nothing is attached.
func (a *AttachServer) idleOver() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.conns) == 0 && !a.exiting {
		a.exiting = true
		a.stop()
	}
}

func (a *AttachServer) handle(ctx context.Context, c net.Conn) {
	defer c.Close()
	if a.opts.CheckPeer != nil {
		if err := a.opts.CheckPeer(c); err != nil {
			a.log.Warn("attach: connection refused", "err", err)
			return
		}
	}
	// The relay's lines are read, and the daemon's written, by raw system
	// calls through the poller (rawio_unix.go).
	ac := &attachConn{c: c, rw: rawConnIO(c)}
	br := bufio.NewReaderSize(ac.rw, 64<<10)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	line, tooLarge, err := stdioReadLine(br, attachHelloMax)
	_ = c.SetReadDeadline(time.Time{})
	welcome := func(w AttachWelcome) error {
		b, _ := json.Marshal(w)
		_, err := ac.Write(append(b, '\n'))
		return err
	}
	var hello AttachHello
	switch {
	case err != nil && len(line) == 0:
		return
	case tooLarge || json.Unmarshal(line, &hello) != nil || hello.Version == 0:
		_ = welcome(AttachWelcome{Error: "not a foldproxy attach hello"})
		return
	case hello.Version != AttachVersion:
		_ = welcome(AttachWelcome{Error: fmt.Sprintf("attach protocol %d is not %d: this foldproxy binary differs from the daemon's; stop the daemon (pid %d) and start again", hello.Version, AttachVersion, os.Getpid())})
		return
	case hello.Config != a.opts.Config:
		_ = welcome(AttachWelcome{Error: fmt.Sprintf("the foldproxy daemon (pid %d) on this state folder runs another configuration (%s, not %s); it stops when its sessions end, or stop it now with kill %d", os.Getpid(), a.opts.Config, hello.Config, os.Getpid())})
		return
	}
	a.mu.Lock()
	if a.exiting {
		a.mu.Unlock()
		_ = welcome(AttachWelcome{Error: "the foldproxy daemon is stopping", Exiting: true})
		return
	}
	if a.idle != nil {
		a.idle.Stop()
	}
	a.conns[ac] = false
	a.mu.Unlock()

	if hello.Hold {
		a.hold(ctx, ac, br)
		return
	}
	id := hello.Session
	if id == "" {
		id = newID("s")
	}
	takeFDs := hello.FDs && fdPassing && br.Buffered() == 0
	if welcome(AttachWelcome{Session: id, PID: os.Getpid(), HTTP: a.httpAddr(), FDs: takeFDs}) != nil {
		a.detachConn(ac, false)
		return
	}
	a.mu.Lock()
	a.conns[ac] = true
	a.mu.Unlock()
	a.log.Info("process attached", "session", id, "resumed", hello.Session != "", "fds", takeFDs, "attached", a.Attached())
	if takeFDs {
		a.serveFDs(ctx, ac, id)
		return
	}
	// br goes on with what it read past the hello; a read still waiting
	// when the session is over ends when the connection is closed.
	err = ServeStdio(ctx, a.ep, br, ac, StdioOptions{
		MaxMessageBytes: a.opts.MaxMessageBytes, Logger: a.log,
		SessionID: id, Transport: TransportAttach, Detach: true,
	})
	if err != nil && !errors.Is(err, context.Canceled) {
		a.log.Info("attached process", "session", id, "err", err)
	}
	a.detachConn(ac, ctx.Err() == nil)
}

// httpAddr is the HTTP address to tell an attaching process.
func (a *AttachServer) httpAddr() string {
	if a.opts.HTTP == nil {
		return ""
	}
	return a.opts.HTTP()
}

// hold keeps a holding connection (AttachHello.Hold) counted as attached
// until its peer closes it or the server stops; whatever the peer sends is
// read and dropped.
func (a *AttachServer) hold(ctx context.Context, ac *attachConn, br *bufio.Reader) {
	// Marked before the welcome: once the peer has read it, no log
	// record is written to the connection.
	a.mu.Lock()
	ac.hold = true
	a.conns[ac] = true
	a.mu.Unlock()
	if a.opts.HoldReady != nil {
		a.opts.HoldReady(ctx)
	}
	b, _ := json.Marshal(AttachWelcome{PID: os.Getpid(), HTTP: a.httpAddr()})
	if _, err := ac.Write(append(b, '\n')); err != nil {
		a.detachConn(ac, false)
		return
	}
	a.log.Info("process holding the daemon", "attached", a.Attached())
	stop := context.AfterFunc(ctx, func() { _ = ac.c.SetReadDeadline(time.Now()) })
	defer stop()
	_, _ = io.Copy(io.Discard, br)
	a.detachConn(ac, false)
}

// serveFDs serves session id on the agent's stdin and stdout, which the
// relay on ac passes next with the session's journal: the daemon reads and
// writes the agent's pipes itself, and the relay only waits. The session
// ends as over stdio when stdin does, or when the relay hangs up; when
// the daemon stops, the session is left in the store and the pipes to the
// relay, which goes on with the next daemon from what the journal holds.
func (a *AttachServer) serveFDs(ctx context.Context, ac *attachConn, id string) {
	max := a.opts.MaxMessageBytes
	if max <= 0 {
		max = DefaultMaxMessageBytes
	}
	p, err := receiveSession(ac.c, max)
	if err != nil {
		// Before the session was opened: nothing to detach in the store.
		a.log.Warn("attach: the relay's descriptors", "session", id, "err", err)
		a.detachConn(ac, false)
		return
	}
	// The relay says nothing more: the connection ending is its hangup.
	hangup := make(chan struct{})
	go func() {
		defer close(hangup)
		var b [256]byte
		for {
			if _, err := ac.rw.Read(b[:]); err != nil {
				return
			}
		}
	}()
	w := &stdioWriter{w: p.out, wf: p.write, j: p.j, broken: make(chan struct{})}
	err = serveStdio(ctx, a.ep, &journalSource{j: p.j, fill: p.read}, w, StdioOptions{
		MaxMessageBytes: max, Logger: a.log,
		SessionID: id, Transport: TransportAttach, Detach: true, hangup: hangup,
	})
	// The pipes go back to the relay only once nothing here can read or
	// write them: Close waits for a read or write in flight.
	p.j.release(func() { p.in.Close() }, p.unmap)
	p.out.Close()
	switch {
	case ctx.Err() != nil:
		// The daemon is stopping: the relay takes the session on.
		a.detachConn(ac, false)
	case err != nil && !errors.Is(err, context.Canceled):
		a.log.Info("attached process", "session", id, "err", err)
		_, _ = ac.Write([]byte(attachFailed + oneLine(err.Error()) + "\n"))
		a.detachConn(ac, true)
	default:
		_, _ = ac.Write([]byte(attachEnded + "\n"))
		a.detachConn(ac, true)
	}
}

// attachedPipes are what a relay passes to the daemon: the agent's stdin
// and stdout (read and written through the poller by read, which calls got
// as soon as read(2) returns, and write, which calls wrote after each
// write(2)), and the session's journal, mapped.
type attachedPipes struct {
	in, out *os.File
	read    func(p []byte, got func(int)) (int, error)
	write   func(p []byte, wrote func(int)) (int, error)
	j       *journal
	unmap   func()
}

// oneLine returns s with its line breaks made spaces.
func oneLine(s string) string { return strings.NewReplacer("\n", " ", "\r", " ").Replace(s) }

// detachConn forgets a connection. When it was the last one and the
// daemon exits when idle, the relay is told so before its connection
// closes.
func (a *AttachServer) detachConn(ac *attachConn, tell bool) {
	a.mu.Lock()
	delete(a.conns, ac)
	n := len(a.conns)
	last := n == 0 && a.opts.IdleExit >= 0 && !a.exiting
	if last && a.opts.IdleExit == 0 {
		a.exiting = true
		a.stop()
	} else if last {
		a.idle = time.AfterFunc(a.opts.IdleExit, a.idleOver)
	}
	exiting := a.exiting
	a.mu.Unlock()
	a.log.Info("process detached", "attached", n)
	if tell && exiting {
		_, _ = ac.Write([]byte(attachExiting + "\n"))
	}
}

// RelayOptions configure Relay.
type RelayOptions struct {
	// Dial connects to the daemon's socket, starting a daemon when none
	// answers. It is called again after the daemon went away.
	Dial func(ctx context.Context) (net.Conn, error)
	// WaitExit waits until the daemon that said it is exiting is gone.
	WaitExit func(ctx context.Context) error
	// Config is sent in the hello (AttachHello.Config).
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

// relayResendable are the requests that a relay sends again to a new
// daemon when the old one went away before answering: they change nothing.
// Any other request is answered with an error that says it may or may not
// have been carried out.
var relayResendable = map[string]bool{
	"initialize": true, "ping": true, "tools/list": true, "prompts/list": true,
	"resources/list": true, "resources/templates/list": true,
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
		opts.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if opts.Stderr == nil {
		opts.Stderr = io.Discard
	}
	// Pipes and sockets are read and written through the poller by raw
	// system calls (rawio_unix.go); restored last, once the rest is done.
	orig := pollablePipes(stdin, stdout)
	pp := orig // replaced by new duplicates when the pipes come back
	r := &relay{opts: opts, log: frontLogger(opts.Logger), out: &stdioWriter{w: pp.out, broken: make(chan struct{})},
		pending: make(map[string]*relayPending), lost: make(chan relayLost, 4)}
	defer func() {
		pp.drop()
		// Not while a daemon may still read them: its reads, made
		// non-blocking, would block where nothing can end them.
		if !r.pipesLent {
			orig.restore()
		}
	}()
	var carry []byte
	if opts.PassFDs && fdPassing && pp.inFile != nil && pp.outFile != nil {
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
	in := pp.in
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
		case <-r.out.broken:
			return r.out.failure()
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
func (r *relay) attachFDs(ctx context.Context, stdin io.Reader, stdout io.Writer, pp *stdioPipes) (carry []byte, done bool, err error) {
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
		if err := sendFDs(c, pp.inFile, pp.outFile, jf.f); err != nil {
			// The daemon opens the session only once it has them.
			jf.Close()
			c.Close()
			r.log.Info("relay: passing the agent's pipes to the daemon failed; relaying", "err", err)
			return input, false, nil
		}
		pp.drop()
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
		*pp = pollablePipes(stdin, stdout)
		if pp.inFile == nil || pp.outFile == nil {
			jf.Close()
			return nil, true, errors.New("relay: the agent's pipes could not be taken back from the daemon that went away")
		}
		r.out = &stdioWriter{w: pp.out, broken: make(chan struct{})}
		rec, err := jf.recover(isPipe(pp.outFile))
		jf.Close()
		if err != nil {
			return nil, true, fmt.Errorf("relay: reading the session journal of the daemon that went away: %w", err)
		}
		r.log.Info("relay: the foldproxy daemon went away; taking the session to the next one",
			"unhandled_bytes", len(rec.input), "unanswered", len(rec.pending))
		if input, err = r.takeBack(*pp, rec); err != nil {
			return nil, true, err
		}
		if err := r.out.failure(); err != nil {
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
func (r *relay) takeBack(pp stdioPipes, rec journalRecovery) ([]byte, error) {
	if rec.mend {
		if err := r.out.writeLine([]byte{'\n'}); err != nil {
			return nil, err
		}
	}
	var again []byte
	batches := map[uint64][][]byte{}
	var order []uint64
	for _, p := range rec.pending {
		if p.group == 0 && p.line != nil && relayResendable[p.method] {
			again = append(append(again, p.line...), '\n')
			continue
		}
		msg := Response(p.id, nil, Errorf(CodeInternalError,
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
		r.write(stdioJoinArray(batches[g]))
	}
	input := rec.input
	if rec.discarding {
		buf := make([]byte, 64<<10)
		i := bytes.IndexByte(input, '\n')
		for i < 0 {
			n, err := pp.in.Read(buf)
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
		r.write(Response(nil, nil, Errorf(CodeMessageTooLarge,
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
		line, tooLarge, err := stdioReadLine(br, r.opts.MaxMessageBytes)
		select {
		case <-r.stopRead:
			return
		default:
		}
		if tooLarge {
			r.write(Response(nil, nil, Errorf(CodeMessageTooLarge,
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
	out  *stdioWriter

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
func (r *relay) dialHello(ctx context.Context, fds bool) (net.Conn, io.ReadWriter, AttachWelcome, *bufio.Reader, error) {
	var lastErr error
	for attempt := 0; ; attempt++ {
		if ctx.Err() != nil {
			return nil, nil, AttachWelcome{}, nil, ctx.Err()
		}
		if attempt >= 50 {
			return nil, nil, AttachWelcome{}, nil, fmt.Errorf("relay: could not attach to a foldproxy daemon: %w", lastErr)
		}
		c, err := r.opts.Dial(ctx)
		if err != nil {
			return nil, nil, AttachWelcome{}, nil, err
		}
		rw := rawConnIO(c)
		w, br, err := r.hello(c, rw, fds)
		if err != nil {
			c.Close()
			lastErr = err
			continue
		}
		if w.Error != "" {
			c.Close()
			if !w.Exiting {
				return nil, nil, AttachWelcome{}, nil, errors.New(w.Error)
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
func (r *relay) adopt(c net.Conn, rw io.ReadWriter, w AttachWelcome, br *bufio.Reader) {
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
func (r *relay) hello(c net.Conn, rw io.Reader, fds bool) (AttachWelcome, *bufio.Reader, error) {
	b, _ := json.Marshal(AttachHello{Version: AttachVersion, Session: r.session, Config: r.opts.Config, FDs: fds})
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	defer c.SetDeadline(time.Time{})
	if _, err := c.Write(append(b, '\n')); err != nil {
		return AttachWelcome{}, nil, fmt.Errorf("sending the attach hello: %w", err)
	}
	br := bufio.NewReaderSize(rw, 64<<10)
	line, _, err := stdioReadLine(br, attachHelloMax)
	if len(line) == 0 && err != nil {
		return AttachWelcome{}, nil, fmt.Errorf("reading the daemon's welcome: %w", err)
	}
	var w AttachWelcome
	if json.Unmarshal(line, &w) != nil || (w.Session == "" && w.Error == "") {
		return AttachWelcome{}, nil, fmt.Errorf("the daemon's welcome is not valid: %.200q", line)
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
		if relayResendable[p.method] {
			r.send(p.line)
			continue
		}
		r.mu.Lock()
		delete(r.pending, frontIDKey(p.id))
		r.mu.Unlock()
		r.write(Response(p.id, nil, Errorf(CodeInternalError,
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
		items, _ := frontDecode(line)
		for _, it := range items {
			if it.msg != nil && it.msg.IsRequest() {
				r.note(it.msg.ID, it.msg.Method, line)
			}
		}
	}
	r.send(line)
}

// note records a request as pending until the daemon answers it.
func (r *relay) note(id json.RawMessage, method string, line []byte) {
	r.mu.Lock()
	r.seq++
	r.pending[frontIDKey(id)] = &relayPending{id: bytes.Clone(id), method: method, line: bytes.Clone(line), seq: r.seq}
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
	if err := r.out.WriteMessage(msg); err != nil && !errors.Is(err, ErrOutboundClosed) {
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
			if key, isResp, _ := frontClassify(msg); isResp {
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
	if err := r.out.writeLine(line); err != nil && !errors.Is(err, ErrOutboundClosed) {
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
		if key, isResp, _ := frontClassify(it); isResp {
			delete(r.pending, key)
		}
	}
}
