package proxy

import (
	"encoding/json"
	"sync"
)

// Session is one downstream connection: a stdio process or an HTTP session.
// Its methods are safe for concurrent use.
type Session struct {
	id        string
	transport string

	mu              sync.Mutex
	standalone      Outbound
	protocolVersion string
	clientInfo      json.RawMessage
	clientCaps      json.RawMessage
	initialized     bool
	closed          bool
	done            chan struct{}
}

func newSession(id, transport string, standalone Outbound) *Session {
	return &Session{id: id, transport: transport, standalone: standalone, done: make(chan struct{})}
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
