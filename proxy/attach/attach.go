package attach

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/foldproxy/foldproxy/proxy"
)

// The attach front lets any number of stdio processes of one project share
// one foldproxy: the daemon, which owns the state store and the upstream
// processes, serves each attached process as its own session over a unix
// socket in the state folder, and each stdio process that an agent starts is
// a thin relay of JSON-RPC lines between its stdin/stdout and that socket.
//
// The protocol on the socket is newline-delimited: the relay sends one
// Hello line, the daemon answers one Welcome line, and from then
// on each side writes whole JSON-RPC messages, one per line, exactly as
// over stdio. The daemon also writes two kinds of lines that are not
// JSON-RPC: "#" followed by one of its log records, which the relay copies
// to its stderr, and "!exiting", which says the daemon stops once this
// connection ends (its last session ended), so that the relay waits for it
// to be gone before exiting itself.

// Version is the attach protocol's version.
const Version = 1

// Hello is the first line a relay sends.
type Hello struct {
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

// Welcome is the daemon's answer to a hello.
type Welcome struct {
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

// Options configure an Server.
type Options struct {
	// Config is the identity of the daemon's configuration (see
	// Hello.Config).
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
	// attaches (Welcome.HTTP); "" while there is none.
	HTTP func() string
	// HoldReady, when set, is waited for before a holding connection is
	// welcomed (the daemon waits, bounded, for its upstreams), so that the
	// agent "foldproxy run" starts next finds every tool listed at once.
	HoldReady func(ctx context.Context)
}

// Server serves attached stdio processes. Its Write method copies a
// log record to every attached relay, so that it can be a log handler's
// writer.
type Server struct {
	ep   proxy.Endpoint
	opts Options
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
	// (Hello.Hold); nothing is written to it after the welcome.
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

// NewServer returns an attach front for ep.
func NewServer(ep proxy.Endpoint, opts Options) *Server {
	if opts.FirstWait <= 0 {
		opts.FirstWait = 30 * time.Second
	}
	return &Server{ep: ep, opts: opts, log: discardIfNil(opts.Logger), conns: make(map[*attachConn]bool)}
}

// Write copies one log record to every attached relay. A relay that is
// busy receiving a message misses the record rather than holding up the
// daemon's logging, and one that does not read for 100 ms gets it cut
// short (its line is ended before the next message).
func (a *Server) Write(p []byte) (int, error) {
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
func (a *Server) Attached() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.conns)
}

// Serve accepts attachments on ln until ctx ends or, with IdleExit, the
// daemon has been idle; then it stops accepting, detaches the sessions
// still attached (they stay in the store, to be resumed by the next
// daemon) and returns once every connection is finished.
func (a *Server) Serve(ctx context.Context, ln net.Listener) error {
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
func (a *Server) idleOver() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.conns) == 0 && !a.exiting {
		a.exiting = true
		a.stop()
	}
}

func (a *Server) handle(ctx context.Context, c net.Conn) {
	defer c.Close()
	if a.opts.CheckPeer != nil {
		if err := a.opts.CheckPeer(c); err != nil {
			a.log.Warn("attach: connection refused", "err", err)
			return
		}
	}
	// The relay's lines are read, and the daemon's written, by raw system
	// calls through the poller (rawio_unix.go).
	ac := &attachConn{c: c, rw: proxy.RawConnIO(c)}
	br := bufio.NewReaderSize(ac.rw, 64<<10)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	line, tooLarge, err := proxy.ReadLine(br, attachHelloMax)
	_ = c.SetReadDeadline(time.Time{})
	welcome := func(w Welcome) error {
		b, _ := json.Marshal(w)
		_, err := ac.Write(append(b, '\n'))
		return err
	}
	var hello Hello
	switch {
	case err != nil && len(line) == 0:
		return
	case tooLarge || json.Unmarshal(line, &hello) != nil || hello.Version == 0:
		_ = welcome(Welcome{Error: "not a foldproxy attach hello"})
		return
	case hello.Version != Version:
		_ = welcome(Welcome{Error: fmt.Sprintf("attach protocol %d is not %d: this foldproxy binary differs from the daemon's; stop the daemon (pid %d) and start again", hello.Version, Version, os.Getpid())})
		return
	case hello.Config != a.opts.Config:
		_ = welcome(Welcome{Error: fmt.Sprintf("the foldproxy daemon (pid %d) on this state folder runs another configuration (%s, not %s); it stops when its sessions end, or stop it now with kill %d", os.Getpid(), a.opts.Config, hello.Config, os.Getpid())})
		return
	}
	a.mu.Lock()
	if a.exiting {
		a.mu.Unlock()
		_ = welcome(Welcome{Error: "the foldproxy daemon is stopping", Exiting: true})
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
	if welcome(Welcome{Session: id, PID: os.Getpid(), HTTP: a.httpAddr(), FDs: takeFDs}) != nil {
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
	err = proxy.ServeStdio(ctx, a.ep, br, ac, proxy.StdioOptions{
		MaxMessageBytes: a.opts.MaxMessageBytes, Logger: a.log,
		SessionID: id, Transport: proxy.TransportAttach, Detach: true,
	})
	if err != nil && !errors.Is(err, context.Canceled) {
		a.log.Info("attached process", "session", id, "err", err)
	}
	a.detachConn(ac, ctx.Err() == nil)
}

// httpAddr is the HTTP address to tell an attaching process.
func (a *Server) httpAddr() string {
	if a.opts.HTTP == nil {
		return ""
	}
	return a.opts.HTTP()
}

// hold keeps a holding connection (Hello.Hold) counted as attached
// until its peer closes it or the server stops; whatever the peer sends is
// read and dropped.
func (a *Server) hold(ctx context.Context, ac *attachConn, br *bufio.Reader) {
	// Marked before the welcome: once the peer has read it, no log
	// record is written to the connection.
	a.mu.Lock()
	ac.hold = true
	a.conns[ac] = true
	a.mu.Unlock()
	if a.opts.HoldReady != nil {
		a.opts.HoldReady(ctx)
	}
	b, _ := json.Marshal(Welcome{PID: os.Getpid(), HTTP: a.httpAddr()})
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
func (a *Server) serveFDs(ctx context.Context, ac *attachConn, id string) {
	max := a.opts.MaxMessageBytes
	if max <= 0 {
		max = proxy.DefaultMaxMessageBytes
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
	err = proxy.ServeAttached(ctx, a.ep, proxy.AttachedPipes{
		Source: &journalSource{j: p.j, fill: p.read}, Out: p.out, Write: p.write, Journal: p.j, Hangup: hangup,
	}, proxy.StdioOptions{
		MaxMessageBytes: max, Logger: a.log,
		SessionID: id, Transport: proxy.TransportAttach, Detach: true,
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
func (a *Server) detachConn(ac *attachConn, tell bool) {
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

// discardIfNil returns l, or a logger that discards everything when l is
// nil.
func discardIfNil(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.New(slog.DiscardHandler)
	}
	return l
}

// newID returns a new random id with prefix, as the core makes them.
func newID(prefix string) string {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return prefix + "-" + hex.EncodeToString(b[:])
}
