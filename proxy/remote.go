package proxy

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/foldproxy/foldproxy/fold"
	"github.com/foldproxy/foldproxy/intercept"
	"github.com/foldproxy/foldproxy/policy"
	"github.com/foldproxy/foldproxy/policy/jsonscan"
	"github.com/foldproxy/foldproxy/upstreams"
)

// The remote MCP front of transparent mode.
//
// A remote MCP server named in foldproxy.proxy.mcp is reached by its client
// (Claude Code, mcp-remote, an SDK) through the forward proxy; foldproxy
// terminates TLS for its host and serves its requests here:
//
//   - The client's MCP session stays the client's: every request is
//     forwarded to the real server with the client's own headers
//     (Authorization, Mcp-Session-Id, Mcp-Protocol-Version, Last-Event-ID)
//     and every answer goes back with the server's, Mcp-Session-Id and
//     WWW-Authenticate included. foldproxy keeps no header: a session is
//     found by a hash of its id, held in memory only, and nothing of a
//     header is logged or stored.
//   - tools/call, resources/read and prompts/get go through the intercept
//     chain (scrub, tokens, budget, audit, metrics) as calls to an upstream
//     of the MCP front do: on the way in when the request is seen (a call
//     attributed to a closed branch is refused without reaching the
//     server), on the way out when its response arrives, in a JSON body or
//     an event stream: the POST's own stream (streamable HTTP) or the GET
//     /sse stream (the legacy SSE transport).
//   - Every other message from the server (notifications, its requests to
//     the client, other results) is scrubbed; what cannot be scanned is
//     withheld. Every answer of the MCP endpoint is read as clients read it
//     (the media type before ';'): a 2xx JSON body or event stream message
//     by message, anything else (error statuses, other content types or
//     none, events of other names, comments) scrubbed as JSON or text.
//     Nothing the server sends there reaches the client unscanned: a body
//     that cannot be read whole, decoded or scanned is withheld.
//   - With foldTools, the fold tools join the server's tools/list and are
//     answered by foldproxy itself.
//
// Sessions. Each client MCP session is one fold session (transport
// "transparent"), with its own root and branch tree: keyed by the
// Mcp-Session-Id the server gave it (streamable HTTP), by the endpoint
// the server announced on its GET /sse stream (legacy SSE), or, for a
// stateless server that gives no session id, by the client's connection
// to foldproxy. It ends when the client deletes the session, the SSE
// stream ends, the connection closes, or after remoteSessionIdle without
// a request. Fold sessions of transparent mode do not survive a restart of
// foldproxy (the client's MCP session does; it gets a new fold session).

// remoteSessionIdle ends a fold session whose client sent nothing for this
// long (clients rarely delete streamable HTTP sessions).
const remoteSessionIdle = time.Hour

// TransportTransparent is the fold session transport of clients of remote
// MCP servers intercepted in transparent mode.
const TransportTransparent = "transparent"

// RemoteOptions configures the remote MCP front.
type RemoteOptions struct {
	// Servers are the intercepted remote MCP servers. Required.
	Servers []policy.RemoteMCP
	// Settings give the call timeouts (by server name) and the message
	// size bound.
	Settings policy.Settings
	// Fold is the fold engine. Required.
	Fold Folder
	// Interceptors run around every intercepted call and around
	// branch_recall, ControlInterceptors around the other fold tools, as
	// on the MCP front (Options): the first listed outermost, the lists
	// intercept.NewChain and NewControlChain build.
	Interceptors        []intercept.Interceptor
	ControlInterceptors []intercept.Interceptor
	// Scrubber cleans every other message from the servers. Required:
	// foldproxy relays nothing it could not scan.
	Scrubber JSONScrubber
	// Observer hears of sessions and of secrets removed from relayed
	// messages; nil: nobody.
	Observer Observer
	// Transport reaches the real servers (upstream TLS verified). Required.
	Transport http.RoundTripper
	// Logger receives diagnostics, never a header or a body. nil discards.
	Logger *slog.Logger
}

// RemoteFront serves the requests of intercepted remote MCP servers.
type RemoteFront struct {
	opts    RemoteOptions
	log     *slog.Logger
	servers []*remoteServer
	maxMsg  int64

	forward Handler // the chain around awaitResponse
	control Handler
	recall  Handler
	relay   *httputil.ReverseProxy

	mu       sync.Mutex
	sessions map[string]*remoteSession // by key (see sessionKey)
	legacy   map[string]*remoteSession // by target + " " + announced endpoint
	now      func() time.Time
}

type remoteServer struct {
	name      string
	target    string // host:port, host lower case
	path      string
	url       *url.URL
	foldTools bool
}

// NewRemoteFront validates opts and returns the front.
func NewRemoteFront(opts RemoteOptions) (*RemoteFront, error) {
	if opts.Fold == nil || opts.Scrubber == nil || opts.Transport == nil {
		return nil, errors.New("remote MCP front: Fold, Scrubber and Transport are required")
	}
	f := &RemoteFront{
		opts:     opts,
		log:      frontLogger(opts.Logger),
		maxMsg:   opts.Settings.MaxMessageBytes,
		sessions: map[string]*remoteSession{},
		legacy:   map[string]*remoteSession{},
		now:      time.Now,
	}
	if f.maxMsg <= 0 {
		f.maxMsg = policy.Default().MaxMessageBytes
	}
	for i, s := range opts.Servers {
		u, err := policy.ParseRemoteURL(s.URL)
		if err != nil {
			return nil, fmt.Errorf("remote MCP front: proxy.mcp[%d].url %q %v", i, s.URL, err)
		}
		name := s.Name
		if name == "" {
			name = u.Hostname()
		}
		f.servers = append(f.servers, &remoteServer{name: name, target: u.Host, path: u.Path, url: u, foldTools: s.Folds()})
	}
	f.forward = intercept.Chain(f.awaitResponse, opts.Interceptors...)
	f.control = intercept.Chain(f.callFold, opts.ControlInterceptors...)
	f.recall = intercept.Chain(f.callFold, opts.Interceptors...)
	f.relay = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			target, _ := pr.In.Context().Value(remoteTargetKey{}).(string)
			pr.Out.URL.Scheme, pr.Out.URL.Host = "https", target
			pr.Out.Host = pr.In.Host
			for _, k := range []string{"Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto"} {
				if v, ok := pr.In.Header[k]; ok {
					pr.Out.Header[k] = v
				}
			}
		},
		Transport:     opts.Transport,
		FlushInterval: -1,
		ErrorLog:      slog.NewLogLogger(f.log.Handler(), slog.LevelDebug),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			proxyRefusal(w, http.StatusBadGateway, "foldproxy could not reach "+r.Host+": "+err.Error())
		},
	}
	return f, nil
}

// Targets are the host:port of every intercepted server.
func (f *RemoteFront) Targets() []string {
	out := make([]string, 0, len(f.servers))
	for _, s := range f.servers {
		out = append(out, s.target)
	}
	return out
}

// HandlesTarget, ServeMCP, Relay and ConnClosed make RemoteFront the
// forward proxy's transparent.Remote.

// HandlesTarget reports whether target (host:port) is a server's.
func (f *RemoteFront) HandlesTarget(target string) bool { return f.handlesTarget(target) }

// ServeMCP serves r when it is an MCP request of target's server (see
// serve) and reports whether it did.
func (f *RemoteFront) ServeMCP(w http.ResponseWriter, r *http.Request, target string, conn net.Conn) bool {
	return f.serve(w, r.WithContext(context.WithValue(r.Context(), remoteTargetKey{}, target)), target, conn)
}

// Relay sends r to its real server, target, untouched and relays the
// answer.
func (f *RemoteFront) Relay(w http.ResponseWriter, r *http.Request, target string) {
	f.relay.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), remoteTargetKey{}, target)))
}

// remoteTargetKey is the context key of an intercepted request's CONNECT
// target (host:port), whatever its Host header says.
type remoteTargetKey struct{}

// proxyRefusal answers a request foldproxy refuses itself, in plain text
// marked with X-Foldproxy-Error (as the forward proxy does).
func proxyRefusal(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Foldproxy-Error", "1")
	w.Header().Set("Connection", "close")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, msg+"\n")
}

// ConnClosed ends the sessions keyed by conn (stateless servers).
func (f *RemoteFront) ConnClosed(conn net.Conn) { f.connClosed(conn) }

// handlesTarget reports whether target (host:port) is a server's.
func (f *RemoteFront) handlesTarget(target string) bool {
	target = strings.ToLower(target)
	for _, s := range f.servers {
		if s.target == target {
			return true
		}
	}
	return false
}

// serve serves r, a request on an intercepted connection to target, if it
// is an MCP request of one of the servers; false when it is not (another
// path of that host), for the caller to relay.
func (f *RemoteFront) serve(w http.ResponseWriter, r *http.Request, target string, conn net.Conn) bool {
	target = strings.ToLower(target)
	for _, s := range f.servers {
		if s.target != target || s.path != r.URL.Path {
			continue
		}
		switch r.Method {
		case http.MethodPost:
			f.servePost(w, r, f.streamableSession(s, r, conn))
		case http.MethodGet:
			f.serveGet(w, r, s, conn)
		case http.MethodDelete:
			f.serveDelete(w, r, s, conn)
		default:
			f.serveOther(w, r, s)
		}
		return true
	}
	if r.Method == http.MethodPost {
		f.mu.Lock()
		sess := f.legacy[target+" "+r.URL.RequestURI()]
		f.mu.Unlock()
		if sess != nil {
			f.servePost(w, r, sess)
			return true
		}
	}
	return false
}

// remoteSession is one client MCP session of a remote server.
type remoteSession struct {
	key    string
	srv    *remoteServer
	id     string // the fold session id
	ctx    context.Context
	cancel context.CancelCauseFunc
	inject chan []byte // legacy SSE: answers foldproxy gives itself, for the GET stream

	mu       sync.Mutex
	opened   bool
	ended    bool
	lastSeen time.Time
	pending  map[string]*pendingCall // by JSON-RPC id
	lists    map[string]bool         // tools/list requests awaiting their answer
}

// hashKey is how a client's session id is kept: hashed, so that foldproxy
// holds no usable copy of it.
func hashKey(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// streamableSession finds or makes the session of a streamable HTTP
// request: by its Mcp-Session-Id, or by the connection when it has none.
func (f *RemoteFront) streamableSession(s *remoteServer, r *http.Request, conn net.Conn) *remoteSession {
	if sid := r.Header.Get("Mcp-Session-Id"); sid != "" {
		return f.session("s:"+hashKey(s.name, sid), s, nil)
	}
	return f.session(fmt.Sprintf("c:%s:%p", s.name, conn), s, nil)
}

// session finds the session of key, or makes it. Sessions idle past
// remoteSessionIdle are ended on the way.
func (f *RemoteFront) session(key string, s *remoteServer, inject chan []byte) *remoteSession {
	now := f.now()
	f.mu.Lock()
	sess := f.sessions[key]
	var idle []*remoteSession
	if sess == nil {
		for _, o := range f.sessions {
			o.mu.Lock()
			if now.Sub(o.lastSeen) > remoteSessionIdle && len(o.pending) == 0 && o.inject == nil {
				idle = append(idle, o)
			}
			o.mu.Unlock()
		}
		ctx, cancel := context.WithCancelCause(context.Background())
		sess = &remoteSession{key: key, srv: s, id: newID("t"), ctx: ctx, cancel: cancel, inject: inject,
			pending: map[string]*pendingCall{}, lists: map[string]bool{}}
		f.sessions[key] = sess
	}
	f.mu.Unlock()
	sess.mu.Lock()
	sess.lastSeen = now
	sess.mu.Unlock()
	for _, o := range idle {
		f.endSession(o, "idle")
	}
	return sess
}

// open opens the fold session on first use.
func (f *RemoteFront) open(ctx context.Context, sess *remoteSession) error {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	if sess.ended {
		return errors.New("the MCP session ended")
	}
	if sess.opened {
		f.opts.Fold.TouchSession(ctx, sess.id)
		return nil
	}
	now := f.now()
	if err := f.opts.Fold.OpenSession(ctx, fold.SessionRecord{
		ID: sess.id, Transport: TransportTransparent, Created: now, LastSeen: now,
		ClientInfo: json.RawMessage(`{"name":` + string(jsonscan.Quote(sess.srv.name)) + `}`),
	}); err != nil {
		return err
	}
	sess.opened = true
	if f.opts.Observer != nil {
		f.opts.Observer.SessionOpened()
	}
	f.log.Debug("transparent MCP session opened", "server", sess.srv.name, "session", sess.id)
	return nil
}

// endSession forgets sess, cancels its calls in flight and ends its fold
// session (its open branches are closed by fold's session-end rules).
func (f *RemoteFront) endSession(sess *remoteSession, why string) {
	f.mu.Lock()
	if f.sessions[sess.key] == sess {
		delete(f.sessions, sess.key)
	}
	for k, v := range f.legacy {
		if v == sess {
			delete(f.legacy, k)
		}
	}
	f.mu.Unlock()
	sess.mu.Lock()
	if sess.ended {
		sess.mu.Unlock()
		return
	}
	sess.ended = true
	opened := sess.opened
	sess.mu.Unlock()
	sess.cancel(fmt.Errorf("the client's MCP session ended (%s)", why))
	if !opened {
		return
	}
	grace := f.opts.Settings.Fold.SessionEndGrace.D()
	if grace <= 0 {
		grace = 30 * time.Second
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), grace)
		defer cancel()
		if err := f.opts.Fold.EndSession(ctx, sess.id); err != nil {
			f.log.Warn("ending a transparent MCP session", "server", sess.srv.name, "session", sess.id, "err", err)
		}
		if f.opts.Observer != nil {
			f.opts.Observer.SessionClosed()
		}
	}()
	f.log.Debug("transparent MCP session ended", "server", sess.srv.name, "session", sess.id, "why", why)
}

// connClosed ends the sessions keyed by conn (stateless servers).
func (f *RemoteFront) connClosed(conn net.Conn) {
	suffix := fmt.Sprintf(":%p", conn)
	f.mu.Lock()
	var list []*remoteSession
	for k, s := range f.sessions {
		if strings.HasPrefix(k, "c:") && strings.HasSuffix(k, suffix) {
			list = append(list, s)
		}
	}
	f.mu.Unlock()
	for _, s := range list {
		f.endSession(s, "connection closed")
	}
}

// Close ends every session.
func (f *RemoteFront) Close() {
	f.mu.Lock()
	list := make([]*remoteSession, 0, len(f.sessions))
	for _, s := range f.sessions {
		list = append(list, s)
	}
	f.mu.Unlock()
	for _, s := range list {
		f.endSession(s, "foldproxy stopping")
	}
}

// chained reports whether a method's results go through the intercept chain.
func chained(method string) bool {
	switch method {
	case "tools/call", "resources/read", "prompts/get":
		return true
	}
	return false
}

// pendingCall is a call whose exchange runs the chain while the request
// travels to the server and its response back.
type pendingCall struct {
	forward chan struct{} // closed when the chain lets the call go to the server
	resp    chan *Message // the server's response (buffered)
	done    chan struct{} // closed when the chain is done; final is set
	final   []byte        // the response message the client gets
	cancel  context.CancelCauseFunc
	sess    *remoteSession //
}

type pendingKey struct{}

// awaitResponse is the innermost handler of the chain: it lets the request
// go and waits for its response.
func (f *RemoteFront) awaitResponse(ctx context.Context, ex *intercept.Exchange) error {
	pc, _ := ctx.Value(pendingKey{}).(*pendingCall)
	if pc == nil {
		ex.Err = errors.New("foldproxy: internal error: no pending call")
		return ex.Err
	}
	close(pc.forward)
	t0 := time.Now()
	select {
	case m := <-pc.resp:
		ex.UpstreamLatency = time.Since(t0)
		if m.Error != nil {
			ex.RPCError = &upstreams.RPCError{Code: m.Error.Code, Message: m.Error.Message, Data: m.Error.Data}
			ex.Outcome = intercept.OutcomeError
			return nil
		}
		ex.Result = m.Result
		return nil
	case <-ctx.Done():
		ex.Outcome = intercept.OutcomeError
		ex.Err = fmt.Errorf("%s on %s: %w", ex.Method, ex.Upstream, context.Cause(ctx))
		return ex.Err
	}
}

// callFold is the innermost handler of the fold tools.
func (f *RemoteFront) callFold(ctx context.Context, ex *intercept.Exchange) error {
	return callFoldTool(ctx, f.opts.Fold, ex)
}

// exchangeOf is the exchange of a chained request.
func exchangeOf(sess *remoteSession, msg *Message) *intercept.Exchange {
	params := msg.Params
	if len(params) == 0 || params[0] != '{' {
		params = json.RawMessage("{}")
	}
	ex := &intercept.Exchange{Session: sess.id, Upstream: sess.srv.name, Method: msg.Method, Params: params, Start: time.Now()}
	switch msg.Method {
	case "tools/call", "prompts/get":
		ex.Name = jsonscan.StringField(params, "name")
		ex.Args, _ = jsonscan.Field(params, "arguments")
		if msg.Method == "tools/call" && (len(ex.Args) == 0 || string(ex.Args) == "null") {
			ex.Args = json.RawMessage("{}")
		}
	case "resources/read":
		ex.Name = jsonscan.StringField(params, "uri")
	}
	return ex
}

// startCall opens the fold session if needed and runs a chained request's
// exchange; the caller forwards the request once pc.forward is closed, or
// answers pc.final once pc.done is (the chain refused it).
func (f *RemoteFront) startCall(sess *remoteSession, msg *Message) *pendingCall {
	pc := &pendingCall{forward: make(chan struct{}), resp: make(chan *Message, 1), done: make(chan struct{}), sess: sess}
	if err := f.open(sess.ctx, sess); err != nil {
		pc.final = localAnswer(msg, fmt.Sprintf("foldproxy could not open the fold session of this MCP session: %v", err))
		close(pc.done)
		return pc
	}
	d := f.opts.Settings.CallTimeout(sess.srv.name)
	ctx, cancel := context.WithCancelCause(sess.ctx)
	pc.cancel = cancel
	key := string(msg.ID)
	sess.mu.Lock()
	if old := sess.pending[key]; old != nil {
		old.cancel(errors.New("the client reused this request id"))
	}
	sess.pending[key] = pc
	sess.mu.Unlock()
	ex := exchangeOf(sess, msg)
	go func() {
		defer close(pc.done)
		tctx, tcancel := context.WithTimeoutCause(ctx, d, fmt.Errorf(
			"the server did not answer within %s (foldproxy.upstreams.%s.callTimeout)", d, sess.srv.name))
		defer tcancel()
		defer cancel(nil)
		herr := f.forward(context.WithValue(tctx, pendingKey{}, pc), ex)
		pc.final = answerOf(msg, ex, herr)
		sess.mu.Lock()
		if sess.pending[key] == pc {
			delete(sess.pending, key)
		}
		sess.mu.Unlock()
	}()
	return pc
}

// answerOf turns a finished exchange into the response message, as the
// MCP front's finish does.
func answerOf(msg *Message, ex *intercept.Exchange, herr error) []byte {
	if ex.Err == nil && herr != nil {
		ex.Err = herr
	}
	switch {
	case ex.Err != nil:
		if msg.Method == "tools/call" {
			return Response(msg.ID, toolError(ex.Err.Error()), nil)
		}
		return Response(msg.ID, nil, &Error{Code: CodeInternalError, Message: ex.Err.Error()})
	case ex.RPCError != nil:
		return Response(msg.ID, nil, rpcErrorOf(ex.RPCError))
	case ex.Result == nil:
		return Response(msg.ID, nil, Errorf(CodeInternalError, "%s: no result", msg.Method))
	}
	return Response(msg.ID, ex.Result, nil)
}

// localAnswer is an error answer foldproxy gives itself.
func localAnswer(msg *Message, text string) []byte {
	if msg.Method == "tools/call" {
		return Response(msg.ID, toolError(text), nil)
	}
	return Response(msg.ID, nil, &Error{Code: CodeInternalError, Message: text})
}

// foldCall answers a fold tool call.
func (f *RemoteFront) foldCall(ctx context.Context, sess *remoteSession, msg *Message) []byte {
	if err := f.open(ctx, sess); err != nil {
		return localAnswer(msg, fmt.Sprintf("foldproxy could not open the fold session of this MCP session: %v", err))
	}
	ex := exchangeOf(sess, msg)
	ex.Upstream = ""
	h := f.control
	if fold.ChargedTool(ex.Name) {
		h = f.recall
	}
	herr := h(ctx, ex)
	return answerOf(msg, ex, herr)
}

// isFoldTool reports whether a tools/call of sess's server names a fold
// tool foldproxy answers.
func (f *RemoteFront) isFoldCall(sess *remoteSession, msg *Message) bool {
	if !sess.srv.foldTools || msg.Method != "tools/call" {
		return false
	}
	name := jsonscan.StringField(msg.Params, "name")
	for _, t := range f.opts.Fold.Tools() {
		if jsonscan.StringField(t, "name") == name {
			return true
		}
	}
	return false
}

// servePost serves a POST of a client: the streamable HTTP endpoint, or a
// legacy SSE session's message endpoint (sess.inject set).
func (f *RemoteFront) servePost(w http.ResponseWriter, r *http.Request, sess *remoteSession) {
	body, err := io.ReadAll(io.LimitReader(r.Body, f.maxMsg+1))
	if err != nil {
		proxyRefusal(w, http.StatusBadRequest, "foldproxy could not read the request: "+err.Error())
		return
	}
	if int64(len(body)) > f.maxMsg {
		proxyRefusal(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("foldproxy: the message is larger than foldproxy.maxMessageBytes (%d)", f.maxMsg))
		return
	}
	msgs, batch, perr := ParseMessages(body)
	if perr != nil {
		// The server answers malformed messages as it would directly.
		f.forwardPost(w, r, sess, body, nil)
		return
	}
	if batch {
		for _, m := range msgs {
			if m.IsRequest() && (chained(m.Method) || f.isFoldCall(sess, m)) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusBadRequest)
				_, _ = w.Write(Response(nil, nil, Errorf(CodeInvalidRequest,
					"foldproxy (transparent mode) does not relay %s in a JSON-RPC batch: send it in a request of its own", m.Method)))
				return
			}
		}
		f.notePosted(sess, msgs)
		f.forwardPost(w, r, sess, body, nil)
		return
	}
	msg := msgs[0]
	var local []byte
	var pc *pendingCall
	switch {
	case msg.IsRequest() && f.isFoldCall(sess, msg):
		local = f.foldCall(r.Context(), sess, msg)
	case msg.IsRequest() && chained(msg.Method):
		pc = f.startCall(sess, msg)
		select {
		case <-pc.forward:
		case <-pc.done:
			local, pc = pc.final, nil
		case <-r.Context().Done():
			if pc.cancel != nil {
				pc.cancel(errors.New("the client went away"))
			}
			return
		}
	default:
		f.notePosted(sess, msgs)
	}
	if local != nil {
		if sess.inject != nil {
			// Legacy SSE: answers travel on the GET stream.
			select {
			case sess.inject <- local:
				w.WriteHeader(http.StatusAccepted)
				_, _ = io.WriteString(w, "Accepted")
			case <-sess.ctx.Done():
				proxyRefusal(w, http.StatusNotFound, "foldproxy: the SSE session ended")
			}
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(local)
		return
	}
	f.forwardPost(w, r, sess, body, pc)
}

// notePosted remembers tools/list requests (whose answers get the fold
// tools) and cancels the calls the client cancels.
func (f *RemoteFront) notePosted(sess *remoteSession, msgs []*Message) {
	for _, m := range msgs {
		switch {
		case m.IsRequest() && m.Method == "tools/list" && sess.srv.foldTools:
			sess.mu.Lock()
			sess.lists[string(m.ID)] = true
			sess.mu.Unlock()
		case m.Method == "notifications/cancelled":
			id, _ := jsonscan.Field(m.Params, "requestId")
			sess.mu.Lock()
			pc := sess.pending[string(id)]
			sess.mu.Unlock()
			if pc != nil && pc.cancel != nil {
				pc.cancel(errors.New("cancelled by the client"))
			}
		}
	}
}

// upstreamRequest is r as sent to the real server: the client's headers
// as they are (its credentials included), bodies unencoded so that
// foldproxy can read the answer.
func upstreamRequest(ctx context.Context, r *http.Request, target string, body []byte) (*http.Request, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	out, err := http.NewRequestWithContext(ctx, r.Method, "https://"+target+r.URL.RequestURI(), rd)
	if err != nil {
		return nil, err
	}
	out.Header = r.Header.Clone()
	for _, k := range []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authorization", "Proxy-Authenticate", "Te", "Trailer", "Transfer-Encoding", "Upgrade"} {
		out.Header.Del(k)
	}
	out.Header.Set("Accept-Encoding", "identity")
	out.Host = r.Host
	if body != nil {
		out.ContentLength = int64(len(body))
	}
	return out, nil
}

// forwardPost sends a POST to the server and relays its answer, each
// message through transform; pc is the chained call it carries, if any.
func (f *RemoteFront) forwardPost(w http.ResponseWriter, r *http.Request, sess *remoteSession, body []byte, pc *pendingCall) {
	target, _ := r.Context().Value(remoteTargetKey{}).(string)
	fail := func(err error) {
		if pc != nil && pc.cancel != nil {
			pc.cancel(err)
			<-pc.done
		}
	}
	req, err := upstreamRequest(r.Context(), r, target, body)
	if err != nil {
		fail(err)
		proxyRefusal(w, http.StatusBadGateway, "foldproxy: "+err.Error())
		return
	}
	resp, err := f.opts.Transport.RoundTrip(req)
	if err != nil {
		fail(fmt.Errorf("foldproxy could not reach the server: %w", err))
		if pc != nil && sess.inject == nil {
			// The client sees the chain's answer (audited as an error).
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(pc.final)
			return
		}
		proxyRefusal(w, http.StatusBadGateway, "foldproxy could not reach "+r.Host+": "+err.Error())
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		// OAuth challenges (401 with WWW-Authenticate), expired sessions
		// (404) and the like reach the client with the server's status
		// and headers, the body scrubbed: clients quote it in their
		// errors.
		fail(fmt.Errorf("the server answered HTTP %d", resp.StatusCode))
		f.relayScrubbed(w, r.Context(), sess.srv, resp)
		return
	}
	f.relayMessages(w, r, resp, sess)
	if pc != nil && sess.inject == nil {
		// Streamable HTTP answers a request on its own POST: an answer
		// stream that ended without it will not bring it.
		fail(errors.New("the server's answer ended without the response"))
	}
}

// mediaType is the media type of h's Content-Type as clients read it (the
// TypeScript SDK's mediaTypeEssence): the part before ';', trimmed, lower
// case; "" when there is none. A strict parser would give up on
// "application/json; charset=" where clients read JSON.
func mediaType(h http.Header) string {
	mt, _, _ := strings.Cut(h.Get("Content-Type"), ";")
	return strings.ToLower(strings.TrimSpace(mt))
}

// encoded reports whether resp's body is in a content coding foldproxy
// does not read (it asks for identity; a server may send another anyway).
func encoded(resp *http.Response) bool {
	ce := strings.ToLower(strings.TrimSpace(resp.Header.Get("Content-Encoding")))
	return ce != "" && ce != "identity"
}

// withholdAnswer answers the client in place of a server's answer that
// foldproxy could not scan: nothing of it is relayed.
func (f *RemoteFront) withholdAnswer(w http.ResponseWriter, s *remoteServer, why string) {
	f.log.Warn("transparent MCP: an answer of the server was withheld", "server", s.name, "why", why)
	proxyRefusal(w, http.StatusBadGateway, "foldproxy withheld the server's answer: "+why)
}

// relayScrubbed relays an answer of a server's MCP endpoint that is not a
// 2xx JSON body or event stream (an error status, another content type or
// none): its status and headers as they are, its body scrubbed, as JSON
// when it is JSON, as text otherwise. A body that cannot be read whole
// (within foldproxy.maxMessageBytes), decoded or scanned is withheld.
func (f *RemoteFront) relayScrubbed(w http.ResponseWriter, ctx context.Context, s *remoteServer, resp *http.Response) {
	if encoded(resp) {
		f.withholdAnswer(w, s, "it is in a content coding foldproxy does not read ("+resp.Header.Get("Content-Encoding")+")")
		return
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, f.maxMsg+1))
	if err != nil || int64(len(data)) > f.maxMsg {
		f.withholdAnswer(w, s, "it could not be read whole (or it is larger than foldproxy.maxMessageBytes)")
		return
	}
	clean := data
	if len(bytes.TrimSpace(data)) > 0 {
		if clean = f.scrubAny(ctx, s, "http "+strconv.Itoa(resp.StatusCode), data); clean == nil {
			f.withholdAnswer(w, s, "it could not be scanned for secrets")
			return
		}
	}
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.Header().Del("Content-Length")
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(clean)
}

// relayMessages relays a 2xx answer: a JSON body or an event stream, each
// JSON-RPC message through transform; anything else scrubbed
// (relayScrubbed).
func (f *RemoteFront) relayMessages(w http.ResponseWriter, r *http.Request, resp *http.Response, sess *remoteSession) {
	mt := mediaType(resp.Header)
	if (mt == "application/json" || mt == "text/event-stream") && encoded(resp) {
		f.withholdAnswer(w, sess.srv, "it is in a content coding foldproxy does not read ("+resp.Header.Get("Content-Encoding")+")")
		return
	}
	switch mt {
	case "application/json":
		data, err := io.ReadAll(io.LimitReader(resp.Body, f.maxMsg+1))
		if err != nil || int64(len(data)) > f.maxMsg {
			f.withholdAnswer(w, sess.srv, "it could not be read whole (or it is larger than foldproxy.maxMessageBytes)")
			return
		}
		out := f.transformBody(r.Context(), sess, data, false)
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.Header().Del("Content-Length")
		w.WriteHeader(resp.StatusCode)
		_, _ = w.Write(out)
	case "text/event-stream":
		f.relayStream(w, r, resp, sess, nil)
	default:
		f.relayScrubbed(w, r.Context(), sess.srv, resp)
	}
}

// transformBody transforms a JSON body: one message or a batch.
// For an event's data (stream), a message withheld is dropped (nil); a
// JSON body always gets an answer.
func (f *RemoteFront) transformBody(ctx context.Context, sess *remoteSession, data []byte, stream bool) []byte {
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) > 0 && trimmed[0] == '[' {
		var raws []json.RawMessage
		if json.Unmarshal(trimmed, &raws) != nil {
			if stream {
				return nil
			}
			return f.withheld(nil)
		}
		out := make([]json.RawMessage, 0, len(raws))
		for _, m := range raws {
			if b := f.transform(ctx, sess, m); b != nil {
				out = append(out, b)
			}
		}
		return marshalNoEscape(out)
	}
	if b := f.transform(ctx, sess, trimmed); b != nil || stream {
		return b
	}
	return f.withheld(nil)
}

// withheld is the answer that replaces a message foldproxy could not scan.
func (f *RemoteFront) withheld(id json.RawMessage) []byte {
	return Response(id, nil, Errorf(CodeInternalError, "foldproxy withheld the server's message: it could not be scanned for secrets"))
}

// transform is what the client gets of one message from the server: a
// call's response after the chain, a tools/list answer with the fold
// tools, anything else scrubbed. nil: drop it.
func (f *RemoteFront) transform(ctx context.Context, sess *remoteSession, raw []byte) []byte {
	msg, perr := parseOne(raw)
	if perr != nil {
		f.log.Debug("transparent MCP: a message from the server that is not JSON-RPC was withheld", "server", sess.srv.name)
		return nil
	}
	if msg.IsResponse() {
		key := string(msg.ID)
		sess.mu.Lock()
		pc := sess.pending[key]
		if pc != nil {
			delete(sess.pending, key)
		}
		list := sess.lists[key]
		delete(sess.lists, key)
		sess.mu.Unlock()
		if pc != nil {
			pc.resp <- msg
			<-pc.done
			return pc.final
		}
		clean := f.scrub(ctx, sess, "response", raw)
		if clean == nil {
			return f.withheld(msg.ID)
		}
		if list {
			clean = f.addFoldTools(clean)
		}
		return clean
	}
	return f.scrub(ctx, sess, msg.Method, raw)
}

// scrub scrubs a whole message; nil when it could not be scanned.
func (f *RemoteFront) scrub(ctx context.Context, sess *remoteSession, method string, raw []byte) []byte {
	return f.scrubJSON(ctx, sess.srv, method, raw)
}

// scrubAny scrubs data, as JSON when it is valid JSON, else as text; nil
// when it could not be scanned.
func (f *RemoteFront) scrubAny(ctx context.Context, s *remoteServer, what string, data []byte) []byte {
	if jsonscan.Valid(data) {
		return f.scrubJSON(ctx, s, what, data)
	}
	// The scrubber reads JSON: text goes in as one JSON string.
	clean := f.scrubJSON(ctx, s, what, jsonscan.Quote(string(data)))
	if clean == nil {
		return nil
	}
	var text string
	if json.Unmarshal(clean, &text) != nil {
		return nil
	}
	return []byte(text)
}

// scrubJSON scrubs raw, a JSON value from server s; nil when it could not
// be scanned.
func (f *RemoteFront) scrubJSON(ctx context.Context, s *remoteServer, method string, raw []byte) []byte {
	d := f.opts.Settings.Scrub.Timeout.D()
	if d <= 0 {
		d = policy.Default().Scrub.Timeout.D()
	}
	sctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	clean, red, err := f.opts.Scrubber.ScrubJSON(sctx, raw)
	if err != nil {
		f.log.Warn("transparent MCP: a message from the server was withheld: it could not be scanned for secrets", "server", s.name, "method", method, "err", err)
		return nil
	}
	if len(red) > 0 && f.opts.Observer != nil {
		f.opts.Observer.Relayed(s.name, method, red)
	}
	return clean
}

// addFoldTools appends the fold tools to a tools/list answer's last page.
func (f *RemoteFront) addFoldTools(raw []byte) []byte {
	res, ok := jsonscan.Field(raw, "result")
	if !ok {
		return raw
	}
	if _, more := jsonscan.Field(res, "nextCursor"); more && jsonscan.StringField(res, "nextCursor") != "" {
		return raw
	}
	var tools []json.RawMessage
	if t, ok := jsonscan.Field(res, "tools"); !ok || json.Unmarshal(t, &tools) != nil {
		return raw
	}
	have := map[string]bool{}
	for _, t := range tools {
		have[jsonscan.StringField(t, "name")] = true
	}
	for _, t := range f.opts.Fold.Tools() {
		if !have[jsonscan.StringField(t, "name")] {
			tools = append(tools, t)
		}
	}
	res2, err := jsonscan.SetField(res, "tools", marshalNoEscape(tools))
	if err != nil {
		return raw
	}
	out, err := jsonscan.SetField(raw, "result", res2)
	if err != nil {
		return raw
	}
	return out
}

// send forwards r, bodiless, to the server it was meant for; when that
// fails the client has been answered 502 and ok is false.
func (f *RemoteFront) send(w http.ResponseWriter, r *http.Request) (resp *http.Response, ok bool) {
	target, _ := r.Context().Value(remoteTargetKey{}).(string)
	req, err := upstreamRequest(r.Context(), r, target, nil)
	if err != nil {
		proxyRefusal(w, http.StatusBadGateway, "foldproxy: "+err.Error())
		return nil, false
	}
	resp, err = f.opts.Transport.RoundTrip(req)
	if err != nil {
		proxyRefusal(w, http.StatusBadGateway, "foldproxy could not reach "+r.Host+": "+err.Error())
		return nil, false
	}
	return resp, true
}

// serveGet serves a GET of a server's endpoint: the standalone stream of
// streamable HTTP, or the legacy SSE transport's stream, whose first event
// announces the endpoint its POSTs go to.
func (f *RemoteFront) serveGet(w http.ResponseWriter, r *http.Request, s *remoteServer, conn net.Conn) {
	resp, ok := f.send(w, r)
	if !ok {
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 || mediaType(resp.Header) != "text/event-stream" {
		f.relayScrubbed(w, r.Context(), s, resp)
		return
	}
	if encoded(resp) {
		f.withholdAnswer(w, s, "it is in a content coding foldproxy does not read ("+resp.Header.Get("Content-Encoding")+")")
		return
	}
	var sess *remoteSession
	if r.Header.Get("Mcp-Session-Id") != "" {
		sess = f.streamableSession(s, r, conn)
	}
	f.relayStream(w, r, resp, sess, s)
}

// serveDelete forwards a client's DELETE of its session and ends the fold
// session with it.
func (f *RemoteFront) serveDelete(w http.ResponseWriter, r *http.Request, s *remoteServer, conn net.Conn) {
	resp, ok := f.send(w, r)
	if !ok {
		return
	}
	defer resp.Body.Close()
	if sid := r.Header.Get("Mcp-Session-Id"); sid != "" {
		f.mu.Lock()
		sess := f.sessions["s:"+hashKey(s.name, sid)]
		f.mu.Unlock()
		if sess != nil {
			f.endSession(sess, "deleted by the client")
		}
	}
	f.relayScrubbed(w, r.Context(), s, resp)
}

// serveOther forwards a request of another method to a server's MCP
// endpoint (OPTIONS, say) and relays its answer scrubbed.
func (f *RemoteFront) serveOther(w http.ResponseWriter, r *http.Request, s *remoteServer) {
	body, err := io.ReadAll(io.LimitReader(r.Body, f.maxMsg+1))
	if err != nil || int64(len(body)) > f.maxMsg {
		proxyRefusal(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("foldproxy could not read the request whole (or it is larger than foldproxy.maxMessageBytes, %d)", f.maxMsg))
		return
	}
	if len(body) == 0 {
		body = nil
	}
	target, _ := r.Context().Value(remoteTargetKey{}).(string)
	req, err := upstreamRequest(r.Context(), r, target, body)
	if err != nil {
		proxyRefusal(w, http.StatusBadGateway, "foldproxy: "+err.Error())
		return
	}
	resp, err := f.opts.Transport.RoundTrip(req)
	if err != nil {
		proxyRefusal(w, http.StatusBadGateway, "foldproxy could not reach "+r.Host+": "+err.Error())
		return
	}
	defer resp.Body.Close()
	f.relayScrubbed(w, r.Context(), s, resp)
}
