package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/foldproxy/foldproxy/fold"
	"github.com/foldproxy/foldproxy/intercept"
	"github.com/foldproxy/foldproxy/policy/jsonscan"
	"github.com/foldproxy/foldproxy/upstreams"
)

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
		var re *upstreams.RPCError
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
