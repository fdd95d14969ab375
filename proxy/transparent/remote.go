package transparent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/foldproxy/foldproxy/intercept"
	"github.com/foldproxy/foldproxy/policy"
	"github.com/foldproxy/foldproxy/policy/jsonscan"
	"github.com/foldproxy/foldproxy/proxy"
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
//   - Every other message from the server passes the same relay chain as
//     the core's upstream traffic (the Interceptors around a scrubbing
//     handler): a notification as an exchange of kind
//     intercept.MessageNotification, a request to the client as
//     MessageRequest (their params scrubbed, the message re-encoded around
//     them), any other answer whole as MessageAnswer; what cannot be
//     scanned is withheld. Every answer of the MCP endpoint is read as clients read it
//     (the media type before ';'): a 2xx JSON body or event stream message
//     by message, anything else (error statuses, other content types or
//     none, events of other names, comments) scrubbed as JSON or text.
//     Nothing the server sends there reaches the client unscanned: a body
//     that cannot be read whole, decoded or scanned is withheld.
//   - With foldTools, the fold tools join the server's tools/list and are
//     answered by foldproxy itself: their catalogue entries and their
//     calls are the core's (Server.FoldTools, Server.CallFoldToolOf), as
//     on the MCP front. The tools of every tools/list answer relayed are
//     recorded with the core (Server.AddServed, Options.Served), so that
//     the model front knows their results were charged on the MCP wire.
//
// Sessions. Each client MCP session is one fold session (transport
// "transparent"), with its own root and branch tree, held by the core: it
// is opened on the session's first call (Server.OpenTransportSession),
// touched on each later one and ended through Server.CloseSession; this
// front only maps the client's session to it, keyed by the
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
	// Core is the one core: it holds the fold sessions of the clients' MCP
	// sessions, serves the fold tools' catalogue entries and answers their
	// calls (through its own chains), and records the tools served
	// (Options.Served). Required.
	Core *proxy.Server
	// Interceptors run around every intercepted call and every relayed
	// message, as on the MCP front (Options.Interceptors): the first
	// listed outermost, the list intercept.NewChain builds.
	Interceptors []intercept.Interceptor
	// Scrubber cleans every other message from the servers. Required:
	// foldproxy relays nothing it could not scan.
	Scrubber proxy.JSONScrubber
	// Observer hears of secrets removed from relayed messages (the core's
	// hears of sessions); nil: nobody.
	Observer proxy.Observer
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

	forward proxy.Handler // the chain around awaitResponse
	// relayChain passes the server's other messages (notifications, its
	// requests to the client, other answers): the chain around
	// scrubRelayed.
	relayChain proxy.Handler
	relay      *httputil.ReverseProxy

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
	if opts.Core == nil || opts.Scrubber == nil || opts.Transport == nil {
		return nil, errors.New("remote MCP front: Core, Scrubber and Transport are required")
	}
	f := &RemoteFront{
		opts:     opts,
		log:      discardIfNil(opts.Logger),
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
	f.relayChain = intercept.Chain(f.scrubRelayed, opts.Interceptors...)
	f.relay = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			target, _ := pr.In.Context().Value(mitmTargetKey{}).(string)
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
	ctx    context.Context
	cancel context.CancelCauseFunc
	inject chan []byte // legacy SSE: answers foldproxy gives itself, for the GET stream

	mu       sync.Mutex
	core     *proxy.Session // the core's session, once opened
	id       string         // the fold session id (core's), once opened
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
		sess = &remoteSession{key: key, srv: s, ctx: ctx, cancel: cancel, inject: inject,
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

// foldID is the fold session id of sess, "" before it is opened.
func (sess *remoteSession) foldID() string {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	return sess.id
}

// open opens the fold session on first use, through the core, and touches
// it after.
func (f *RemoteFront) open(ctx context.Context, sess *remoteSession) error {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	if sess.ended {
		return errors.New("the MCP session ended")
	}
	if sess.core != nil {
		f.opts.Core.TouchSession(ctx, sess.core)
		return nil
	}
	cs, err := f.opts.Core.OpenTransportSession(ctx, TransportTransparent,
		json.RawMessage(`{"name":`+string(jsonscan.Quote(sess.srv.name))+`}`))
	if err != nil {
		return err
	}
	sess.core, sess.id = cs, cs.ID()
	f.log.Debug("transparent MCP session opened", "server", sess.srv.name, "session", sess.id)
	return nil
}

// endSession forgets sess, cancels its calls in flight and ends its fold
// session through the core.
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
	cs := sess.core
	sess.mu.Unlock()
	sess.cancel(fmt.Errorf("the client's MCP session ended (%s)", why))
	if cs == nil {
		return
	}
	// The core ends the fold session (its open branches closed by fold's
	// session-end rules, within fold.sessionEndGrace), off the request
	// that ended it.
	go f.opts.Core.CloseSession(cs)
	f.log.Debug("transparent MCP session ended", "server", sess.srv.name, "session", cs.ID(), "why", why)
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
