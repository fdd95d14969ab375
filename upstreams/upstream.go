package upstreams

import (
	"context"
	"encoding/json"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

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
