package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/foldproxy/foldproxy/fold"
	"github.com/foldproxy/foldproxy/intercept"
	"github.com/foldproxy/foldproxy/policy"
	"github.com/foldproxy/foldproxy/policy/jsonscan"
	"github.com/foldproxy/foldproxy/upstreams"
)

// SupportedVersions are the protocol versions the fronts speak, newest first.
var SupportedVersions = []string{"2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"}

// Upstream is what the core needs of one upstream connection
// (*upstreams.Upstream implements it).
type Upstream interface {
	Name() string
	Call(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error)
	Notify(ctx context.Context, method string, params json.RawMessage) error
	Catalog() upstreams.Catalog
}

// Folder is what the core needs of the fold engine (*fold.Manager).
type Folder interface {
	Tools() []json.RawMessage
	CallTool(ctx context.Context, session, name string, args json.RawMessage) (json.RawMessage, error)
	OpenSession(ctx context.Context, rec fold.SessionRecord) error
	ResumeSession(ctx context.Context, id string) (*fold.SessionRecord, error)
	TouchSession(ctx context.Context, id string)
	EndSession(ctx context.Context, id string) error
}

// JSONScrubber scrubs secrets out of relayed notifications and
// server-to-client requests (*secrets.Scrubber).
type JSONScrubber interface {
	ScrubJSON(ctx context.Context, raw json.RawMessage) (json.RawMessage, map[string]int, error)
}

// Options configure a Server. Upstreams, Fold and Logger are required.
type Options struct {
	Settings  policy.Settings
	Upstreams []Upstream
	Fold      Folder
	// Interceptors run around every forwarded request, the first listed
	// outermost (see intercept.Chain); serve passes intercept.NewChain's.
	Interceptors []intercept.Interceptor
	// ControlInterceptors run around foldproxy's own control tools
	// (branch_create, branch_return, branch_status): audit and metrics.
	// branch_recall returns archived content and takes the full chain.
	ControlInterceptors []intercept.Interceptor
	// Scrubber cleans relayed notifications and requests and the text of
	// the catalogue (descriptions, instructions); nil disables it.
	Scrubber JSONScrubber
	// Observer is told about sessions and about secrets removed from relayed
	// messages (metrics, audit); nil: nobody.
	Observer Observer
	Logger   *slog.Logger
	Name     string // serverInfo.name; default "foldproxy"
	Version  string
	// PageSize bounds list results per page. Default 500.
	PageSize int
	// ReadyWait bounds, from the session's start, how long catalogue
	// requests wait for upstreams still making their first connection
	// attempt, so that an agent that lists tools right after starting sees
	// those that start quickly. An upstream that is not up by then joins
	// later with list_changed. Zero: no wait.
	ReadyWait time.Duration
	// ClientCapabilities, when set, is told the capabilities each agent
	// declares in initialize, before foldproxy answers it (the upstreams
	// are told which to advertise; see README, "Client capabilities").
	ClientCapabilities func(ctx context.Context, caps json.RawMessage)
	// Served, when set, records the tools of every catalogue the front
	// built to serve, for the model front (served.go).
	Served *ServedTools
}

// Observer receives what the core sees beside the interceptors: sessions
// opened and closed, and the secrets removed from relayed messages (the
// innermost handler of their chain reports them); intercept.Observer is
// one. Its methods must be safe for concurrent use and must not block.
type Observer interface {
	SessionOpened()
	SessionClosed()
	// Relayed reports a message relayed from upstream to the agent beside
	// a call's result (a notification, a server-to-client request, or an
	// answer the remote MCP front of transparent mode relays), with the
	// secrets removed from it by rule.
	Relayed(upstream, method string, redactions map[string]int)
}

// Server is the core: it implements Endpoint for the fronts.
type Server struct {
	opts      Options
	log       *slog.Logger
	sep       string
	upstreams map[string]Upstream
	names     []string // upstream names, sorted

	forward Handler
	relay   Handler // upstream notifications and requests to the agent (upstream_traffic.go)
	control Handler
	recall  Handler // branch_recall: the fold tool inside the full chain

	mu       sync.Mutex
	sessions map[string]*Session
	cat      *catalog // nil: rebuild on next use
	progress map[string]*progressRoute
	calls    map[string][]*activeCall // in-flight forwarded calls by upstream
	subs     map[string]map[*Session]bool

	ready atomic.Bool // every upstream has made its first connection attempt
}

// Handler is the chain's entry point (an intercept.Handler).
type Handler = intercept.Handler

type progressRoute struct {
	sess  *Session
	token json.RawMessage
	out   Outbound
}

type activeCall struct {
	upstream string
	sess     *Session
	out      Outbound
}

var _ Endpoint = (*Server)(nil)

// New builds a Server.
func New(opts Options) (*Server, error) {
	if opts.Fold == nil {
		return nil, errors.New("proxy: Options.Fold is required")
	}
	if opts.Logger == nil {
		return nil, errors.New("proxy: Options.Logger is required")
	}
	if opts.Name == "" {
		opts.Name = "foldproxy"
	}
	if opts.Version == "" {
		opts.Version = "dev"
	}
	if opts.PageSize <= 0 {
		opts.PageSize = 500
	}
	if opts.Settings.Separator == "" {
		d := policy.Default()
		opts.Settings.Separator = d.Separator
	}
	s := &Server{
		opts:      opts,
		log:       opts.Logger,
		sep:       opts.Settings.Separator,
		upstreams: make(map[string]Upstream),
		sessions:  make(map[string]*Session),
		progress:  make(map[string]*progressRoute),
		calls:     make(map[string][]*activeCall),
		subs:      make(map[string]map[*Session]bool),
	}
	for _, u := range opts.Upstreams {
		if _, dup := s.upstreams[u.Name()]; dup {
			return nil, fmt.Errorf("proxy: duplicate upstream %q", u.Name())
		}
		s.upstreams[u.Name()] = u
		s.names = append(s.names, u.Name())
	}
	sort.Strings(s.names)
	s.forward = intercept.Chain(s.callUpstream, opts.Interceptors...)
	s.relay = intercept.Chain(s.scrubRelayed, opts.Interceptors...)
	s.control = intercept.Chain(s.callFold, opts.ControlInterceptors...)
	// Recalled pages enter the agent's context like any result: scrubbed,
	// counted and charged; the innermost handler is the fold tool itself.
	s.recall = intercept.Chain(s.callFold, opts.Interceptors...)
	return s, nil
}

// OpenSession implements Endpoint.
func (s *Server) OpenSession(ctx context.Context, id, transport string, standalone Outbound) *Session {
	if id == "" {
		id = newID("s")
	}
	sess := newSession(id, transport, standalone)
	s.mu.Lock()
	s.sessions[id] = sess
	s.mu.Unlock()
	if s.opts.Observer != nil {
		s.opts.Observer.SessionOpened()
	}
	return sess
}

// ResumeSession restores an HTTP session persisted before a restart. It is
// the HTTP front's Resume hook.
func (s *Server) ResumeSession(ctx context.Context, id string) (*Session, bool) {
	s.mu.Lock()
	if sess, ok := s.sessions[id]; ok {
		s.mu.Unlock()
		return sess, true
	}
	s.mu.Unlock()
	rec, err := s.opts.Fold.ResumeSession(ctx, id)
	if err != nil || !Resumable(rec.Transport) {
		return nil, false
	}
	sess := newSession(id, rec.Transport, nil)
	sess.protocolVersion = rec.ProtocolVersion
	sess.clientInfo = rec.ClientInfo
	sess.clientCaps = rec.ClientCaps
	sess.initialized = true
	s.mu.Lock()
	if prev, ok := s.sessions[id]; ok {
		s.mu.Unlock()
		return prev, true
	}
	s.sessions[id] = sess
	s.mu.Unlock()
	if s.opts.Observer != nil {
		s.opts.Observer.SessionOpened()
	}
	s.log.Info("session resumed from the store", "session", id)
	return sess, true
}

// Resumable reports whether sessions of a transport can come back after a
// restart: HTTP sessions by their Mcp-Session-Id, attached stdio sessions
// (TransportAttach) by the id their relay keeps. Plain stdio sessions
// cannot.
func Resumable(transport string) bool {
	return transport == "http" || transport == TransportAttach
}

// CloseSession implements Endpoint.
func (s *Server) CloseSession(sess *Session) { s.closeSession(sess, true) }

// DetachSession forgets sess in memory without ending it: its branches stay
// open in the store, for the session to be resumed by a daemon started
// later (the attach front calls it when the daemon stops).
func (s *Server) DetachSession(sess *Session) { s.closeSession(sess, false) }

func (s *Server) closeSession(sess *Session, end bool) {
	sess.mu.Lock()
	if sess.closed {
		sess.mu.Unlock()
		return
	}
	sess.closed = true
	initialized := sess.initialized
	sess.mu.Unlock()
	// Requests waiting for the agent's answers see sess.ctx end; their
	// channels are never closed, so a late answer cannot panic a sender.
	sess.cancel()
	s.mu.Lock()
	delete(s.sessions, sess.id)
	for uri, set := range s.subs {
		delete(set, sess)
		if len(set) == 0 {
			delete(s.subs, uri)
		}
	}
	s.mu.Unlock()
	if initialized && end {
		grace := s.opts.Settings.Fold.SessionEndGrace.D()
		if grace <= 0 {
			grace = 30 * time.Second
		}
		ctx, cancel := context.WithTimeout(context.Background(), grace)
		if err := s.opts.Fold.EndSession(ctx, sess.id); err != nil {
			s.log.Warn("ending session", "session", sess.id, "err", err)
		}
		cancel()
	}
	if s.opts.Observer != nil {
		s.opts.Observer.SessionClosed()
	}
	close(sess.done)
}

// Close ends every session.
func (s *Server) Close() {
	s.mu.Lock()
	list := make([]*Session, 0, len(s.sessions))
	for _, sess := range s.sessions {
		list = append(list, sess)
	}
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, sess := range list {
		wg.Add(1)
		go func() { defer wg.Done(); s.CloseSession(sess) }()
	}
	wg.Wait()
}

// Deliver implements Endpoint.
func (s *Server) Deliver(ctx context.Context, sess *Session, msg *Message, out Outbound) {
	switch {
	case msg.IsResponse():
		s.deliverResponse(sess, msg)
	case msg.IsNotification():
		s.handleNotification(ctx, sess, msg)
	case msg.IsRequest():
		res, rpcErr, cancelled := s.serveRequest(ctx, sess, msg, out)
		if cancelled {
			// The agent cancelled it: no response, as MCP asks.
			if f, ok := out.(requestForgetter); ok {
				f.forgetRequest(msg.ID)
			}
			s.log.Debug("request cancelled by the agent: not answered", "session", sess.id, "method", msg.Method)
			return
		}
		if !sess.send(out, Response(msg.ID, res, rpcErr)) {
			s.log.Debug("response not delivered: stream closed", "session", sess.id, "method", msg.Method)
		}
	}
}

// branchWatcher is a Folder that tells when a branch closes
// (*fold.Manager does).
type branchWatcher interface {
	BranchDone(session, branch string) (context.Context, func() error)
}

// errAgentCancelled is the cause of a request's context when the agent
// sent notifications/cancelled for it.
var errAgentCancelled = errors.New("cancelled by the agent")

// requestForgetter is an Outbound that owes responses (a front's POST or
// stdio collector): forgetRequest tells it that a request is settled
// without one, because the agent cancelled it.
type requestForgetter interface {
	forgetRequest(id json.RawMessage)
}

func (s *Server) serveRequest(ctx context.Context, sess *Session, msg *Message, out Outbound) (res json.RawMessage, rpcErr *Error, cancelled bool) {
	key := string(msg.ID)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(sess.ctx, func() { cancel(errors.New("the agent's session ended")) })
	defer stop()
	sess.mu.Lock()
	sess.inflight[key] = cancel
	sess.mu.Unlock()
	defer func() {
		sess.mu.Lock()
		delete(sess.inflight, key)
		sess.mu.Unlock()
		if r := recover(); r != nil {
			s.log.Error("panic serving request", "method", msg.Method, "panic", r, "stack", string(debug.Stack()))
			res, rpcErr = nil, Errorf(CodeInternalError, "internal error serving %s", msg.Method)
		}
		cancelled = errors.Is(context.Cause(ctx), errAgentCancelled)
	}()
	sess.touch()
	res, rpcErr = s.dispatch(ctx, sess, msg, out)
	return res, rpcErr, false
}

func (s *Server) dispatch(ctx context.Context, sess *Session, msg *Message, out Outbound) (json.RawMessage, *Error) {
	params := msg.Params
	if len(params) == 0 || string(params) == "null" {
		params = json.RawMessage("{}")
	}
	if params[0] != '{' {
		return nil, Errorf(CodeInvalidParams, "invalid params for %s: want an object", msg.Method)
	}
	switch msg.Method {
	case "tools/list", "prompts/list", "resources/list", "resources/templates/list",
		"tools/call", "prompts/get", "resources/read", "completion/complete":
		s.awaitUpstreams(ctx, sess)
	}
	switch msg.Method {
	case "initialize":
		return s.initialize(ctx, sess, params)
	case "ping":
		return json.RawMessage("{}"), nil
	case "tools/list":
		return s.list(params, "tools", func(c *catalog) []json.RawMessage { return c.tools })
	case "prompts/list":
		return s.list(params, "prompts", func(c *catalog) []json.RawMessage { return c.prompts })
	case "resources/list":
		return s.list(params, "resources", func(c *catalog) []json.RawMessage { return c.resources })
	case "resources/templates/list":
		return s.list(params, "resourceTemplates", func(c *catalog) []json.RawMessage { return c.templates })
	case "tools/call":
		return s.callTool(ctx, sess, params, out)
	case "prompts/get":
		return s.getPrompt(ctx, sess, params, out)
	case "resources/read":
		return s.readResource(ctx, sess, params, out)
	case "resources/subscribe", "resources/unsubscribe":
		return s.subscribe(ctx, sess, msg.Method, params)
	case "completion/complete":
		return s.complete(ctx, sess, params, out)
	case "logging/setLevel":
		return s.setLevel(ctx, sess, params)
	default:
		return nil, Errorf(CodeMethodNotFound, "method not found: %s", msg.Method)
	}
}

func (s *Server) initialize(ctx context.Context, sess *Session, params json.RawMessage) (json.RawMessage, *Error) {
	var p struct {
		ProtocolVersion string          `json:"protocolVersion"`
		Capabilities    json.RawMessage `json:"capabilities"`
		ClientInfo      json.RawMessage `json:"clientInfo"`
	}
	if err := json.Unmarshal(params, &p); err != nil {
		return nil, Errorf(CodeInvalidParams, "invalid initialize params: %v", err)
	}
	version := SupportedVersions[0]
	for _, v := range SupportedVersions {
		if v == p.ProtocolVersion {
			version = v
		}
	}
	sess.mu.Lock()
	sess.protocolVersion = version
	sess.clientCaps = p.Capabilities
	sess.clientInfo = p.ClientInfo
	sess.initialized = true
	sess.mu.Unlock()
	if s.opts.ClientCapabilities != nil {
		s.opts.ClientCapabilities(ctx, p.Capabilities)
	}
	now := time.Now()
	if err := s.opts.Fold.OpenSession(ctx, fold.SessionRecord{
		ID: sess.id, Transport: sess.transport, ProtocolVersion: version,
		ClientInfo: p.ClientInfo, ClientCaps: p.Capabilities, Created: now, LastSeen: now,
	}); err != nil {
		return nil, Errorf(CodeInternalError, "could not open the session: %v", err)
	}
	result := map[string]any{
		"protocolVersion": version,
		"capabilities": map[string]any{
			"tools":       map[string]any{"listChanged": true},
			"prompts":     map[string]any{"listChanged": true},
			"resources":   map[string]any{"subscribe": true, "listChanged": true},
			"logging":     map[string]any{},
			"completions": map[string]any{},
		},
		"serverInfo":   map[string]any{"name": s.opts.Name, "version": s.opts.Version},
		"instructions": s.instructions(),
	}
	return marshalNoEscape(result), nil
}

// marshalNoEscape encodes v without HTML escaping, so that "<" in text
// stays "<" on the wire as upstream servers send it.
func marshalNoEscape(v any) json.RawMessage {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic(err) // only called with values that always encode
	}
	return bytes.TrimRight(buf.Bytes(), "\n")
}

func (s *Server) instructions() string {
	var b strings.Builder
	b.WriteString("foldproxy wraps these MCP servers; their tools and prompts are named <server>" + s.sep + "<name>: ")
	b.WriteString(strings.Join(s.names, ", "))
	b.WriteString(".")
	if down := s.unavailableText(context.Background()); down != "" {
		// What the agent should know now; their tools join with
		// notifications/tools/list_changed when they come up.
		b.WriteString(" Not available yet: " + down + ".")
	}
	b.WriteString("\nUse branch_create before a sub-task whose tool output you will not need verbatim (exploring code, reading many files, test logs), do the work, then branch_return with a short summary: only the summary stays in your context. Every tool result is counted against the current branch's token budget.")
	for _, name := range s.names {
		if in := s.upstreams[name].Catalog().Instructions; in != "" {
			clean, ok := s.scrub(context.Background(), name, "instructions", jsonscan.Quote(in))
			if !ok {
				continue
			}
			var text string
			if json.Unmarshal(clean, &text) == nil {
				fmt.Fprintf(&b, "\n\n[%s]\n%s", name, text)
			}
		}
	}
	return b.String()
}

// list serves one page of a merged list.
func (s *Server) list(params json.RawMessage, key string, items func(*catalog) []json.RawMessage) (json.RawMessage, *Error) {
	all := items(s.catalog())
	start := 0
	if cur := jsonscan.StringField(params, "cursor"); cur != "" {
		n, err := strconv.Atoi(strings.TrimPrefix(cur, "fp:"))
		if err != nil || !strings.HasPrefix(cur, "fp:") || n < 0 || n > len(all) {
			return nil, Errorf(CodeInvalidParams, "invalid cursor %q", cur)
		}
		start = n
	}
	end := min(start+s.opts.PageSize, len(all))
	var b []byte
	b = append(b, `{"`...)
	b = append(b, key...)
	b = append(b, `":[`...)
	for i, it := range all[start:end] {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, it...)
	}
	b = append(b, ']')
	if end < len(all) {
		b = append(b, `,"nextCursor":`...)
		b = append(b, jsonscan.Quote("fp:"+strconv.Itoa(end))...)
	}
	b = append(b, '}')
	return b, nil
}

// routeByPrefix finds the upstream whose name prefix starts name (the
// longest, when prefixes nest), or the only unprefixed upstream.
func (s *Server) routeByPrefix(name string) (upstream, rest string, ok bool) {
	var unprefixed []string
	best := -1
	for _, up := range s.names {
		p := s.opts.Settings.NamePrefix(up)
		if p == "" {
			unprefixed = append(unprefixed, up)
			continue
		}
		if strings.HasPrefix(name, p) && len(name) > len(p) && len(p) > best {
			upstream, rest, best = up, name[len(p):], len(p)
		}
	}
	if best >= 0 {
		return upstream, rest, true
	}
	if len(unprefixed) == 1 {
		return unprefixed[0], name, true
	}
	return "", "", false
}

// callTool serves tools/call: a fold tool or a forwarded upstream tool.
func (s *Server) callTool(ctx context.Context, sess *Session, params json.RawMessage, out Outbound) (json.RawMessage, *Error) {
	name := jsonscan.StringField(params, "name")
	if name == "" {
		return nil, Errorf(CodeInvalidParams, "tools/call: params.name is required")
	}
	args, ok := jsonscan.Field(params, "arguments")
	if !ok || string(args) == "null" {
		args = json.RawMessage("{}")
	}
	if args[0] != '{' {
		return nil, Errorf(CodeInvalidParams, "tools/call %s: arguments must be an object", name)
	}
	cat := s.catalog()
	ex := &intercept.Exchange{
		Session: sess.id, Method: "tools/call", Start: time.Now(), Args: args,
	}
	if cat.foldTools[name] {
		ex.Name = name
		ex.Params = params
		h := s.control
		if fold.ChargedTool(name) {
			h = s.recall
		}
		res, rpcErr := s.finish(ctx, sess, ex, h, out)
		if name == "branch_status" && rpcErr == nil {
			res = s.noteUnavailable(ctx, res)
		}
		return res, rpcErr
	}
	r, ok := cat.toolRoutes[name]
	if !ok {
		// Not in the catalogue, which may be stale: a name that carries an
		// upstream's prefix goes to that upstream, which answers as it
		// would directly. Tools hidden by policy stay refused.
		up, rest, found := s.routeByPrefix(name)
		if !found {
			return nil, Errorf(CodeInvalidParams, "unknown tool %q: it is not in tools/list and names no upstream (tools are named <server>%s<tool>)", name, s.sep)
		}
		if !s.opts.Settings.ToolAllowed(up, rest) {
			return toolError(fmt.Sprintf("tool %q of upstream %q is not allowed by foldproxy's configuration (foldproxy.upstreams.%s)", rest, up, up)), nil
		}
		r = route{upstream: up, name: rest, injected: s.opts.Settings.BranchIDEnabled()}
	}
	ex.Upstream, ex.Name = r.upstream, r.name
	if r.injected {
		if v, ok := jsonscan.Field(args, branchIDArg); ok {
			if len(v) > 0 && v[0] == '"' {
				_ = json.Unmarshal(v, &ex.ExplicitBranch)
			} else if string(v) != "null" {
				return toolError(fmt.Sprintf("argument %s must be a string (a branch id from branch_create)", branchIDArg)), nil
			}
			stripped, err := jsonscan.DeleteField(args, branchIDArg)
			if err != nil {
				return nil, Errorf(CodeInvalidParams, "tools/call %s: %v", name, err)
			}
			args = stripped
			if params, err = jsonscan.SetField(params, "arguments", args); err != nil {
				return nil, Errorf(CodeInvalidParams, "tools/call %s: %v", name, err)
			}
		}
	}
	ex.Args = args
	var err error
	if params, err = jsonscan.SetField(params, "name", jsonscan.Quote(r.name)); err != nil {
		return nil, Errorf(CodeInvalidParams, "tools/call %s: %v", name, err)
	}
	ex.Params = params
	return s.finish(ctx, sess, ex, s.forward, out)
}

func (s *Server) getPrompt(ctx context.Context, sess *Session, params json.RawMessage, out Outbound) (json.RawMessage, *Error) {
	name := jsonscan.StringField(params, "name")
	r, ok := s.catalog().promptRoutes[name]
	if !ok {
		up, rest, found := s.routeByPrefix(name)
		if !found {
			return nil, Errorf(CodeInvalidParams, "unknown prompt %q: it is not in prompts/list and names no upstream", name)
		}
		r = route{upstream: up, name: rest}
	}
	params, err := jsonscan.SetField(params, "name", jsonscan.Quote(r.name))
	if err != nil {
		return nil, Errorf(CodeInvalidParams, "prompts/get: %v", err)
	}
	ex := &intercept.Exchange{Session: sess.id, Upstream: r.upstream, Method: "prompts/get", Name: r.name, Params: params, Start: time.Now()}
	ex.Args, _ = jsonscan.Field(params, "arguments")
	return s.finish(ctx, sess, ex, s.forward, out)
}

func (s *Server) readResource(ctx context.Context, sess *Session, params json.RawMessage, out Outbound) (json.RawMessage, *Error) {
	uri := jsonscan.StringField(params, "uri")
	if uri == "" {
		return nil, Errorf(CodeInvalidParams, "resources/read: params.uri is required")
	}
	up, ok := s.catalog().resourceUpstream(uri)
	if !ok {
		return nil, &Error{Code: CodeResourceNotFound, Message: fmt.Sprintf("resource not found: %s", uri), Data: marshalNoEscape(map[string]string{"uri": uri})}
	}
	ex := &intercept.Exchange{Session: sess.id, Upstream: up, Method: "resources/read", Name: uri, Params: params, Start: time.Now()}
	return s.finish(ctx, sess, ex, s.forward, out)
}

func (s *Server) complete(ctx context.Context, sess *Session, params json.RawMessage, out Outbound) (json.RawMessage, *Error) {
	ref, _ := jsonscan.Field(params, "ref")
	var up string
	switch jsonscan.StringField(ref, "type") {
	case "ref/prompt":
		r, ok := s.catalog().promptRoutes[jsonscan.StringField(ref, "name")]
		if !ok {
			return nil, Errorf(CodeInvalidParams, "completion/complete: unknown prompt %q", jsonscan.StringField(ref, "name"))
		}
		ref2, err := jsonscan.SetField(ref, "name", jsonscan.Quote(r.name))
		if err == nil {
			params, err = jsonscan.SetField(params, "ref", ref2)
		}
		if err != nil {
			return nil, Errorf(CodeInvalidParams, "completion/complete: %v", err)
		}
		up = r.upstream
	case "ref/resource":
		uri := jsonscan.StringField(ref, "uri")
		u, ok := s.catalog().resourceUpstream(uri)
		if !ok {
			return nil, Errorf(CodeInvalidParams, "completion/complete: unknown resource %q", uri)
		}
		up = u
	default:
		return nil, Errorf(CodeInvalidParams, "completion/complete: ref.type must be ref/prompt or ref/resource")
	}
	ex := &intercept.Exchange{Session: sess.id, Upstream: up, Method: "completion/complete", Params: params, Start: time.Now()}
	return s.finish(ctx, sess, ex, s.forward, out)
}
