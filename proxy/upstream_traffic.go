package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/foldproxy/foldproxy/intercept"
	"github.com/foldproxy/foldproxy/policy/jsonscan"
)

// Upstreams are shared by every downstream session, so messages coming back
// from an upstream must be routed to the session whose call caused them,
// and to no other:
//
//   - progress: the agent's progressToken is swapped for a proxy-unique one
//     on the way up and swapped back on the way down, to the stream of the
//     request it belongs to;
//   - server-to-client requests (sampling, elicitation, roots) go to the
//     session of the call they were made for: on a streamable HTTP upstream
//     the request arrives on that call's response stream (its context
//     carries the call, see callFromContext); otherwise to the one session
//     with calls in flight on that upstream, or, with none in flight, the
//     one session connected. When nothing ties a request to one session it
//     is refused to the upstream with a JSON-RPC error, never guessed;
//   - logging messages go to the one session with calls in flight on that
//     upstream; with calls of several sessions in flight nothing tells whose
//     the message is and it is dropped; with none in flight (a server's own
//     log, not a call's) it goes to every session that asked for its level;
//   - resources/updated goes to the sessions subscribed to the resource;
//   - list_changed is turned into a catalogue rebuild (UpstreamChanged).
//
// An answer from the agent is only taken from the session that was asked
// (Session.pending). Everything relayed passes the intercept chain first,
// as an exchange of kind MessageNotification or MessageRequest (relayed):
// its innermost handler scrubs the params; what cannot be scanned is
// dropped.

// callCtxKey is the context key under which finish leaves the call in
// flight, for the server-to-client requests made on its behalf.
type callCtxKey struct{}

// callFromContext returns the call a request from upstream was made for,
// when its context tells (a request on a call's own response stream).
func callFromContext(ctx context.Context, upstream string) *activeCall {
	c, _ := ctx.Value(callCtxKey{}).(*activeCall)
	if c == nil || c.upstream != upstream {
		return nil
	}
	return c
}

// routeProgress swaps the request's progress token for a unique one and
// registers the route back. restore unregisters it.
func (s *Server) routeProgress(sess *Session, params json.RawMessage, out Outbound) (json.RawMessage, func(), error) {
	meta, ok := jsonscan.Field(params, "_meta")
	if !ok || len(meta) == 0 || meta[0] != '{' {
		return params, func() {}, nil
	}
	tok, ok := jsonscan.Field(meta, "progressToken")
	if !ok || string(tok) == "null" {
		return params, func() {}, nil
	}
	ours := newID("pt")
	meta2, err := jsonscan.SetField(meta, "progressToken", jsonscan.Quote(ours))
	if err != nil {
		return nil, nil, err
	}
	params2, err := jsonscan.SetField(params, "_meta", meta2)
	if err != nil {
		return nil, nil, err
	}
	s.mu.Lock()
	s.progress[ours] = &progressRoute{sess: sess, token: append(json.RawMessage(nil), tok...), out: out}
	s.mu.Unlock()
	return params2, func() {
		s.mu.Lock()
		delete(s.progress, ours)
		s.mu.Unlock()
	}, nil
}

// trackCall records a call in flight on an upstream, for routing; the
// returned func removes it.
func (s *Server) trackCall(upstream string, sess *Session, out Outbound) (*activeCall, func()) {
	c := &activeCall{upstream: upstream, sess: sess, out: out}
	s.mu.Lock()
	s.calls[upstream] = append(s.calls[upstream], c)
	s.mu.Unlock()
	return c, func() {
		s.mu.Lock()
		list := s.calls[upstream]
		for i, x := range list {
			if x == c {
				list = append(list[:i], list[i+1:]...)
				break
			}
		}
		if len(list) == 0 {
			delete(s.calls, upstream)
		} else {
			s.calls[upstream] = list
		}
		s.mu.Unlock()
	}
}

// soleCaller returns the latest call in flight on upstream when every call
// in flight there is one session's; n is the number of distinct sessions
// with calls in flight.
func (s *Server) soleCaller(upstream string) (c *activeCall, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	calls := s.calls[upstream]
	if len(calls) == 0 {
		return nil, 0
	}
	last := calls[len(calls)-1]
	for _, x := range calls {
		if x.sess != last.sess {
			seen := map[*Session]bool{}
			for _, y := range calls {
				seen[y.sess] = true
			}
			return nil, len(seen)
		}
	}
	return last, 1
}

// scrub cleans catalogue text from upstream; ok is false when it could
// not be scanned and must be dropped (fail closed). Redactions are
// reported to the Observer.
func (s *Server) scrub(ctx context.Context, upstream, method string, raw json.RawMessage) (json.RawMessage, bool) {
	if s.opts.Scrubber == nil || len(raw) == 0 {
		return raw, true
	}
	clean, counts, err := s.opts.Scrubber.ScrubJSON(ctx, raw)
	if err != nil {
		s.log.Warn("relayed message withheld: it could not be scanned for secrets", "upstream", upstream, "method", method, "err", err)
		return nil, false
	}
	if len(counts) > 0 && s.opts.Observer != nil {
		s.opts.Observer.Relayed(upstream, method, counts)
	}
	return clean, true
}

// relayed passes a notification or request from upstream, params raw,
// through the chain (s.relay) and returns the params to relay; ok is false
// when the message must be dropped (it could not be scanned).
func (s *Server) relayed(ctx context.Context, kind intercept.MessageKind, upstream, method string, params json.RawMessage) (json.RawMessage, bool) {
	ex := &intercept.Exchange{Kind: kind, Upstream: upstream, Method: method, Params: params}
	if err := s.relay(ctx, ex); err != nil || ex.Err != nil {
		return nil, false
	}
	return ex.Params, true
}

// scrubRelayed is the innermost handler of the relay chain: it scrubs the
// exchange's params, or withholds the message (ex.Err).
func (s *Server) scrubRelayed(ctx context.Context, ex *intercept.Exchange) error {
	p, ok := s.scrub(ctx, ex.Upstream, ex.Method, ex.Params)
	if !ok {
		ex.Err = errRelayWithheld
		ex.Outcome = intercept.OutcomeWithheld
		return ex.Err
	}
	ex.Params = p
	return nil
}

// errRelayWithheld withholds a relayed message that could not be scanned.
var errRelayWithheld = errors.New("foldproxy withheld this message: it could not be scanned for secrets")

// UpstreamNotification relays a notification from an upstream.
func (s *Server) UpstreamNotification(upstream, method string, params json.RawMessage) {
	ctx := context.Background()
	switch method {
	case "notifications/tools/list_changed", "notifications/prompts/list_changed", "notifications/resources/list_changed":
		s.UpstreamChanged(upstream)
	case "notifications/progress":
		tok, _ := jsonscan.Field(params, "progressToken")
		var key string
		if json.Unmarshal(tok, &key) != nil {
			return
		}
		s.mu.Lock()
		r := s.progress[key]
		s.mu.Unlock()
		if r == nil {
			return // the call has finished: late progress is dropped
		}
		// Scrub what the upstream sent, then put the agent's own token
		// back: the token is the agent's value, not upstream content, and a
		// token that merely looks random (ours or the agent's) must not be
		// redacted out of the agent's reach.
		p, ok := s.relayed(ctx, intercept.MessageNotification, upstream, method, params)
		if !ok {
			return
		}
		p, err := jsonscan.SetField(p, "progressToken", r.token)
		if err != nil {
			return
		}
		r.sess.send(r.out, Notification(method, p))
	case "notifications/message":
		c, n := s.soleCaller(upstream)
		if n > 1 {
			s.log.Debug("log message dropped: calls of several sessions are in flight on its upstream and nothing tells whose it is", "upstream", upstream)
			return
		}
		p, ok := s.relayed(ctx, intercept.MessageNotification, upstream, method, params)
		if !ok {
			return
		}
		level := jsonscan.StringField(p, "level")
		msg := Notification(method, p)
		if c != nil {
			if c.sess.wantsLog(level) {
				c.sess.send(c.out, msg)
			}
			return
		}
		for _, sess := range s.liveSessions() {
			if sess.wantsLog(level) {
				sess.send(nil, msg)
			}
		}
	case "notifications/resources/updated":
		p, ok := s.relayed(ctx, intercept.MessageNotification, upstream, method, params)
		if !ok {
			return
		}
		uri := jsonscan.StringField(p, "uri")
		s.mu.Lock()
		var targets []*Session
		for sess := range s.subs[uri] {
			targets = append(targets, sess)
		}
		s.mu.Unlock()
		for _, sess := range targets {
			sess.send(nil, Notification(method, p))
		}
	case "notifications/cancelled":
		// The upstream gave up on one of its requests to the agent; the
		// request's context is cancelled by the upstream client, which ends
		// the relayed request (see request).
	default:
		s.log.Debug("upstream notification not relayed", "upstream", upstream, "method", method)
	}
}

// ErrNoClient is returned to an upstream whose server-to-client request no
// session can answer.
var ErrNoClient = errors.New("no connected client can answer this request")

// UpstreamRequest relays a server-to-client request (sampling/createMessage,
// elicitation/create, roots/list) from an upstream to an agent and returns
// the agent's answer.
func (s *Server) UpstreamRequest(ctx context.Context, upstream, method string, params json.RawMessage) (json.RawMessage, error) {
	var capName string
	switch method {
	case "sampling/createMessage":
		capName = "sampling"
	case "elicitation/create":
		capName = "elicitation"
	case "roots/list":
		capName = "roots"
	case "ping":
		return json.RawMessage("{}"), nil
	default:
		return nil, &Error{Code: CodeMethodNotFound, Message: "method not found: " + method}
	}
	sess, out, err := s.pickSession(ctx, upstream, capName)
	if err != nil {
		return nil, &Error{Code: CodeInternalError, Message: fmt.Sprintf("%s: %v", method, err)}
	}
	if !sess.hasCapability(capName) {
		return nil, &Error{Code: CodeMethodNotFound, Message: fmt.Sprintf("the client does not support %s", capName)}
	}
	p, ok := s.relayed(ctx, intercept.MessageRequest, upstream, method, params)
	if !ok {
		return nil, &Error{Code: CodeInternalError, Message: "foldproxy withheld this request: it could not be scanned for secrets"}
	}
	d := s.opts.Settings.CallTimeout(upstream)
	ctx, cancel := context.WithTimeoutCause(ctx, d, fmt.Errorf(
		"the agent did not answer %s within %s (foldproxy.upstreams.%s.callTimeout); foldproxy cancelled it", method, d, upstream))
	defer cancel()
	res, err := s.request(ctx, sess, out, method, p)
	if err != nil {
		var re *Error
		if errors.As(err, &re) {
			return nil, re
		}
		return nil, &Error{Code: CodeInternalError, Message: fmt.Sprintf("%s: %v", method, err)}
	}
	return res, nil
}

// pickSession chooses the session (and stream) a server-to-client request
// from upstream goes to: the session of the call it was made for, or else
// the only one it can be for; an error says why there is none.
func (s *Server) pickSession(ctx context.Context, upstream, capName string) (*Session, Outbound, error) {
	if c := callFromContext(ctx, upstream); c != nil {
		return c.sess, c.out, nil
	}
	c, n := s.soleCaller(upstream)
	switch {
	case c != nil:
		return c.sess, c.out, nil
	case n > 1:
		return nil, nil, fmt.Errorf("foldproxy cannot tell which of its %d clients with calls in flight on upstream %q this request is for, so it asks none of them; make the request on the response stream of the call it belongs to (streamable HTTP), or retry when one call is in flight", n, upstream)
	}
	var only *Session
	for _, sess := range s.liveSessions() {
		if !sess.hasCapability(capName) {
			continue
		}
		if only != nil {
			return nil, nil, fmt.Errorf("no call is in flight on upstream %q and several clients are connected: foldproxy asks none of them, as nothing tells whose this request is; make it during a call", upstream)
		}
		only = sess
	}
	if only == nil {
		for _, sess := range s.liveSessions() {
			return sess, nil, nil // it cannot answer: the caller says so
		}
		return nil, nil, ErrNoClient
	}
	return only, nil, nil
}
