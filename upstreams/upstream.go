package upstreams

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/foldproxy/foldproxy/policy/jsonrpc"
	"github.com/foldproxy/foldproxy/policy/redact"
)

// Catalog is what an upstream offers, each item raw, exactly as the upstream
// sent it. Callers must not modify the raw messages.
type Catalog struct {
	Tools             []json.RawMessage
	Resources         []json.RawMessage
	ResourceTemplates []json.RawMessage
	Prompts           []json.RawMessage
	// ServerCapabilities and ServerInfo are the capabilities and serverInfo
	// objects of the upstream's initialize result.
	ServerCapabilities json.RawMessage
	ServerInfo         json.RawMessage
	Instructions       string
	// ProtocolVersion is the version the upstream answered in initialize.
	ProtocolVersion string
}

func (c Catalog) clone() Catalog {
	c.Tools = slices.Clone(c.Tools)
	c.Resources = slices.Clone(c.Resources)
	c.ResourceTemplates = slices.Clone(c.ResourceTemplates)
	c.Prompts = slices.Clone(c.Prompts)
	return c
}

// DefaultProtocolVersion is the protocol version sent in initialize when
// Options.ProtocolVersion is empty.
const DefaultProtocolVersion = "2025-11-25"

// Options configures an Upstream. Every field is optional; zero values mean
// the defaults given in the comments. The callbacks are called from the
// upstream's own goroutines and must not block for long.
type Options struct {
	// Logger receives the upstream's logs, its stderr lines included. Nil
	// discards them. Nothing is ever written to stdout.
	Logger *slog.Logger
	// ProtocolVersion is sent in initialize. Default DefaultProtocolVersion.
	// The upstream may answer another version it supports.
	ProtocolVersion string
	// ClientInfo is the clientInfo sent in initialize. Default
	// {"name":"foldproxy","version":"dev"}.
	ClientInfo json.RawMessage
	// Capabilities are the client capabilities advertised upstream at
	// first, e.g. {"roots":{"listChanged":true}}; Advertise widens them.
	// Default {}.
	Capabilities json.RawMessage

	// OnNotification receives every notification from the upstream
	// (progress, logging message, list_changed, resources/updated,
	// cancelled...) with its params raw, in the order they arrived. A
	// list_changed notification is passed on only once the catalogue has
	// been fetched again. Call waits until the notifications that arrived
	// before its response have been passed on, so progress for a request
	// always comes before its result; OnNotification must therefore not
	// wait for a Call of the same upstream. Params are the upstream's
	// bytes, untouched.
	OnNotification func(u *Upstream, method string, params json.RawMessage)
	// OnRequest answers the upstream's requests to the client
	// (sampling/createMessage, elicitation/create, roots/list). A returned
	// *jsonrpc.Error is sent as that JSON-RPC error, any other error as an
	// internal error; a returned result and a *jsonrpc.Error's Raw go back
	// to the upstream byte for byte. Params are the upstream's bytes. ctx
	// ends when the upstream cancels the request or the connection ends;
	// for a request made on a streamable HTTP call's own response stream
	// it is that call's context (so it carries the caller's values). ping
	// is answered without it. When nil, requests other than ping are
	// answered "method not found".
	OnRequest func(ctx context.Context, u *Upstream, method string, params json.RawMessage) (json.RawMessage, error)
	// OnState is called on every state change and after each catalogue
	// refresh (with StateUp).
	OnState func(u *Upstream, s State)
	// Stderr, when set, receives each line a stdio upstream writes to its
	// stderr instead of the Logger; a caller can scrub them first.
	Stderr func(u *Upstream, line string)

	// MinBackoff and MaxBackoff bound the wait between connection attempts.
	// Default 250ms and 30s.
	MinBackoff, MaxBackoff time.Duration
	// StartTimeout bounds one connection attempt: starting the transport,
	// initialize and the catalogue fetch. Default 30s.
	StartTimeout time.Duration
	// DownWait bounds how long a call made while the upstream is down waits
	// for a connection attempt before failing with ErrUnavailable.
	// Default 5s.
	DownWait time.Duration
}

func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.ProtocolVersion == "" {
		o.ProtocolVersion = DefaultProtocolVersion
	}
	if len(o.ClientInfo) == 0 {
		o.ClientInfo = json.RawMessage(`{"name":"foldproxy","version":"dev"}`)
	}
	if len(o.Capabilities) == 0 {
		o.Capabilities = json.RawMessage(`{}`)
	}
	if o.MinBackoff <= 0 {
		o.MinBackoff = 250 * time.Millisecond
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = 30 * time.Second
	}
	if o.MaxBackoff < o.MinBackoff {
		o.MaxBackoff = o.MinBackoff
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = 30 * time.Second
	}
	if o.DownWait <= 0 {
		o.DownWait = 5 * time.Second
	}
	return o
}

// backoffDelay is the wait after the last connection attempt before the
// next one, given how many attempts in a row have failed: MinBackoff after a
// success (a restart after a crash), then MinBackoff, 2×, 4×... capped at
// MaxBackoff.
func backoffDelay(failures int, minB, maxB time.Duration) time.Duration {
	d := minB
	for i := 1; i < failures && d < maxB; i++ {
		d *= 2
	}
	return min(d, maxB)
}

// Upstream is a supervised connection to one upstream MCP server. It
// connects in the background, restarts a crashed server on the next call,
// and keeps the server's catalogue fresh. Its methods are safe for
// concurrent use.
type Upstream struct {
	entry Entry
	opts  Options
	log   *slog.Logger
	// red redacts the entry's credentials from every error the upstream
	// returns and every line it logs (Entry.Credentials).
	red *redact.Redactor
	// dial opens a transport; tests replace it.
	dial func(ctx context.Context, c *conn) error

	nextID atomic.Int64
	wg     sync.WaitGroup

	mu          sync.Mutex
	changed     chan struct{} // closed and replaced on every change below
	state       State
	conn        *conn
	started     bool
	startedAt   time.Time // when Start began the first connection attempt
	closed      bool
	life        context.Context
	stop        context.CancelFunc
	everUp      bool
	restarts    int
	failures    int       // connection attempts failed in a row
	lastAttempt time.Time // start of the last connection attempt
	attempts    int       // connection attempts finished
	attempting  bool
	lastErr     error
	demand      int // calls waiting for a connection
	wake        chan struct{}
	catalog     Catalog
	stateSeq    uint64                     // events to report through OnState so far
	caps        map[string]json.RawMessage // client capabilities advertised on the next initialize
	capsGen     uint64                     // bumped each time caps widen
	reconnect   bool                       // connect again now: caps widened

	notifyMu sync.Mutex // serializes OnState
	notified uint64     // the last event reported
}

// New returns an upstream for e. It does nothing until Start.
func New(e Entry, opts Options) *Upstream {
	opts = opts.withDefaults()
	red := redact.New(e.Credentials()...)
	u := &Upstream{
		entry:   e,
		opts:    opts,
		red:     red,
		log:     slog.New(red.Handler(opts.Logger.Handler())).With("upstream", e.Name),
		changed: make(chan struct{}),
		state:   StateDown,
		wake:    make(chan struct{}, 1),
	}
	u.dial = dialEntry
	if err := json.Unmarshal(opts.Capabilities, &u.caps); err != nil || u.caps == nil {
		u.caps = map[string]json.RawMessage{}
	}
	return u
}

// Advertise widens the client capabilities advertised upstream with caps'
// top-level entries (a capability already advertised keeps its value).
// MCP fixes a client's capabilities at initialize, so when the live
// connection was initialized without one of them it is closed and the
// upstream connects again at once: calls in flight on it fail as on any
// lost connection. It reports whether the set widened.
func (u *Upstream) Advertise(caps map[string]json.RawMessage) bool {
	u.mu.Lock()
	widened := false
	for k, v := range caps {
		if _, ok := u.caps[k]; !ok {
			u.caps[k] = v
			widened = true
		}
	}
	if !widened {
		u.mu.Unlock()
		return false
	}
	u.capsGen++
	c := u.liveLocked()
	if c != nil || u.attempting {
		u.reconnect = true
	}
	u.mu.Unlock()
	if c != nil {
		u.log.Info("reconnecting upstream to advertise the client capabilities an agent declared", "capabilities", slices.Sorted(maps.Keys(caps)))
		c.fail(errWidened)
	}
	u.poke()
	return true
}

// WaitAdvertised blocks until the upstream is up on a connection
// initialized with every capability Advertise has added, or until ctx ends
// or the upstream is closed.
func (u *Upstream) WaitAdvertised(ctx context.Context) error {
	return u.waitFor(ctx, func() bool {
		c := u.liveLocked()
		return c != nil && c.capsGen == u.capsGen
	})
}

// advertised returns the client capabilities to send in initialize, and
// their generation.
func (u *Upstream) advertised() (json.RawMessage, uint64) {
	u.mu.Lock()
	defer u.mu.Unlock()
	b, err := json.Marshal(u.caps)
	if err != nil {
		b = []byte(`{}`)
	}
	return b, u.capsGen
}

// Name returns the entry's name.
func (u *Upstream) Name() string { return u.entry.Name }

// Entry returns the configuration entry.
func (u *Upstream) Entry() Entry { return u.entry }

// State returns the current state.
func (u *Upstream) State() State {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.state
}

// Restarts returns how many times the upstream has been brought up again
// after its first connection was lost.
func (u *Upstream) Restarts() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.restarts
}

// Catalog returns a snapshot of the catalogue. While the upstream is down it
// is the last one fetched.
func (u *Upstream) Catalog() Catalog {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.catalog.clone()
}

// broadcastLocked wakes everyone waiting on u.changed. u.mu must be held.
func (u *Upstream) broadcastLocked() {
	close(u.changed)
	u.changed = make(chan struct{})
}

// setStateLocked records s and returns the sequence number of the event
// to report through OnState, or 0 when there is none: the state did not
// change and report is false. u.mu must be held.
func (u *Upstream) setStateLocked(s State, report bool) uint64 {
	if u.state != s {
		u.state = s
		u.broadcastLocked()
		report = true
	}
	if !report {
		return 0
	}
	u.stateSeq++
	return u.stateSeq
}

// notifyState reports event seq through OnState, outside u.mu. Events are
// reported in order; one that is overtaken by a later one is dropped, so
// that the last state reported is always the current one.
func (u *Upstream) notifyState(seq uint64, s State) {
	if seq == 0 || u.opts.OnState == nil {
		return
	}
	u.notifyMu.Lock()
	defer u.notifyMu.Unlock()
	if seq <= u.notified {
		return
	}
	u.notified = seq
	u.opts.OnState(u, s)
}

// goTracked runs f in a goroutine that Close waits for. It reports false,
// and does not run f, once the upstream is closed.
func (u *Upstream) goTracked(f func()) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.closed {
		return false
	}
	u.wg.Go(f)
	return true
}

// Start starts the supervisor and returns at once. The supervisor connects,
// retries failed attempts in the background with exponential backoff, and
// logs each failure. Cancelling ctx stops it as Close does, except that
// Close must still be called to wait for the goroutines to end. Calling
// Start again does nothing.
func (u *Upstream) Start(ctx context.Context) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.started || u.closed {
		return
	}
	u.started = true
	u.startedAt = time.Now()
	u.life, u.stop = context.WithCancel(ctx)
	u.wg.Go(u.supervise)
}

// WaitReady blocks until the upstream has been up once, ctx ends or the
// upstream is closed.
func (u *Upstream) WaitReady(ctx context.Context) error {
	for {
		u.mu.Lock()
		ready, closed, changed := u.everUp, u.closed, u.changed
		lastErr := u.lastErr
		u.mu.Unlock()
		switch {
		case ready:
			return nil
		case closed:
			return unavailable(nil, "upstream %q is closed", u.Name())
		}
		select {
		case <-changed:
		case <-ctx.Done():
			if lastErr != nil {
				return unavailable(ctx.Err(), "upstream %q is not ready: %v (last attempt: %v)", u.Name(), ctx.Err(), u.clean(lastErr))
			}
			return unavailable(ctx.Err(), "upstream %q is not ready: %v", u.Name(), ctx.Err())
		}
	}
}

// StartedAt returns when Start began the upstream's first connection
// attempt, zero before Start.
func (u *Upstream) StartedAt() time.Time {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.startedAt
}

// WaitAttempted blocks until the upstream's first connection attempt has
// finished, whether it came up or failed, or until ctx ends or the
// upstream is closed. A caller that must answer quickly waits with it for
// an upstream that is starting, and never for one whose attempts fail and
// are retried with backoff.
func (u *Upstream) WaitAttempted(ctx context.Context) error {
	return u.waitFor(ctx, func() bool { return u.everUp || u.attempts > 0 })
}

// waitFor blocks until done (called with u.mu held) reports true, ctx ends
// or the upstream is closed.
func (u *Upstream) waitFor(ctx context.Context, done func() bool) error {
	for {
		u.mu.Lock()
		ok, closed, changed := done(), u.closed, u.changed
		u.mu.Unlock()
		switch {
		case ok:
			return nil
		case closed:
			return unavailable(nil, "upstream %q is closed", u.Name())
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Status returns the current state and, when the upstream is not up, why:
// the error of the last failed connection attempt (nil while the first
// attempt runs or when it was simply lost and not yet restarted).
func (u *Upstream) Status() (State, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.state == StateUp {
		return StateUp, nil
	}
	return u.state, u.clean(u.lastErr)
}

// clean is err without the entry's credentials (an HTTP upstream's URL
// with its password or api_key in a transport error, say): the errors of
// an upstream reach the agent (instructions, tool errors) and the logs.
// A JSON-RPC error keeps its type and code.
func (u *Upstream) clean(err error) error {
	if err == nil || u.red.Empty() {
		return err
	}
	if re, ok := err.(*jsonrpc.Error); ok {
		msg, data := u.red.String(re.Message), u.red.String(string(re.Data))
		if msg == re.Message && data == string(re.Data) {
			return err
		}
		c := &jsonrpc.Error{Code: re.Code, Message: msg}
		if len(re.Data) > 0 && json.Valid([]byte(data)) {
			c.Data = json.RawMessage(data)
		}
		return c
	}
	return u.red.Error(err)
}

// supervise runs the connection attempts: in the background while they
// fail, and on demand (a waiting call) after a connection was lost.
func (u *Upstream) supervise() {
	for {
		u.mu.Lock()
		for !u.closed && u.life.Err() == nil && (u.liveLocked() != nil || (u.failures == 0 && u.everUp && u.demand == 0 && !u.reconnect)) {
			u.mu.Unlock()
			select {
			case <-u.wake:
			case <-u.life.Done():
			}
			u.mu.Lock()
		}
		if u.closed || u.life.Err() != nil {
			c := u.conn
			u.conn = nil
			u.mu.Unlock()
			if c != nil {
				c.fail(errClosing)
			}
			return
		}
		wait := time.Duration(0)
		if !u.lastAttempt.IsZero() {
			wait = time.Until(u.lastAttempt.Add(backoffDelay(u.failures, u.opts.MinBackoff, u.opts.MaxBackoff)))
		}
		u.mu.Unlock()
		if wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-u.life.Done():
				t.Stop()
				continue
			}
		}

		u.mu.Lock()
		u.lastAttempt = time.Now()
		u.attempting = true
		u.reconnect = false
		seq := u.setStateLocked(StateStarting, false)
		u.mu.Unlock()
		u.notifyState(seq, StateStarting)

		c, cat, err := u.connect(u.life)
		if err == nil && c.isDead() {
			// Lost between the catalogue fetch and now (a stdio server
			// that exited at once, say).
			err = fmt.Errorf("the connection was lost as soon as it started: %w", c.cause)
		}

		u.mu.Lock()
		u.attempting = false
		u.attempts++
		if err == nil && (u.closed || u.life.Err() != nil) {
			u.mu.Unlock()
			c.fail(errClosing)
			continue
		}
		var state State
		if err != nil {
			u.failures++
			u.lastErr = err
			state = StateDown
			next := backoffDelay(u.failures, u.opts.MinBackoff, u.opts.MaxBackoff)
			seq = u.setStateLocked(StateDown, false)
			u.broadcastLocked()
			u.mu.Unlock()
			if u.life.Err() == nil {
				u.log.Warn("upstream failed to start", "err", err, "failures", u.failures, "retry_in", next)
			}
		} else {
			if c.capsGen != u.capsGen {
				// The capabilities widened during the attempt: connect
				// again with them.
				u.reconnect = true
				u.mu.Unlock()
				c.fail(errWidened)
				continue
			}
			u.failures = 0
			u.lastErr = nil
			c.up.Store(true)
			u.conn = c
			u.catalog = cat
			if u.everUp {
				u.restarts++
			}
			u.everUp = true
			state = StateUp
			seq = u.setStateLocked(StateUp, false)
			u.broadcastLocked()
			u.mu.Unlock()
			c.startQueue()
			u.log.Info("upstream up", "protocol_version", cat.ProtocolVersion, "tools", len(cat.Tools),
				"resources", len(cat.Resources), "resource_templates", len(cat.ResourceTemplates), "prompts", len(cat.Prompts))
		}
		u.notifyState(seq, state)
	}
}

// connLost is called once a connection has been torn down.
func (u *Upstream) connLost(c *conn) {
	u.mu.Lock()
	if u.conn != c {
		u.mu.Unlock()
		return
	}
	u.conn = nil
	seq := u.setStateLocked(StateDown, false)
	u.mu.Unlock()
	u.poke() // a call may be waiting for a new connection
	u.notifyState(seq, StateDown)
}

// setCatalog stores a refreshed catalogue fetched on c, if c is still the
// current connection, and reports it through OnState.
func (u *Upstream) setCatalog(c *conn, update func(*Catalog)) {
	u.mu.Lock()
	if u.conn != c {
		u.mu.Unlock()
		return
	}
	update(&u.catalog)
	seq := u.setStateLocked(StateUp, true)
	u.mu.Unlock()
	u.notifyState(seq, StateUp)
}

// liveLocked returns the current connection unless it has been lost.
// u.mu must be held.
func (u *Upstream) liveLocked() *conn {
	if u.conn == nil || u.conn.isDead() {
		return nil
	}
	return u.conn
}

func (u *Upstream) poke() {
	select {
	case u.wake <- struct{}{}:
	default:
	}
}

// acquire returns the live connection. When the upstream is down it asks
// the supervisor for a connection and waits at most min(ctx, DownWait) for
// an attempt to succeed; a failed attempt or the end of the wait fails the
// call with ErrUnavailable.
func (u *Upstream) acquire(ctx context.Context, method string) (*conn, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if c := u.liveLocked(); c != nil && !u.closed {
		return c, nil
	}
	if u.closed {
		return nil, unavailable(nil, "upstream %q is closed", u.Name())
	}
	if !u.started || u.life.Err() != nil {
		return nil, unavailable(nil, "upstream %q is not started", u.Name())
	}
	// Fail fast when no attempt can start within the wait.
	wait := u.opts.DownWait
	if d, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(d))
	}
	if !u.attempting && u.failures > 0 {
		next := time.Until(u.lastAttempt.Add(backoffDelay(u.failures, u.opts.MinBackoff, u.opts.MaxBackoff)))
		if next > wait {
			return nil, unavailable(u.lastErr, "upstream %q is down (last attempt: %v); next attempt in %s; %s was not sent", u.Name(), u.lastErr, next.Round(time.Millisecond), method)
		}
	}
	u.demand++
	defer func() { u.demand-- }()
	u.poke()
	attempts := u.attempts
	timer := time.NewTimer(u.opts.DownWait)
	defer timer.Stop()
	for {
		if c := u.liveLocked(); c != nil {
			return c, nil
		}
		if u.closed {
			return nil, unavailable(nil, "upstream %q is closed", u.Name())
		}
		if u.attempts > attempts && u.lastErr != nil && !u.attempting {
			return nil, unavailable(u.lastErr, "upstream %q is down and could not be started for %s: %v", u.Name(), method, u.lastErr)
		}
		changed := u.changed
		u.mu.Unlock()
		var err error
		select {
		case <-changed:
		case <-ctx.Done():
			err = ctx.Err()
		case <-timer.C:
			err = errDownWait
		}
		u.mu.Lock()
		switch {
		case err == nil:
		case u.liveLocked() != nil:
			return u.conn, nil
		case errors.Is(err, errDownWait):
			next := time.Until(u.lastAttempt.Add(backoffDelay(u.failures, u.opts.MinBackoff, u.opts.MaxBackoff)))
			why := "no connection attempt has succeeded yet"
			if u.lastErr != nil {
				why = fmt.Sprintf("last attempt: %v", u.lastErr)
			}
			if u.attempting {
				return nil, unavailable(u.lastErr, "upstream %q is down and still starting after %s (%s); %s was not sent", u.Name(), u.opts.DownWait, why, method)
			}
			return nil, unavailable(u.lastErr, "upstream %q is down (%s); next attempt in %s; %s was not sent", u.Name(), why, next.Round(time.Millisecond), method)
		default:
			return nil, unavailable(err, "upstream %q is down and did not come up for %s before the call ended: %v", u.Name(), method, err)
		}
	}
}

var (
	errDownWait = errors.New("down wait over")
	errClosing  = errors.New("upstream closed")
	errWidened  = errors.New("reconnecting to advertise more client capabilities")
)

// Call sends a request upstream and returns its result raw, byte for byte.
// params must be valid JSON (the proxy's come from a message it has
// decoded): they are sent as they are, not checked again.
// A JSON-RPC error from the upstream is returned as *jsonrpc.Error. When ctx ends
// first, notifications/cancelled is sent upstream and ctx.Err() returned.
// When the upstream is down, or is lost while handling the request, the
// error wraps ErrUnavailable; a crashed stdio server is restarted by the
// next call. An HTTP upstream that has forgotten the session is initialized
// again and the request retried once.
func (u *Upstream) Call(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error) {
	res, err := u.call(ctx, method, params)
	return res, u.clean(err)
}

func (u *Upstream) call(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error) {
	c, err := u.acquire(ctx, method)
	if err != nil {
		return nil, err
	}
	gen := c.generation()
	res, err := c.call(ctx, method, params, true)
	if !errors.Is(err, errSessionLost) {
		return res, err
	}
	u.log.Info("upstream session lost, initializing a new one", "method", method)
	if err := c.reinitialize(ctx, gen); err != nil {
		return nil, err
	}
	res, err = c.call(ctx, method, params, true)
	if errors.Is(err, errSessionLost) {
		return nil, unavailable(err, "upstream %q lost the new session too while handling %s", u.Name(), method)
	}
	return res, err
}

// Notify sends a notification upstream. It fails with ErrUnavailable at
// once when the upstream is down: notifications do not restart it.
func (u *Upstream) Notify(ctx context.Context, method string, params json.RawMessage) error {
	u.mu.Lock()
	c := u.conn
	u.mu.Unlock()
	if c == nil {
		return unavailable(nil, "upstream %q is down; %s was not sent", u.Name(), method)
	}
	return u.clean(c.notify(ctx, method, params))
}

// Close stops the supervisor, closes the connection, ends a stdio server
// (stdin closed, then SIGTERM, then SIGKILL for it and its process group)
// and waits for every goroutine of the upstream to end. Calls in flight
// fail with ErrUnavailable. It is safe to call more than once and always
// returns nil.
func (u *Upstream) Close() error {
	u.mu.Lock()
	if u.closed {
		u.mu.Unlock()
		return nil
	}
	u.closed = true
	c := u.conn
	u.conn = nil
	stop := u.stop
	seq := u.setStateLocked(StateDown, false)
	u.broadcastLocked()
	u.mu.Unlock()
	if stop != nil {
		stop()
	}
	if c != nil {
		c.fail(errClosing)
	}
	u.wg.Wait()
	u.notifyState(seq, StateDown)
	return nil
}
