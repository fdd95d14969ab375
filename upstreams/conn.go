package upstreams

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/foldproxy/foldproxy/policy/jsonrpc"
)

// MCP method names this package sends or reacts to.
const (
	methodInitialize          = "initialize"
	methodInitialized         = "notifications/initialized"
	methodPing                = "ping"
	methodCancelled           = "notifications/cancelled"
	methodToolsList           = "tools/list"
	methodResourcesList       = "resources/list"
	methodTemplatesList       = "resources/templates/list"
	methodPromptsList         = "prompts/list"
	methodToolsListChanged    = "notifications/tools/list_changed"
	methodResourcesChanged    = "notifications/resources/list_changed"
	methodPromptsListChanged  = "notifications/prompts/list_changed"
	maxCatalogPages           = 10000
	cancelNotificationTimeout = 5 * time.Second
	stderrProbeTimeout        = 2 * time.Second
)

// errSessionLost is returned by conn.call when an HTTP upstream answered 404
// for the session: the caller initializes a new session and retries once.
var errSessionLost = errors.New("upstream session lost")

// conn is one connection to an upstream: one child process, or one HTTP or
// SSE session (re-initialized in place when the server forgets it).
type conn struct {
	u      *Upstream
	w      wire
	ctx    context.Context
	cancel context.CancelFunc

	initMu sync.Mutex // serializes initialize on a live connection
	gen    atomic.Int64
	up     atomic.Bool // the connection was installed as the upstream's current one

	failOnce sync.Once
	dead     chan struct{} // closed once the connection is torn down
	settled  chan struct{} // closed after dead, once the upstream has recorded the loss
	cause    error         // why it was torn down; set before dead is closed
	exit     string        // how a stdio process ended, e.g. "exit status 3"

	qmu       sync.Mutex
	queue     []notification
	enqueued  uint64
	processed uint64
	qchanged  chan struct{} // closed and replaced after each notification is handled
	qwake     chan struct{}

	inMu     sync.Mutex
	incoming map[string]context.CancelFunc // server-to-client requests being answered

	capsGen uint64 // the generation of the client capabilities it was initialized with
}

type notification struct {
	method string
	params json.RawMessage
}

// initResult is the part of an initialize result this package reads.
type initResult struct {
	ProtocolVersion string          `json:"protocolVersion"`
	Capabilities    json.RawMessage `json:"capabilities"`
	ServerInfo      json.RawMessage `json:"serverInfo"`
	Instructions    string          `json:"instructions"`
}

// dialEntry creates the transport for c's entry, unstarted.
func dialEntry(_ context.Context, c *conn) error {
	u := c.u
	e := u.entry
	switch e.Type {
	case TypeStdio:
		env := os.Environ()
		keys := make([]string, 0, len(e.Env))
		for k := range e.Env {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			env = append(env, k+"="+e.Env[k])
		}
		c.w = &stdioWire{
			newCmd: func() *exec.Cmd {
				// The process must outlive the context start was given;
				// teardown ends it.
				cmd := exec.Command(e.Command, e.Args...)
				cmd.Env = env
				cmd.Dir = e.Cwd
				setProcessGroup(cmd)
				return cmd
			},
			handle:  c.onMessage,
			lost:    c.onLost,
			log:     u.log,
			tracked: u.goTracked,
		}
		return nil
	case TypeHTTP:
		w, err := newHTTPWire(e.URL, e.Headers, c.onMessage, c.onLost, u.log, u.goTracked)
		if err != nil {
			return fmt.Errorf("url %q: %w", e.URL, err)
		}
		c.w = w
		return nil
	case TypeSSE:
		w, err := newSSEWire(e.URL, e.Headers, u.opts.StartTimeout, c.onMessage, c.onLost, u.log, u.goTracked)
		if err != nil {
			return fmt.Errorf("url %q: %w", e.URL, err)
		}
		c.w = w
		return nil
	}
	return fmt.Errorf("transport type %q is not one of stdio, http, sse", e.Type)
}

// onLost is called by the wire when its stream ends on its own.
func (c *conn) onLost(err error) {
	c.u.goTracked(func() { c.fail(fmt.Errorf("event stream lost: %w", err)) })
}

// connect opens a connection: it starts the transport, initializes, and
// fetches the catalogue, all within StartTimeout. The notification queue is
// started by the caller once the connection is installed.
func (u *Upstream) connect(life context.Context) (*conn, Catalog, error) {
	cctx, cancel := context.WithCancel(life)
	c := &conn{
		u:        u,
		ctx:      cctx,
		cancel:   cancel,
		dead:     make(chan struct{}),
		settled:  make(chan struct{}),
		qchanged: make(chan struct{}),
		qwake:    make(chan struct{}, 1),
		incoming: make(map[string]context.CancelFunc),
	}
	if err := u.dial(cctx, c); err != nil {
		cancel()
		return nil, Catalog{}, err
	}
	sctx, scancel := context.WithTimeout(cctx, u.opts.StartTimeout)
	defer scancel()
	stopWatch := func() bool { return false }
	if _, ok := c.w.(*sseWire); ok {
		// SSE's Start waits for the endpoint event on a context that must
		// outlive it; closing the transport unblocks it when the attempt's
		// time is up. (stdio and streamable HTTP do not block in Start.)
		stopWatch = context.AfterFunc(sctx, func() {
			if errors.Is(sctx.Err(), context.DeadlineExceeded) {
				_ = c.w.close()
			}
		})
	}
	err := c.w.start(cctx)
	stopWatch()
	if err != nil {
		// Only a start that ran out of time says so: c.fail cancels sctx
		// too, so its error is read before.
		timedOut := errors.Is(sctx.Err(), context.DeadlineExceeded) && life.Err() == nil
		c.fail(err)
		if timedOut {
			err = fmt.Errorf("%w (start timeout %s)", err, u.opts.StartTimeout)
		}
		return nil, Catalog{}, c.startError("starting", err)
	}
	if st, ok := c.w.(*stdioWire); ok {
		r := st.stderrReader()
		if !u.goTracked(func() { c.readStderr(r) }) {
			c.fail(errClosing)
			return nil, Catalog{}, errClosing
		}
	}
	ir, err := c.initialize(sctx)
	if err != nil {
		c.fail(err)
		return nil, Catalog{}, c.startError("initialize", err)
	}
	cat, err := c.fetchCatalog(sctx, ir)
	if err != nil {
		c.fail(err)
		return nil, Catalog{}, c.startError("fetching the catalogue", err)
	}
	return c, cat, nil
}

// startError describes a failed connection attempt; c has been torn down.
func (c *conn) startError(step string, err error) error {
	e := c.u.entry
	if e.Type == TypeStdio {
		switch {
		case errors.Is(err, exec.ErrNotFound):
			return fmt.Errorf("command %q not found: it is not on PATH; give its absolute path or install it (%w)", e.Command, exec.ErrNotFound)
		case errors.Is(err, os.ErrNotExist):
			where := e.Command
			if !filepath.IsAbs(where) {
				where = filepath.Join(e.Cwd, where)
				if e.Cwd == "" {
					wd, _ := os.Getwd()
					where = filepath.Join(wd, e.Command)
				}
			}
			return fmt.Errorf("command %q not found: %s does not exist (%w)", e.Command, where, os.ErrNotExist)
		case errors.Is(err, os.ErrPermission):
			return fmt.Errorf("command %q cannot be run: %w (is it executable?)", e.Command, os.ErrPermission)
		}
		if c.exit != "" && !errors.Is(err, errClosing) {
			// err only repeats that the process is gone.
			return fmt.Errorf("command %q exited while %s (%s)", e.Command, stepGerund(step), c.exit)
		}
		return fmt.Errorf("command %q: %s: %w", e.Command, step, err)
	}
	if errors.Is(err, errLegacySSE) {
		return fmt.Errorf("%s %s: %w (set \"type\": \"sse\" for this server)", step, e.URL, err)
	}
	return fmt.Errorf("%s %s: %w", step, e.URL, err)
}

func stepGerund(step string) string {
	if step == "initialize" {
		return "initializing"
	}
	return step
}

// initialize runs the initialize handshake on c.
func (c *conn) initialize(ctx context.Context) (initResult, error) {
	o := c.u.opts
	caps, gen := c.u.advertised()
	c.capsGen = gen
	params, err := json.Marshal(struct {
		ProtocolVersion string          `json:"protocolVersion"`
		Capabilities    json.RawMessage `json:"capabilities"`
		ClientInfo      json.RawMessage `json:"clientInfo"`
	}{o.ProtocolVersion, caps, o.ClientInfo})
	if err != nil {
		return initResult{}, fmt.Errorf("options: capabilities or clientInfo is not valid JSON: %w", err)
	}
	res, err := c.call(ctx, methodInitialize, params, false)
	if err != nil {
		return initResult{}, err
	}
	var ir initResult
	if err := json.Unmarshal(res, &ir); err != nil {
		return initResult{}, fmt.Errorf("the initialize result is not valid: %w", err)
	}
	if !mcp.IsValidProtocolVersion(ir.ProtocolVersion) || mcp.IsModernProtocol(ir.ProtocolVersion) {
		return initResult{}, fmt.Errorf("the server answered protocol version %q, which foldproxy does not support", ir.ProtocolVersion)
	}
	if hw, ok := c.w.(*httpWire); ok {
		hw.setProtocolVersion(ir.ProtocolVersion)
	}
	if err := c.w.send(ctx, notificationBody(methodInitialized, nil)); err != nil {
		return initResult{}, fmt.Errorf("sending %s: %w", methodInitialized, err)
	}
	return ir, nil
}

// capabilities reports which catalogue lists the server declared.
func capabilities(raw json.RawMessage) (tools, resources, prompts bool) {
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil {
		return false, false, false
	}
	has := func(k string) bool {
		v, ok := m[k]
		return ok && !isNull(v)
	}
	return has("tools"), has("resources"), has("prompts")
}

// fetchCatalog lists everything the server declared, page by page.
func (c *conn) fetchCatalog(ctx context.Context, ir initResult) (Catalog, error) {
	cat := Catalog{
		ServerCapabilities: ir.Capabilities,
		ServerInfo:         ir.ServerInfo,
		Instructions:       ir.Instructions,
		ProtocolVersion:    ir.ProtocolVersion,
	}
	tools, resources, prompts := capabilities(ir.Capabilities)
	var err error
	if tools {
		if cat.Tools, err = c.list(ctx, methodToolsList, "tools"); err != nil {
			return Catalog{}, err
		}
	}
	if resources {
		if cat.Resources, err = c.list(ctx, methodResourcesList, "resources"); err != nil {
			return Catalog{}, err
		}
		if cat.ResourceTemplates, err = c.list(ctx, methodTemplatesList, "resourceTemplates"); err != nil {
			return Catalog{}, err
		}
	}
	if prompts {
		if cat.Prompts, err = c.list(ctx, methodPromptsList, "prompts"); err != nil {
			return Catalog{}, err
		}
	}
	return cat, nil
}

// list fetches one catalogue list, following nextCursor to the end. A
// JSON-RPC error (a server that declares resources but has no templates,
// say) is logged and gives an empty list; a transport error fails.
func (c *conn) list(ctx context.Context, method, key string) ([]json.RawMessage, error) {
	var items []json.RawMessage
	cursor := ""
	seen := map[string]bool{}
	for page := 0; ; page++ {
		if page == maxCatalogPages {
			return nil, fmt.Errorf("%s: more than %d pages", method, maxCatalogPages)
		}
		var params json.RawMessage
		if cursor != "" {
			params, _ = json.Marshal(map[string]string{"cursor": cursor})
		}
		res, err := c.call(ctx, method, params, false)
		var rpcErr *jsonrpc.Error
		if errors.As(err, &rpcErr) {
			c.u.log.Warn("upstream refused a catalogue list", "method", method, "err", err)
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		var body map[string]json.RawMessage
		if err := json.Unmarshal(res, &body); err != nil {
			return nil, fmt.Errorf("%s: the result is not an object: %w", method, err)
		}
		var pageItems []json.RawMessage
		if raw, ok := body[key]; ok && !isNull(raw) {
			if err := json.Unmarshal(raw, &pageItems); err != nil {
				return nil, fmt.Errorf("%s: %s is not an array: %w", method, key, err)
			}
		}
		items = append(items, pageItems...)
		cursor = ""
		if raw, ok := body["nextCursor"]; ok && !isNull(raw) {
			if err := json.Unmarshal(raw, &cursor); err != nil {
				return nil, fmt.Errorf("%s: nextCursor is not a string: %w", method, err)
			}
		}
		if cursor == "" {
			return items, nil
		}
		if seen[cursor] {
			return nil, fmt.Errorf("%s: the server repeated cursor %q", method, cursor)
		}
		seen[cursor] = true
	}
}

func (c *conn) generation() int64 { return c.gen.Load() }

func (c *conn) isDead() bool {
	select {
	case <-c.dead:
		return true
	default:
		return false
	}
}

// call sends one request. With drain, it waits before returning until the
// notifications that arrived before the response have been passed on. The
// result is returned exactly as the upstream wrote it; so is an error
// object (jsonrpc.Error.Raw).
func (c *conn) call(ctx context.Context, method string, params json.RawMessage, drain bool) (json.RawMessage, error) {
	name := c.u.Name()
	if c.isDead() {
		return nil, c.lostError(method)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	id := c.u.nextID.Add(1)
	resp, err := c.w.call(ctx, id, method, requestBody(id, method, params))
	if err != nil {
		switch {
		case ctx.Err() != nil:
			c.sendCancelled(id, context.Cause(ctx))
			return nil, ctx.Err()
		case c.isDead():
			return nil, c.lostError(method)
		case errors.Is(err, errSessionLost):
			return nil, err
		case c.fatal(err):
			c.fail(err)
			return nil, c.lostError(method)
		}
		return nil, fmt.Errorf("upstream %q: %s: %w", name, method, err)
	}
	if drain {
		c.waitDrained(ctx)
	}
	if len(resp.Error) > 0 && !isNull(resp.Error) {
		rpcErr, err := jsonrpc.ParseError(resp.Error)
		if err != nil {
			return nil, fmt.Errorf("upstream %q answered %s with an error that cannot be read: %w", name, method, err)
		}
		return nil, rpcErr
	}
	if len(resp.Result) == 0 {
		return nil, fmt.Errorf("upstream %q answered %s with neither a result nor an error", name, method)
	}
	return resp.Result, nil
}

// fatal reports whether a transport error means the connection is gone.
func (c *conn) fatal(err error) bool {
	if c.u.entry.Type == TypeStdio {
		// Anything but a cancelled context: the process has exited or its
		// pipes are broken.
		return true
	}
	var ue *url.Error
	return errors.As(err, &ue) || errors.Is(err, context.Canceled) || errors.Is(err, errTransportClosed)
}

// lostError is what a request on a torn-down connection fails with. It
// returns once the upstream has recorded the loss, so that a caller who
// sees the error also sees the upstream down (State, OnState).
func (c *conn) lostError(method string) error {
	<-c.settled
	name := c.u.Name()
	switch {
	case errors.Is(c.cause, errClosing):
		return unavailable(nil, "upstream %q was closed while handling %s", name, method)
	case c.u.entry.Type == TypeStdio:
		exit := c.exit
		if exit == "" {
			exit = c.cause.Error()
		}
		return unavailable(c.cause, "upstream %q exited while handling %s (%s); it will be restarted on the next call", name, method, exit)
	}
	return unavailable(c.cause, "upstream %q lost its connection while handling %s (%v); it will be reconnected on the next call", name, method, c.cause)
}

// fail tears the connection down once, for cause, and returns when it is.
func (c *conn) fail(cause error) {
	c.failOnce.Do(func() { c.teardown(cause) })
	<-c.dead
}

func (c *conn) teardown(cause error) {
	u := c.u
	closeErr := c.w.close()
	c.cancel()
	// The child of a stdio wire, read from the wire: its start set it
	// before it started the reader whose end of stream can bring us here
	// (a copy made by connect after start returned raced with that reader,
	// and a child that exited at once had its process group left alone).
	if st, ok := c.w.(*stdioWire); ok && st.cmd != nil {
		if errors.Is(closeErr, errChildShutdownTimeout) {
			c.exit = "it did not exit when asked to"
		} else {
			c.exit = st.exitState()
		}
		killProcessGroup(st.cmd)
	}
	c.cause = cause
	close(c.dead)
	if !errors.Is(cause, errClosing) && c.up.Load() {
		if c.exit != "" {
			u.log.Warn("upstream connection lost", "err", cause, "exit", c.exit)
		} else {
			u.log.Warn("upstream connection lost", "err", cause)
		}
	} else if closeErr != nil {
		u.log.Debug("closing upstream", "err", closeErr)
	}
	c.inMu.Lock()
	for _, cancel := range c.incoming {
		cancel()
	}
	c.inMu.Unlock()
	u.connLost(c)
	close(c.settled)
}

// sendCancelled tells the upstream that the client gave up on request id.
func (c *conn) sendCancelled(id int64, cause error) {
	reason := "request cancelled"
	if cause != nil {
		reason = cause.Error()
	}
	c.u.goTracked(func() {
		ctx, cancel := context.WithTimeout(c.ctx, cancelNotificationTimeout)
		defer cancel()
		params, _ := json.Marshal(struct {
			RequestID int64  `json:"requestId"`
			Reason    string `json:"reason"`
		}{id, reason})
		if err := c.w.send(ctx, notificationBody(methodCancelled, params)); err != nil {
			c.u.log.Debug("could not send notifications/cancelled", "request_id", id, "err", err)
		}
	})
}

// notify sends a notification with raw params, which must be a JSON
// object when present.
func (c *conn) notify(ctx context.Context, method string, params json.RawMessage) error {
	if len(params) > 0 && !isNull(params) {
		if p := bytes.TrimSpace(params); len(p) == 0 || p[0] != '{' || !json.Valid(p) {
			return fmt.Errorf("upstream %q: %s: params must be a JSON object", c.u.Name(), method)
		}
	}
	if err := c.w.send(ctx, notificationBody(method, params)); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if c.isDead() {
			return c.lostError(method)
		}
		return fmt.Errorf("upstream %q: %s: %w", c.u.Name(), method, err)
	}
	return nil
}

// onMessage is the wire's handler of the upstream's own messages: a
// request is answered in its own goroutine, a notification queued. It runs
// on the wire's reading goroutine, so it never waits.
func (c *conn) onMessage(ctx context.Context, m *envelope) {
	if m.HasID() {
		c.u.goTracked(func() { c.answer(ctx, m) }) // not once the upstream is closing
		return
	}
	if m.Method == methodCancelled && c.cancelIncoming(m.Params) {
		return
	}
	c.qmu.Lock()
	c.queue = append(c.queue, notification{method: m.Method, params: m.Params})
	c.enqueued++
	c.qmu.Unlock()
	select {
	case c.qwake <- struct{}{}:
	default:
	}
}

// startQueue starts passing notifications on.
func (c *conn) startQueue() {
	c.u.goTracked(c.processQueue)
}

func (c *conn) processQueue() {
	for {
		c.qmu.Lock()
		for len(c.queue) == 0 {
			c.qmu.Unlock()
			select {
			case <-c.qwake:
			case <-c.ctx.Done():
				return
			}
			c.qmu.Lock()
		}
		n := c.queue[0]
		c.queue[0] = notification{}
		c.queue = c.queue[1:]
		c.qmu.Unlock()

		c.handleNotification(n)

		c.qmu.Lock()
		c.processed++
		close(c.qchanged)
		c.qchanged = make(chan struct{})
		c.qmu.Unlock()
	}
}

// handleNotification refreshes the catalogue for a list_changed
// notification, then passes the notification on.
func (c *conn) handleNotification(n notification) {
	switch n.method {
	case methodToolsListChanged:
		c.refresh(methodToolsList, "tools", func(cat *Catalog, items []json.RawMessage) { cat.Tools = items })
	case methodResourcesChanged:
		c.refresh(methodResourcesList, "resources", func(cat *Catalog, items []json.RawMessage) { cat.Resources = items })
		c.refresh(methodTemplatesList, "resourceTemplates", func(cat *Catalog, items []json.RawMessage) { cat.ResourceTemplates = items })
	case methodPromptsListChanged:
		c.refresh(methodPromptsList, "prompts", func(cat *Catalog, items []json.RawMessage) { cat.Prompts = items })
	}
	if h := c.u.opts.OnNotification; h != nil {
		h(c.u, n.method, n.params)
	}
}

func (c *conn) refresh(method, key string, set func(*Catalog, []json.RawMessage)) {
	ctx, cancel := context.WithTimeout(c.ctx, c.u.opts.StartTimeout)
	defer cancel()
	items, err := c.list(ctx, method, key)
	if err != nil {
		c.u.log.Warn("could not refresh the catalogue", "method", method, "err", err)
		return
	}
	c.u.setCatalog(c, func(cat *Catalog) { set(cat, items) })
}

// waitDrained waits until every notification queued so far has been
// passed on, ctx ends or the connection is lost.
func (c *conn) waitDrained(ctx context.Context) {
	c.qmu.Lock()
	mark := c.enqueued
	for c.processed < mark {
		ch := c.qchanged
		c.qmu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return
		case <-c.dead:
			return
		}
		c.qmu.Lock()
	}
	c.qmu.Unlock()
}

// answer answers a request from the upstream and sends the response back
// raw: the result the handler returned, or its error object.
func (c *conn) answer(ctx context.Context, m *envelope) {
	resp := c.respond(ctx, m)
	if err := c.w.send(c.ctx, resp); err != nil {
		c.u.log.Debug("could not answer the upstream's request", "method", m.Method, "err", err)
	}
}

func (c *conn) respond(ctx context.Context, m *envelope) []byte {
	if m.Method == methodPing {
		return jsonrpc.Response(m.ID, json.RawMessage(`{}`), nil)
	}
	h := c.u.opts.OnRequest
	if h == nil {
		return jsonrpc.Response(m.ID, nil, &jsonrpc.Error{Code: mcp.METHOD_NOT_FOUND, Message: fmt.Sprintf("foldproxy does not handle %s", m.Method)})
	}
	var params json.RawMessage
	if len(m.Params) > 0 && !isNull(m.Params) {
		params = m.Params
	}
	rctx, cancel := context.WithCancel(ctx)
	key := jsonrpc.IDKey(m.ID)
	c.inMu.Lock()
	c.incoming[key] = cancel
	c.inMu.Unlock()
	defer func() {
		c.inMu.Lock()
		delete(c.incoming, key)
		c.inMu.Unlock()
		cancel()
	}()
	if c.isDead() {
		cancel()
	}

	res, err := h(rctx, c.u, m.Method, params)
	if err != nil {
		var rpcErr *jsonrpc.Error
		if errors.As(err, &rpcErr) {
			return jsonrpc.Response(m.ID, nil, rpcErr)
		}
		return jsonrpc.Response(m.ID, nil, &jsonrpc.Error{Code: mcp.INTERNAL_ERROR, Message: err.Error()})
	}
	if len(res) == 0 {
		res = json.RawMessage(`{}`)
	}
	return jsonrpc.Response(m.ID, res, nil)
}

// cancelIncoming cancels the server-to-client request that a
// notifications/cancelled names, if one is being answered, and reports
// whether it was.
func (c *conn) cancelIncoming(params json.RawMessage) bool {
	var p struct {
		RequestID json.RawMessage `json:"requestId"`
	}
	if json.Unmarshal(params, &p) != nil || len(p.RequestID) == 0 || isNull(p.RequestID) {
		return false
	}
	c.inMu.Lock()
	cancel, ok := c.incoming[jsonrpc.IDKey(p.RequestID)]
	c.inMu.Unlock()
	if ok {
		cancel()
	}
	return ok
}

// readStderr passes on each line the process writes to stderr. When stderr
// ends the process has most likely exited: a ping tells, and a dead
// process is torn down so that the state goes Down without waiting for a
// call to notice.
func (c *conn) readStderr(r io.Reader) {
	br := bufio.NewReaderSize(r, 4096)
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			c.stderrLine(strings.TrimRight(string(line), "\r\n"))
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil {
			break
		}
	}
	if c.isDead() || c.ctx.Err() != nil {
		return
	}
	ctx, cancel := context.WithTimeout(c.ctx, stderrProbeTimeout)
	defer cancel()
	id := c.u.nextID.Add(1)
	_, err := c.w.call(ctx, id, methodPing, requestBody(id, methodPing, nil))
	if err != nil && ctx.Err() == nil {
		c.fail(fmt.Errorf("stderr closed and ping failed: %w", err))
	}
}

func (c *conn) stderrLine(line string) {
	if line == "" {
		return
	}
	if h := c.u.opts.Stderr; h != nil {
		h(c.u, line)
		return
	}
	c.u.log.Info("upstream stderr", "line", line)
}

// reinitialize starts a new session on an HTTP connection whose server has
// forgotten the old one, unless another call already did since generation
// seen. The catalogue is fetched again, as the new session may differ.
func (c *conn) reinitialize(ctx context.Context, seen int64) error {
	c.initMu.Lock()
	defer c.initMu.Unlock()
	if c.isDead() {
		return c.lostError(methodInitialize)
	}
	if c.gen.Load() != seen {
		return nil
	}
	sctx, cancel := context.WithTimeout(ctx, c.u.opts.StartTimeout)
	defer cancel()
	ir, err := c.initialize(sctx)
	if err == nil {
		var cat Catalog
		if cat, err = c.fetchCatalog(sctx, ir); err == nil {
			c.gen.Add(1)
			c.u.setCatalog(c, func(dst *Catalog) { *dst = cat })
			return nil
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	c.fail(fmt.Errorf("starting a new session: %w", err))
	return unavailable(err, "upstream %q lost its session and could not start a new one: %v; it will be reconnected on the next call", c.u.Name(), err)
}
