package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/foldproxy/foldproxy/proxy/guard"
)

// HTTPOptions configures the streamable HTTP front.
type HTTPOptions struct {
	// Path is the MCP endpoint; requests to any other path get 404.
	// Default "/mcp".
	Path string
	// Token is the bearer token every request must carry. It is required
	// (NewHTTPHandler fails without it) when Loopback is false.
	Token string
	// Loopback says the listen address is loopback (see IsLoopback). The
	// handler then guards against DNS rebinding: the Host header must name
	// a loopback host, and an Origin header, when present, must be a
	// loopback origin or one of AllowedOrigins.
	Loopback bool
	// AllowedOrigins are extra Origin values to accept, such as
	// "https://inspector.example.com".
	AllowedOrigins []string
	// MaxMessageBytes bounds one POST body; a larger body gets 413.
	// 0 means DefaultMaxMessageBytes.
	MaxMessageBytes int64
	// SessionIdleTimeout closes a session that has seen no request and has
	// no open stream for this long. Default 30 minutes.
	SessionIdleTimeout time.Duration
	// Logger receives the front's diagnostics. nil discards.
	Logger *slog.Logger
	// Resume is asked for an unknown Mcp-Session-Id before answering 404: it
	// lets the core restore a session persisted before a restart. nil: never.
	Resume func(ctx context.Context, id string) (*Session, bool)
}

// IsLoopback reports whether addr, a listen address such as
// "127.0.0.1:8080", "[::1]:0" or "localhost:9", names a loopback host. An
// address with no host (":8080") listens on every interface and is not.
func IsLoopback(addr string) bool { return guard.IsLoopback(addr) }

// httpProtocolVersions are the MCP protocol versions whose streamable HTTP
// transport this front speaks; an MCP-Protocol-Version header naming any
// other is refused.
var httpProtocolVersions = []string{"2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"}

const (
	httpDefaultPath        = "/mcp"
	httpDefaultIdleTimeout = 30 * time.Minute
	httpMaxSessionIDLen    = 256
)

// HTTPHandler is the streamable HTTP front (MCP transport revisions
// 2025-03-26, 2025-06-18 and 2025-11-25). It owns the HTTP sessions: it
// creates their ids at initialize, closes them on DELETE, after
// SessionIdleTimeout, and on Close, and calls the endpoint's CloseSession
// exactly once for each.
//
// A POST carries one message or a batch. Notifications and responses alone
// get 202. Requests are answered on the same HTTP response: as
// application/json when the response is the only message the core writes for
// them, or as an event stream when the core first writes notifications or
// requests tied to them (progress, logging, sampling). A GET opens the
// session's standalone event stream.
//
// Status codes: 200, 202, 204 (DELETE), 400 (malformed JSON, missing session
// id, unsupported MCP-Protocol-Version, batched initialize), 401, 403, 404
// (unknown session or path), 405, 406, 409 (a second standalone stream), 413,
// 415, 500 (a panic before anything was written) and 503 (after Close).
// Every error body is a JSON-RPC error response with a null id.
type HTTPHandler struct {
	ep             Endpoint
	log            *slog.Logger
	path           string
	token          guard.Token
	loopback       bool
	allowedOrigins guard.Origins
	maxBytes       int64
	idle           time.Duration
	resume         func(ctx context.Context, id string) (*Session, bool)

	// Tunables; tests shorten them.
	keepAlive    time.Duration    // period of SSE keepalive comments
	writeTimeout time.Duration    // bound on one write to an agent
	drainGrace   time.Duration    // how long a POST waits for the core after its context ended
	now          func() time.Time // clock for idle accounting

	baseCtx   context.Context // parent of every session's context; cancelled by Close
	cancel    context.CancelFunc
	stop      chan struct{} // closed by Close; stops the janitor
	janitorWG sync.WaitGroup
	closeOnce sync.Once

	mu       sync.Mutex
	closed   bool
	sessions map[string]*httpSession
	resumeMu sync.Mutex // one Resume at a time, so an id is restored once
}

var _ http.Handler = (*HTTPHandler)(nil)

// NewHTTPHandler validates opts and returns the front, an *HTTPHandler. The
// caller must call its Close method when the server shuts down, to end the
// sessions; calling it before http.Server.Shutdown also ends the open event
// streams, which Shutdown would otherwise wait for.
func NewHTTPHandler(ep Endpoint, opts HTTPOptions) (http.Handler, error) {
	h, err := newHTTPHandler(ep, opts)
	if err != nil {
		return nil, err // not a nil *HTTPHandler inside a non-nil interface
	}
	return h, nil
}

func newHTTPHandler(ep Endpoint, opts HTTPOptions) (*HTTPHandler, error) {
	if ep == nil {
		return nil, errors.New("http front: NewHTTPHandler needs an endpoint")
	}
	h := &HTTPHandler{
		ep:           ep,
		log:          frontLogger(opts.Logger),
		path:         opts.Path,
		loopback:     opts.Loopback,
		maxBytes:     opts.MaxMessageBytes,
		idle:         opts.SessionIdleTimeout,
		resume:       opts.Resume,
		keepAlive:    15 * time.Second,
		writeTimeout: 30 * time.Second,
		drainGrace:   5 * time.Second,
		now:          time.Now,
		sessions:     make(map[string]*httpSession),
		stop:         make(chan struct{}),
	}
	if h.path == "" {
		h.path = httpDefaultPath
	}
	if !strings.HasPrefix(h.path, "/") {
		return nil, fmt.Errorf("http front: Path %q must start with \"/\"", opts.Path)
	}
	var err error
	if h.token, err = frontToken("http front", opts.Token, opts.Loopback); err != nil {
		return nil, err
	}
	if h.maxBytes < 0 {
		return nil, fmt.Errorf("http front: MaxMessageBytes %d is negative", opts.MaxMessageBytes)
	}
	if h.maxBytes == 0 {
		h.maxBytes = DefaultMaxMessageBytes
	}
	if h.idle < 0 {
		return nil, fmt.Errorf("http front: SessionIdleTimeout %v is negative", opts.SessionIdleTimeout)
	}
	if h.idle == 0 {
		h.idle = httpDefaultIdleTimeout
	}
	if h.allowedOrigins, err = httpOrigins("http front", opts.AllowedOrigins); err != nil {
		return nil, err
	}
	h.baseCtx, h.cancel = context.WithCancel(context.Background())
	period := min(max(h.idle/4, time.Second), time.Minute)
	h.janitorWG.Add(1)
	go h.janitor(period)
	return h, nil
}

// Close ends every session (the endpoint's CloseSession is called for each),
// ends open streams and refuses further requests with 503. It is safe to
// call more than once. It does not wait for in-flight HTTP requests; the
// http.Server's Shutdown does that.
func (h *HTTPHandler) Close() error {
	h.closeOnce.Do(func() {
		h.mu.Lock()
		h.closed = true
		var all []*httpSession
		for _, hs := range h.sessions {
			if h.detachLocked(hs) {
				all = append(all, hs)
			}
		}
		h.mu.Unlock()
		close(h.stop)
		for _, hs := range all {
			h.finishClose(hs)
		}
		h.cancel()
		h.janitorWG.Wait()
	})
	return nil
}

// ServeHTTP implements http.Handler.
func (h *HTTPHandler) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	w := &httpTrackWriter{ResponseWriter: rw}
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler { // net/http's own sentinel: let it abort the connection
				panic(v)
			}
			h.log.Error("http front: panic serving a request", "method", r.Method,
				"panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			if !w.wrote.Load() {
				httpError(w, http.StatusInternalServerError, CodeInternalError, "internal error")
			}
		}
	}()

	if !h.checkOrigin(w, r) {
		return
	}
	if !h.checkToken(w, r) {
		return
	}
	if r.URL.Path != h.path {
		httpError(w, http.StatusNotFound, CodeInvalidRequest, "not found: the MCP endpoint is %s", h.path)
		return
	}
	h.mu.Lock()
	closed := h.closed
	h.mu.Unlock()
	if closed {
		httpError(w, http.StatusServiceUnavailable, CodeInternalError, "service unavailable: the server is shutting down")
		return
	}
	switch r.Method {
	case http.MethodPost:
		h.servePost(w, r)
	case http.MethodGet:
		h.serveGet(w, r)
	case http.MethodDelete:
		h.serveDelete(w, r)
	default:
		w.Header().Set("Allow", "GET, POST, DELETE")
		httpError(w, http.StatusMethodNotAllowed, CodeInvalidRequest, "method not allowed: %s (allowed: GET, POST, DELETE)", r.Method)
	}
}

// Guard wraps next (the listener's /metrics and /healthz) in the same Host,
// Origin and bearer-token checks as the MCP endpoint: what it serves
// (upstream names, redaction counts, session counts) is no more public than
// the sessions themselves.
func (h *HTTPHandler) Guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !h.checkOrigin(w, r) || !h.checkToken(w, r) {
			return
		}
		next.ServeHTTP(w, r)
	})
}

// servePost handles one POST: a message or a batch.
func (h *HTTPHandler) servePost(w *httpTrackWriter, r *http.Request) {
	body, allowJSON, allowSSE, ok := h.readPost(w, r)
	if !ok {
		return
	}
	items, batch := frontDecode(body)
	var (
		fails         [][]byte
		nReq, nValid  int
		initialize    *Message
		sessionHeader = r.Header.Get("Mcp-Session-Id")
	)
	for _, it := range items {
		if it.msg == nil {
			fails = append(fails, it.fail)
			continue
		}
		nValid++
		if it.msg.IsRequest() {
			nReq++
			if it.msg.Method == "initialize" {
				initialize = it.msg
			}
		}
	}
	if nValid == 0 {
		httpWriteJSON(w, http.StatusBadRequest, httpBody(fails, batch))
		return
	}
	if initialize != nil && batch {
		httpError(w, http.StatusBadRequest, CodeInvalidRequest, "invalid request: initialize must be sent alone, not in a batch")
		return
	}

	var hs *httpSession
	var err error
	if initialize != nil {
		// A new session, whatever Mcp-Session-Id says. The protocol version
		// is negotiated in the body, so the header is not checked here.
		if hs, err = h.openSession(); err != nil {
			h.log.Error("http front: opening a session", "err", err)
			httpError(w, http.StatusServiceUnavailable, CodeInternalError, "service unavailable: %v", err)
			return
		}
	} else {
		if !h.checkVersion(w, r) {
			return
		}
		if hs = h.acquire(w, r, sessionHeader); hs == nil {
			return
		}
	}
	defer h.release(hs)
	ctx, cancel := h.requestContext(r, hs)
	defer cancel()

	if nReq == 0 {
		out := hs.standaloneOutbound()
		for _, it := range items {
			if it.msg != nil {
				frontDeliver(ctx, h.log, h.ep, hs.s, it.msg, out)
			}
		}
		if len(fails) > 0 {
			httpWriteJSON(w, http.StatusOK, httpBody(fails, batch))
			return
		}
		w.WriteHeader(http.StatusAccepted)
		return
	}

	p := &httpPost{
		w:            w,
		writeTimeout: h.writeTimeout,
		allowJSON:    allowJSON,
		allowSSE:     allowSSE,
		batch:        batch,
		await:        newFrontAwait(),
		allPaid:      make(chan struct{}),
		held:         fails,
	}
	if initialize != nil {
		w.Header().Set("Mcp-Session-Id", hs.id)
		p.initKey = frontIDKey(initialize.ID)
	}
	h.answerPost(ctx, hs, p, items)
}

// readPost checks what a POST accepts and its media type and reads its
// body, at most maxBytes. It answers the refusals itself and then reports
// false.
func (h *HTTPHandler) readPost(w *httpTrackWriter, r *http.Request) (body []byte, allowJSON, allowSSE, ok bool) {
	allowJSON = httpAccepts(r.Header, "application/json")
	allowSSE = httpAccepts(r.Header, "text/event-stream")
	if !allowJSON && !allowSSE {
		httpError(w, http.StatusNotAcceptable, CodeInvalidRequest,
			"not acceptable: the Accept header must allow application/json and text/event-stream")
		return nil, false, false, false
	}
	if ct := r.Header.Get("Content-Type"); ct != "" {
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
			httpError(w, http.StatusUnsupportedMediaType, CodeInvalidRequest,
				"unsupported media type %q: the body must be application/json", ct)
			return nil, false, false, false
		}
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.maxBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			httpError(w, http.StatusRequestEntityTooLarge, CodeMessageTooLarge,
				"message too large: a request body may be at most %d bytes (maxMessageBytes)", h.maxBytes)
			return nil, false, false, false
		}
		httpError(w, http.StatusBadRequest, CodeParseError, "parse error: reading the request body: %v", err)
		return nil, false, false, false
	}
	return body, allowJSON, allowSSE, true
}

// answerPost hands a POST's messages to the core, its requests answered
// on p, and waits for the answers (awaitPost).
func (h *HTTPHandler) answerPost(ctx context.Context, hs *httpSession, p *httpPost, items []frontItem) {
	defer p.finish() // never leave a writer able to touch w once we return
	for _, it := range items {
		if it.msg != nil && it.msg.IsRequest() {
			p.await.add(it.msg.ID)
		}
	}
	var wg sync.WaitGroup
	for _, it := range items {
		switch {
		case it.msg == nil:
		case it.msg.IsRequest():
			wg.Add(1)
			go func() {
				defer wg.Done()
				frontDeliver(ctx, h.log, h.ep, hs.s, it.msg, p)
			}()
		default:
			frontDeliver(ctx, h.log, h.ep, hs.s, it.msg, hs.standaloneOutbound())
		}
	}
	delivered := make(chan struct{})
	go func() {
		wg.Wait()
		close(delivered)
	}()
	h.awaitPost(ctx, p, delivered)
	p.finish()
	if p.initFailed {
		// The core refused initialize: the session it opened is of no use.
		h.closeSession(hs)
	}
}

// awaitPost waits until every response owed on p is written or every
// request's Deliver has returned. When the request's context ends first (the
// agent went away, or the session closed) the core is given drainGrace to
// notice before the front answers for it.
func (h *HTTPHandler) awaitPost(ctx context.Context, p *httpPost, delivered <-chan struct{}) {
	tick := time.NewTicker(h.keepAlive)
	defer tick.Stop()
	for {
		select {
		case <-p.allPaid:
			return
		case <-delivered:
			return
		case <-tick.C:
			p.keepAlive()
		case <-ctx.Done():
			t := time.NewTimer(h.drainGrace)
			defer t.Stop()
			select {
			case <-p.allPaid:
			case <-delivered:
			case <-t.C:
				h.log.Warn("http front: requests still running after their context ended; answering for them")
			}
			return
		}
	}
}

// serveGet opens the session's standalone event stream.
func (h *HTTPHandler) serveGet(w *httpTrackWriter, r *http.Request) {
	if !httpAccepts(r.Header, "text/event-stream") {
		httpError(w, http.StatusNotAcceptable, CodeInvalidRequest,
			"not acceptable: a GET opens an event stream, so the Accept header must allow text/event-stream")
		return
	}
	if !h.checkVersion(w, r) {
		return
	}
	hs := h.acquire(w, r, r.Header.Get("Mcp-Session-Id"))
	if hs == nil {
		return
	}
	defer h.release(hs)

	st := newSSEStream(w, h.writeTimeout)
	o := &httpStandalone{hs: hs, st: st}
	hs.mu.Lock()
	if hs.standalone != nil || hs.attaching {
		hs.mu.Unlock()
		httpError(w, http.StatusConflict, CodeInvalidRequest, "conflict: the session already has an open standalone event stream")
		return
	}
	hs.attaching = true
	replay := hs.ring.after(r.Header.Get("Last-Event-ID"))
	hs.mu.Unlock()

	err := st.start()
	for _, e := range replay {
		if err != nil {
			break
		}
		err = st.event(strconv.FormatUint(e.id, 10), e.data)
	}
	// SetStandalone is called outside hs.mu so that the front never holds
	// its lock while the core's session lock is taken.
	hs.s.SetStandalone(o)
	hs.mu.Lock()
	hs.attaching = false
	hs.standalone = o
	hs.mu.Unlock()

	if err == nil {
		tick := time.NewTicker(h.keepAlive)
	loop:
		for {
			select {
			case <-r.Context().Done():
				break loop
			case <-hs.ctx.Done():
				break loop
			case <-st.failed:
				break loop
			case <-tick.C:
				if st.comment("keepalive") != nil {
					break loop
				}
			}
		}
		tick.Stop()
	}

	// Detach: the core stops using the stream before another GET may open
	// one, so that our SetStandalone(nil) cannot clear a newer stream.
	o.mu.Lock()
	st.close()
	o.mu.Unlock()
	hs.s.SetStandalone(nil)
	hs.mu.Lock()
	if hs.standalone == o {
		hs.standalone = nil
	}
	hs.mu.Unlock()
}

// serveDelete ends a session.
func (h *HTTPHandler) serveDelete(w *httpTrackWriter, r *http.Request) {
	if !h.checkVersion(w, r) {
		return
	}
	hs := h.acquire(w, r, r.Header.Get("Mcp-Session-Id"))
	if hs == nil {
		return
	}
	h.release(hs)
	h.closeSession(hs)
	w.WriteHeader(http.StatusNoContent)
}

// checkOrigin guards against DNS rebinding (see httpOriginRefusal). It
// writes 403 and reports false when the request is refused.
func (h *HTTPHandler) checkOrigin(w http.ResponseWriter, r *http.Request) bool {
	reason := guard.Refusal(r, h.loopback, h.allowedOrigins)
	if reason == "" {
		return true
	}
	h.log.Debug("http front: refused a request", "host", r.Host, "origin", r.Header.Get("Origin"))
	httpError(w, http.StatusForbidden, CodeInvalidRequest, "%s", reason)
	return false
}

// checkToken enforces the bearer token. It writes 401 and reports false when
// the request lacks it.
func (h *HTTPHandler) checkToken(w http.ResponseWriter, r *http.Request) bool {
	if h.token.Bearer(r) {
		return true
	}
	w.Header().Set("WWW-Authenticate", `Bearer realm="foldproxy"`)
	httpError(w, http.StatusUnauthorized, CodeInvalidRequest, "unauthorized: a valid Authorization: Bearer token is required")
	return false
}

// checkVersion refuses an MCP-Protocol-Version header naming a version this
// front does not speak. A missing header is accepted: the session's
// negotiated version applies.
func (h *HTTPHandler) checkVersion(w http.ResponseWriter, r *http.Request) bool {
	v := r.Header.Get("Mcp-Protocol-Version")
	if v == "" || slices.Contains(httpProtocolVersions, v) {
		return true
	}
	httpError(w, http.StatusBadRequest, CodeInvalidRequest,
		"bad request: unsupported MCP-Protocol-Version %q (supported: %s)", v, strings.Join(httpProtocolVersions, ", "))
	return false
}
