package proxy

import (
	"context"
	"encoding/json"
	"sync"
	"time"
)

// Session is one downstream connection: a stdio process or an HTTP session.
// Its methods are safe for concurrent use.
type Session struct {
	id        string
	transport string
	ctx       context.Context // cancelled when the session ends
	cancel    context.CancelFunc

	mu              sync.Mutex
	standalone      Outbound
	protocolVersion string
	clientInfo      json.RawMessage
	clientCaps      json.RawMessage
	initialized     bool
	closed          bool
	relayOnly       bool // a transport front's session: the core sends it nothing (remote_seam.go)
	logLevel        int  // index into logLevels; -1: not set (forward everything)
	lastActive      time.Time
	opened          time.Time
	inflight        map[string]context.CancelCauseFunc // agent requests being served, by id
	pending         map[string]chan *Message           // our requests to the agent, by id
	done            chan struct{}
}

func newSession(id, transport string, standalone Outbound) *Session {
	ctx, cancel := context.WithCancel(context.Background())
	return &Session{
		id: id, transport: transport, standalone: standalone,
		ctx: ctx, cancel: cancel,
		logLevel:   -1,
		lastActive: time.Now(),
		opened:     time.Now(),
		inflight:   make(map[string]context.CancelCauseFunc),
		pending:    make(map[string]chan *Message),
		done:       make(chan struct{}),
	}
}

// ID returns the session id.
func (s *Session) ID() string { return s.id }

// Transport returns "stdio" or "http".
func (s *Session) Transport() string { return s.transport }

// SetStandalone replaces the outbound for messages not tied to a request
// (the HTTP front calls it when the agent opens or loses its GET stream;
// nil means none is open).
func (s *Session) SetStandalone(o Outbound) {
	s.mu.Lock()
	s.standalone = o
	s.mu.Unlock()
}

// ProtocolVersion returns the negotiated protocol version, "" before initialize.
func (s *Session) ProtocolVersion() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.protocolVersion
}

// Done is closed when the session has ended.
func (s *Session) Done() <-chan struct{} { return s.done }

// hasCapability reports whether the client declared a top-level capability
// (sampling, elicitation, roots).
func (s *Session) hasCapability(name string) bool {
	s.mu.Lock()
	caps := s.clientCaps
	s.mu.Unlock()
	return hasCap(caps, name)
}

func (s *Session) touch() {
	s.mu.Lock()
	s.lastActive = time.Now()
	s.mu.Unlock()
}

// send writes msg to out, falling back to the standalone outbound when out
// is nil or fails. It reports whether the message was written.
func (s *Session) send(out Outbound, msg []byte) bool {
	if out != nil && out.WriteMessage(msg) == nil {
		return true
	}
	s.mu.Lock()
	sa := s.standalone
	s.mu.Unlock()
	return sa != nil && sa.WriteMessage(msg) == nil
}

// logLevels are MCP's logging levels, in order of severity.
var logLevels = [...]string{"debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"}

func levelIndex(l string) int {
	for i, v := range logLevels {
		if v == l {
			return i
		}
	}
	return -1
}

// wantsLog reports whether a log message at level passes the session's level.
func (s *Session) wantsLog(level string) bool {
	s.mu.Lock()
	min := s.logLevel
	s.mu.Unlock()
	if min < 0 {
		return true
	}
	return levelIndex(level) >= min
}
