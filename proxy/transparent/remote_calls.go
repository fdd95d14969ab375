package transparent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/foldproxy/foldproxy/intercept"
	"github.com/foldproxy/foldproxy/policy/jsonscan"
	"github.com/foldproxy/foldproxy/proxy"
)

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
	forward chan struct{}       // closed when the chain lets the call go to the server
	resp    chan *proxy.Message // the server's response (buffered)
	done    chan struct{}       // closed when the chain is done; final is set
	final   []byte              // the response message the client gets
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
			ex.RPCError = &proxy.Error{Code: m.Error.Code, Message: m.Error.Message, Data: m.Error.Data}
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

// exchangeOf is the exchange of a chained request.
func exchangeOf(sess *remoteSession, msg *proxy.Message) *intercept.Exchange {
	params := msg.Params
	if len(params) == 0 || params[0] != '{' {
		params = json.RawMessage("{}")
	}
	ex := &intercept.Exchange{Session: sess.foldID(), Upstream: sess.srv.name, Method: msg.Method, Params: params, Start: time.Now()}
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
func (f *RemoteFront) startCall(sess *remoteSession, msg *proxy.Message) *pendingCall {
	pc := &pendingCall{forward: make(chan struct{}), resp: make(chan *proxy.Message, 1), done: make(chan struct{}), sess: sess}
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
func answerOf(msg *proxy.Message, ex *intercept.Exchange, herr error) []byte {
	if ex.Err == nil && herr != nil {
		ex.Err = herr
	}
	switch {
	case ex.Err != nil:
		if msg.Method == "tools/call" {
			return proxy.Response(msg.ID, proxy.ToolError(ex.Err.Error()), nil)
		}
		return proxy.Response(msg.ID, nil, &proxy.Error{Code: proxy.CodeInternalError, Message: ex.Err.Error()})
	case ex.RPCError != nil:
		return proxy.Response(msg.ID, nil, proxy.RPCErrorOf(ex.RPCError))
	case ex.Result == nil:
		return proxy.Response(msg.ID, nil, proxy.Errorf(proxy.CodeInternalError, "%s: no result", msg.Method))
	}
	return proxy.Response(msg.ID, ex.Result, nil)
}

// localAnswer is an error answer foldproxy gives itself.
func localAnswer(msg *proxy.Message, text string) []byte {
	if msg.Method == "tools/call" {
		return proxy.Response(msg.ID, proxy.ToolError(text), nil)
	}
	return proxy.Response(msg.ID, nil, &proxy.Error{Code: proxy.CodeInternalError, Message: text})
}

// foldCall answers a fold tool call.
func (f *RemoteFront) foldCall(ctx context.Context, sess *remoteSession, msg *proxy.Message) []byte {
	if err := f.open(ctx, sess); err != nil {
		return localAnswer(msg, fmt.Sprintf("foldproxy could not open the fold session of this MCP session: %v", err))
	}
	ex := exchangeOf(sess, msg)
	ex.Upstream = ""
	herr := f.opts.Core.CallFoldToolOf(ctx, ex)
	return answerOf(msg, ex, herr)
}

// isFoldCall reports whether a tools/call of sess's server names a fold
// tool foldproxy (the core) answers.
func (f *RemoteFront) isFoldCall(sess *remoteSession, msg *proxy.Message) bool {
	if !sess.srv.foldTools || msg.Method != "tools/call" {
		return false
	}
	return f.opts.Core.IsFoldTool(jsonscan.StringField(msg.Params, "name"))
}
