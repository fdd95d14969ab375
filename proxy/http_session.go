package proxy

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	"github.com/foldproxy/foldproxy/policy/jsonrpc"
)

// httpSession is the front's side of one HTTP session.
type httpSession struct {
	id     string
	s      *Session
	ctx    context.Context // cancelled when the session closes
	cancel context.CancelFunc

	mu          sync.Mutex
	closed      bool
	inflight    int // HTTP requests using the session right now, open GET streams included
	lastActive  time.Time
	standalone  *httpStandalone // the open GET stream, nil when none
	attaching   bool            // a GET stream is being opened
	ring        sseRing         // recent standalone events, for Last-Event-ID
	nextEventID uint64
}

// standaloneOutbound writes to the session's open GET stream, if any. The
// core gets it as the out of notifications and responses that arrive in a
// POST, which have no response stream of their own.
func (hs *httpSession) standaloneOutbound() Outbound {
	return frontOutboundFunc(func(msg []byte) error {
		hs.mu.Lock()
		o := hs.standalone
		hs.mu.Unlock()
		if o == nil {
			return ErrOutboundClosed
		}
		return o.WriteMessage(msg)
	})
}

// httpStandalone is the Outbound of a session's standalone (GET) stream.
// Every event gets an id and is kept in the session's ring, so that an
// agent that reconnects with Last-Event-ID gets what it missed.
type httpStandalone struct {
	hs *httpSession
	st *sseStream
	mu sync.Mutex // keeps event ids in write order
}

// WriteMessage is safe for concurrent use.
func (o *httpStandalone) WriteMessage(msg []byte) error {
	data, err := frontCompact(msg)
	if err != nil {
		return fmt.Errorf("http front: %w", err)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.st.isClosed() {
		return ErrOutboundClosed
	}
	o.hs.mu.Lock()
	o.hs.nextEventID++
	id := o.hs.nextEventID
	o.hs.ring.add(id, data)
	o.hs.mu.Unlock()
	return o.st.event(strconv.FormatUint(id, 10), data)
}

// openSession creates a session with a fresh id and opens it at the core.
// The session is returned acquired (see release).
func (h *HTTPHandler) openSession() (*httpSession, error) {
	id := rand.Text()
	s, err := h.callOpen(id)
	if err != nil {
		return nil, err
	}
	hs := h.newHTTPSession(id, s)
	if !h.register(hs) {
		return nil, errors.New("the server is shutting down")
	}
	return hs, nil
}

func (h *HTTPHandler) callOpen(id string) (s *Session, err error) {
	defer func() {
		if v := recover(); v != nil {
			h.log.Error("http front: panic opening a session", "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			err = errors.New("the endpoint failed to open a session")
		}
	}()
	s = h.ep.OpenSession(h.baseCtx, id, "http", nil)
	if s == nil {
		return nil, errors.New("the endpoint opened no session")
	}
	return s, nil
}

func (h *HTTPHandler) newHTTPSession(id string, s *Session) *httpSession {
	hs := &httpSession{id: id, s: s, inflight: 1, lastActive: h.now()}
	hs.ctx, hs.cancel = context.WithCancel(h.baseCtx)
	return hs
}

// register adds an acquired session to the table. After Close it closes the
// session at the core instead and reports false.
func (h *HTTPHandler) register(hs *httpSession) bool {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		hs.mu.Lock()
		hs.closed = true
		hs.mu.Unlock()
		h.finishClose(hs)
		return false
	}
	h.sessions[hs.id] = hs
	h.mu.Unlock()
	return true
}

// acquire finds the session named by the Mcp-Session-Id header and marks it
// in use, asking Resume for an id it does not know. When there is none it
// writes the error response (400 or 404) and returns nil.
func (h *HTTPHandler) acquire(w http.ResponseWriter, r *http.Request, id string) *httpSession {
	if id == "" {
		httpError(w, http.StatusBadRequest, CodeInvalidRequest,
			"bad request: the Mcp-Session-Id header is required (send initialize first to get one)")
		return nil
	}
	if !httpValidSessionID(id) {
		httpError(w, http.StatusBadRequest, CodeInvalidRequest,
			"bad request: Mcp-Session-Id must be 1 to %d visible ASCII characters", httpMaxSessionIDLen)
		return nil
	}
	if hs := h.lookup(id); hs != nil {
		return hs
	}
	if hs := h.resumeSession(r.Context(), id); hs != nil {
		return hs
	}
	httpError(w, http.StatusNotFound, jsonrpc.CodeSessionNotFound,
		"session not found: it ended or never existed; send initialize to start a new one")
	return nil
}

// lookup returns the open session id, acquired, or nil.
func (h *HTTPHandler) lookup(id string) *httpSession {
	h.mu.Lock()
	defer h.mu.Unlock()
	hs := h.sessions[id]
	if hs == nil {
		return nil
	}
	hs.mu.Lock()
	defer hs.mu.Unlock()
	if hs.closed {
		return nil
	}
	hs.inflight++
	return hs
}

// resumeSession asks Resume to restore a session persisted before a restart.
func (h *HTTPHandler) resumeSession(ctx context.Context, id string) (hs *httpSession) {
	if h.resume == nil {
		return nil
	}
	h.resumeMu.Lock()
	defer h.resumeMu.Unlock()
	if hs := h.lookup(id); hs != nil {
		return hs // restored while we waited
	}
	defer func() {
		if v := recover(); v != nil {
			h.log.Error("http front: panic resuming a session", "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			hs = nil
		}
	}()
	s, ok := h.resume(ctx, id)
	if !ok || s == nil {
		return nil
	}
	hs = h.newHTTPSession(id, s)
	if !h.register(hs) {
		return nil
	}
	h.log.Info("http front: resumed a session", "session", id)
	return hs
}

// release marks the end of one use of hs.
func (h *HTTPHandler) release(hs *httpSession) {
	hs.mu.Lock()
	hs.inflight--
	hs.lastActive = h.now()
	hs.mu.Unlock()
}

// requestContext is the context the core gets for a POST's messages: it ends
// when the agent goes away (net/http cancels r.Context() when the connection
// closes), when the session closes, or when the handler is closed.
func (h *HTTPHandler) requestContext(r *http.Request, hs *httpSession) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(r.Context())
	stop := context.AfterFunc(hs.ctx, cancel)
	return ctx, func() {
		stop()
		cancel()
	}
}

// closeSession ends hs, once.
func (h *HTTPHandler) closeSession(hs *httpSession) {
	h.mu.Lock()
	first := h.detachLocked(hs)
	h.mu.Unlock()
	if first {
		h.finishClose(hs)
	}
}

// detachLocked marks hs closed and drops it from the table. It reports
// whether this call closed it. The caller holds h.mu.
func (h *HTTPHandler) detachLocked(hs *httpSession) bool {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	if hs.closed {
		return false
	}
	hs.closed = true
	if h.sessions[hs.id] == hs {
		delete(h.sessions, hs.id)
	}
	return true
}

// finishClose cancels the session's requests and streams and closes it at
// the core. It runs once per session, after detachLocked said so.
func (h *HTTPHandler) finishClose(hs *httpSession) {
	hs.cancel()
	defer func() {
		if v := recover(); v != nil {
			h.log.Error("http front: panic closing a session", "session", hs.id, "panic", fmt.Sprint(v))
		}
	}()
	h.ep.CloseSession(hs.s)
	h.log.Debug("http front: session closed", "session", hs.id)
}

// janitor closes idle sessions until Close.
func (h *HTTPHandler) janitor(period time.Duration) {
	defer h.janitorWG.Done()
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-h.stop:
			return
		case now := <-t.C:
			h.reapIdle(now)
		}
	}
}

// reapIdle closes every session that has had no request in flight and no
// open stream for the idle timeout, as of now.
func (h *HTTPHandler) reapIdle(now time.Time) {
	h.mu.Lock()
	var idle []*httpSession
	for _, hs := range h.sessions {
		hs.mu.Lock()
		stale := hs.inflight == 0 && now.Sub(hs.lastActive) >= h.idle
		hs.mu.Unlock()
		if stale && h.detachLocked(hs) {
			idle = append(idle, hs)
		}
	}
	h.mu.Unlock()
	for _, hs := range idle {
		h.log.Info("http front: closing an idle session", "session", hs.id, "idle_timeout", h.idle)
		h.finishClose(hs)
	}
}

// httpValidSessionID reports whether id is a plausible session id: visible
// ASCII, as the MCP transport requires, and not absurdly long.
func httpValidSessionID(id string) bool {
	if id == "" || len(id) > httpMaxSessionIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] < 0x21 || id[i] > 0x7e {
			return false
		}
	}
	return true
}
