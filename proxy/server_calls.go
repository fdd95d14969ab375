package proxy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/foldproxy/foldproxy/intercept"
	"github.com/foldproxy/foldproxy/policy/jsonscan"
	"github.com/foldproxy/foldproxy/upstreams"
)

// This file holds the core's handling of what it forwards: a call through
// its chain and the answer it turns into, the innermost handlers, the
// requests shared upstreams see once (logging level, subscriptions) and the
// server-to-client requests to the agent.

// finish runs an exchange through its chain and turns the outcome into the
// JSON-RPC answer.
func (s *Server) finish(ctx context.Context, sess *Session, ex *intercept.Exchange, h Handler, out Outbound) (json.RawMessage, *Error) {
	var restore func()
	if ex.Upstream != "" {
		var err error
		if ex.Params, restore, err = s.routeProgress(sess, ex.Params, out); err != nil {
			return nil, Errorf(CodeInvalidParams, "%s: %v", ex.Method, err)
		}
		defer restore()
		c, untrack := s.trackCall(ex.Upstream, sess, out)
		defer untrack()
		// Requests the upstream makes on this call's own response stream
		// carry the call in their context (see pickSession).
		ctx = context.WithValue(ctx, callCtxKey{}, c)
	}
	herr := h(ctx, ex)
	if ex.Err == nil && herr != nil {
		ex.Err = herr
	}
	if ex.Err != nil {
		if ex.Method == "tools/call" {
			return toolError(ex.Err.Error()), nil
		}
		code := CodeInternalError
		if errors.Is(ex.Err, upstreams.ErrUnavailable) {
			code = CodeUpstreamUnavailable
		}
		return nil, &Error{Code: code, Message: ex.Err.Error()}
	}
	if ex.RPCError != nil {
		return nil, rpcErrorOf(ex.RPCError)
	}
	if ex.Result == nil {
		return nil, Errorf(CodeInternalError, "%s: no result", ex.Method)
	}
	return ex.Result, nil
}

// rpcErrorOf is the error sent downstream for an exchange's JSON-RPC
// error: the same *Error, as the upstream sent it or as the scrubber
// rewrote it; anything else (which no handler of ours stores) is an
// internal error.
func rpcErrorOf(err error) *Error {
	var re *Error
	if errors.As(err, &re) {
		return re
	}
	return &Error{Code: CodeInternalError, Message: err.Error()}
}

// callUpstream is the innermost handler of the forwarding chain.
func (s *Server) callUpstream(ctx context.Context, ex *intercept.Exchange) error {
	u, ok := s.upstreams[ex.Upstream]
	if !ok {
		ex.Err = fmt.Errorf("unknown upstream %q", ex.Upstream)
		return ex.Err
	}
	d := s.opts.Settings.CallTimeout(ex.Upstream)
	cctx, cancel := context.WithTimeoutCause(ctx, d, &callTimeoutError{upstream: ex.Upstream, method: ex.Method, d: d})
	defer cancel()
	// A branch that closes meanwhile (its deadline, a parent returning)
	// ends the calls still in flight in it: they are cancelled upstream.
	// context.AfterFunc registers the call with the branch's context; no
	// goroutine waits for it per call.
	var branchClosed atomic.Pointer[error]
	if w, ok := s.opts.Fold.(branchWatcher); ok && ex.Branch != "" {
		if closed, why := w.BranchDone(ex.Session, ex.Branch); closed != nil {
			bctx, bcancel := context.WithCancel(cctx)
			defer bcancel()
			stop := context.AfterFunc(closed, func() {
				err := fmt.Errorf("the branch closed while this call was in flight, so foldproxy cancelled it upstream: %w", why())
				branchClosed.Store(&err)
				bcancel()
			})
			defer stop()
			cctx = bctx
		}
	}
	t0 := time.Now()
	res, err := u.Call(cctx, ex.Method, ex.Params)
	ex.UpstreamLatency = time.Since(t0)
	if err != nil {
		var re *Error
		if errors.As(err, &re) {
			ex.RPCError = re
			ex.Outcome = intercept.OutcomeError
			return nil
		}
		ex.Outcome = intercept.OutcomeError
		switch {
		case ctx.Err() != nil:
			// The agent's cancel, its session's end, or a deadline of the
			// chain (a branch force-returned): the cause says which.
			err = fmt.Errorf("%s on %s ended: %w", ex.Method, ex.Upstream, context.Cause(ctx))
		case branchClosed.Load() != nil:
			err = *branchClosed.Load()
		case cctx.Err() != nil:
			err = context.Cause(cctx)
		}
		ex.Err = err
		return err
	}
	ex.Result = res
	return nil
}

// callTimeoutError is the cause of a call's context when the upstream did
// not answer within its callTimeout. Its text is composed only when read:
// every call carries one, and few ever time out.
type callTimeoutError struct {
	upstream, method string
	d                time.Duration
}

func (e *callTimeoutError) Error() string {
	return fmt.Sprintf("upstream %q did not answer %s within %s (foldproxy.upstreams.%s.callTimeout); foldproxy cancelled it upstream",
		e.upstream, e.method, e.d, e.upstream)
}

// callFold is the innermost handler for foldproxy's own tools.
func (s *Server) callFold(ctx context.Context, ex *intercept.Exchange) error {
	return callFoldTool(ctx, s.opts.Fold, ex)
}

// callFoldTool answers a fold tool's exchange from fold: the innermost
// handler of both the MCP front and the remote front.
func callFoldTool(ctx context.Context, fold Folder, ex *intercept.Exchange) error {
	res, err := fold.CallTool(ctx, ex.Session, ex.Name, ex.Args)
	if err != nil {
		ex.Err = err
		ex.Outcome = intercept.OutcomeError
		return err
	}
	ex.Result = res
	if ex.Outcome == "" {
		ex.Outcome = intercept.OutcomeOK
	}
	return nil
}

func (s *Server) setLevel(ctx context.Context, sess *Session, params json.RawMessage) (json.RawMessage, *Error) {
	level := jsonscan.StringField(params, "level")
	idx := levelIndex(level)
	if idx < 0 {
		return nil, Errorf(CodeInvalidParams, "logging/setLevel: level %q is not one of %s", level, strings.Join(logLevels[:], ", "))
	}
	sess.mu.Lock()
	sess.logLevel = idx
	sess.mu.Unlock()
	// Upstreams are shared by every session: ask each for the most verbose
	// level any session wants, and filter per session on the way back.
	lowest := idx
	s.mu.Lock()
	for _, o := range s.sessions {
		o.mu.Lock()
		if o.logLevel >= 0 && o.logLevel < lowest {
			lowest = o.logLevel
		}
		o.mu.Unlock()
	}
	s.mu.Unlock()
	p := marshalNoEscape(map[string]string{"level": logLevels[lowest]})
	for _, name := range s.names {
		u := s.upstreams[name]
		if !hasCap(u.Catalog().ServerCapabilities, "logging") {
			continue
		}
		if _, err := u.Call(ctx, "logging/setLevel", p); err != nil {
			s.log.Debug("logging/setLevel upstream", "upstream", name, "err", err)
		}
	}
	return json.RawMessage("{}"), nil
}

func (s *Server) subscribe(ctx context.Context, sess *Session, method string, params json.RawMessage) (json.RawMessage, *Error) {
	uri := jsonscan.StringField(params, "uri")
	up, ok := s.catalog().resourceUpstream(uri)
	if !ok {
		return nil, &Error{Code: CodeResourceNotFound, Message: fmt.Sprintf("resource not found: %s", uri)}
	}
	s.mu.Lock()
	set := s.subs[uri]
	first := len(set) == 0
	if method == "resources/subscribe" {
		if set == nil {
			set = make(map[*Session]bool)
			s.subs[uri] = set
		}
		set[sess] = true
	} else {
		delete(set, sess)
	}
	last := len(set) == 0
	s.mu.Unlock()
	// Upstreams are shared: subscribe on the first subscriber, unsubscribe
	// after the last.
	if (method == "resources/subscribe" && first) || (method == "resources/unsubscribe" && last) {
		if _, err := s.upstreams[up].Call(ctx, method, params); err != nil {
			var re *Error
			if errors.As(err, &re) {
				return nil, re
			}
			return nil, &Error{Code: CodeUpstreamUnavailable, Message: err.Error()}
		}
	}
	return json.RawMessage("{}"), nil
}

func (s *Server) handleNotification(ctx context.Context, sess *Session, msg *Message) {
	switch msg.Method {
	case "notifications/initialized":
		sess.mu.Lock()
		sess.initialized = true
		sess.mu.Unlock()
		// Servers ask for roots when they start, usually before any agent
		// is connected: tell them the roots changed so that they ask the
		// agent that now can answer.
		if sess.hasCapability("roots") {
			for _, name := range s.names {
				if err := s.upstreams[name].Notify(ctx, "notifications/roots/list_changed", nil); err != nil {
					s.log.Debug("relaying roots/list_changed", "upstream", name, "err", err)
				}
			}
		}
	case "notifications/cancelled":
		var p struct {
			RequestID json.RawMessage `json:"requestId"`
		}
		if json.Unmarshal(msg.Params, &p) == nil && len(p.RequestID) > 0 {
			sess.mu.Lock()
			cancel := sess.inflight[string(p.RequestID)]
			sess.mu.Unlock()
			if cancel != nil {
				cancel(errAgentCancelled)
			}
		}
	case "notifications/roots/list_changed":
		for _, name := range s.names {
			if err := s.upstreams[name].Notify(ctx, msg.Method, msg.Params); err != nil {
				s.log.Debug("relaying roots/list_changed", "upstream", name, "err", err)
			}
		}
	}
	s.opts.Fold.TouchSession(ctx, sess.id)
}

func (s *Server) deliverResponse(sess *Session, msg *Message) {
	var id string
	if json.Unmarshal(msg.ID, &id) != nil {
		id = string(msg.ID)
	}
	sess.mu.Lock()
	ch := sess.pending[id]
	delete(sess.pending, id)
	sess.mu.Unlock()
	if ch != nil {
		ch <- msg
	}
}

// request sends a server-to-client request to the agent and waits for its answer.
func (s *Server) request(ctx context.Context, sess *Session, out Outbound, method string, params json.RawMessage) (json.RawMessage, error) {
	id := newID("fp")
	ch := make(chan *Message, 1)
	sess.mu.Lock()
	if sess.closed {
		sess.mu.Unlock()
		return nil, errors.New("the agent's session has ended")
	}
	sess.pending[id] = ch
	sess.mu.Unlock()
	defer func() {
		sess.mu.Lock()
		delete(sess.pending, id)
		sess.mu.Unlock()
	}()
	if !sess.send(out, requestMessage(jsonscan.Quote(id), method, params)) {
		return nil, fmt.Errorf("cannot reach the agent to ask %s: no open stream", method)
	}
	select {
	case <-sess.ctx.Done():
		return nil, errors.New("the agent's session has ended")
	case m := <-ch:
		if m.Error != nil {
			return nil, m.Error
		}
		return m.Result, nil
	case <-ctx.Done():
		reason := "cancelled by the upstream server"
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			reason = context.Cause(ctx).Error()
		}
		cancelled, _ := json.Marshal(map[string]any{"requestId": id, "reason": reason})
		sess.send(out, Notification("notifications/cancelled", cancelled))
		return nil, context.Cause(ctx)
	}
}

func toolError(text string) json.RawMessage {
	return marshalNoEscape(map[string]any{
		"content": []map[string]string{{"type": "text", "text": text}},
		"isError": true,
	})
}

func hasCap(caps json.RawMessage, name string) bool {
	if len(caps) == 0 {
		return false
	}
	_, ok := jsonscan.Field(caps, name)
	return ok
}

// newID returns a unique id: random, so that ids do not repeat across
// restarts (session ids are persisted).
func newID(prefix string) string {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return prefix + "-" + hex.EncodeToString(b[:])
}
