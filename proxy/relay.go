package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/foldproxy/foldproxy/upstreams"
)

// Upstreams are shared by every downstream session, so messages coming back
// from an upstream must be routed to the right session:
//
//   - progress: the agent's progressToken is swapped for a proxy-unique one
//     on the way up and swapped back on the way down, to the stream of the
//     request it belongs to;
//   - logging messages go to the sessions with a call in flight on that
//     upstream (on the call's stream), or to every session when none has;
//   - server-to-client requests (sampling, elicitation, roots) go to the
//     session with the most recent call in flight on that upstream, or else
//     the most recently active session;
//   - resources/updated goes to the sessions subscribed to the resource;
//   - list_changed is turned into a catalogue rebuild (UpstreamChanged).
//
// Everything relayed is scrubbed first; what cannot be scanned is dropped.

// routeProgress swaps the request's progress token for a unique one and
// registers the route back. restore unregisters it.
func (s *Server) routeProgress(sess *Session, params json.RawMessage, out Outbound) (json.RawMessage, func(), error) {
	meta, ok := getField(params, "_meta")
	if !ok || len(meta) == 0 || meta[0] != '{' {
		return params, func() {}, nil
	}
	tok, ok := getField(meta, "progressToken")
	if !ok || string(tok) == "null" {
		return params, func() {}, nil
	}
	ours := newID("pt")
	meta2, err := setField(meta, "progressToken", quote(ours))
	if err != nil {
		return nil, nil, err
	}
	params2, err := setField(params, "_meta", meta2)
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
func (s *Server) trackCall(upstream string, sess *Session, out Outbound) func() {
	c := &activeCall{sess: sess, out: out}
	s.mu.Lock()
	s.calls[upstream] = append(s.calls[upstream], c)
	s.mu.Unlock()
	return func() {
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

// scrub cleans a relayed message or catalogue text from upstream; ok is
// false when it could not be scanned and must be dropped (fail closed).
// Redactions are reported to the Observer.
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

// UpstreamNotification relays a notification from an upstream.
func (s *Server) UpstreamNotification(upstream, method string, params json.RawMessage) {
	ctx := context.Background()
	switch method {
	case "notifications/tools/list_changed", "notifications/prompts/list_changed", "notifications/resources/list_changed":
		s.UpstreamChanged(upstream)
	case "notifications/progress":
		tok, _ := getField(params, "progressToken")
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
		p, err := setField(params, "progressToken", r.token)
		if err != nil {
			return
		}
		if p, ok := s.scrub(ctx, upstream, method, p); ok {
			r.sess.send(r.out, Notification(method, p))
		}
	case "notifications/message":
		p, ok := s.scrub(ctx, upstream, method, params)
		if !ok {
			return
		}
		level := stringField(p, "level")
		msg := Notification(method, p)
		s.mu.Lock()
		calls := append([]*activeCall(nil), s.calls[upstream]...)
		s.mu.Unlock()
		if len(calls) > 0 {
			seen := map[*Session]bool{}
			for _, c := range calls {
				if !seen[c.sess] && c.sess.wantsLog(level) {
					seen[c.sess] = true
					c.sess.send(c.out, msg)
				}
			}
			return
		}
		for _, sess := range s.liveSessions() {
			if sess.wantsLog(level) {
				sess.send(nil, msg)
			}
		}
	case "notifications/resources/updated":
		p, ok := s.scrub(ctx, upstream, method, params)
		if !ok {
			return
		}
		uri := stringField(p, "uri")
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
		return nil, &upstreams.RPCError{Code: CodeMethodNotFound, Message: "method not found: " + method}
	}
	sess, out := s.pickSession(upstream)
	if sess == nil {
		return nil, &upstreams.RPCError{Code: CodeInternalError, Message: fmt.Sprintf("%s: %v", method, ErrNoClient)}
	}
	if !sess.hasCapability(capName) {
		return nil, &upstreams.RPCError{Code: CodeMethodNotFound, Message: fmt.Sprintf("the client does not support %s", capName)}
	}
	p, ok := s.scrub(ctx, upstream, method, params)
	if !ok {
		return nil, &upstreams.RPCError{Code: CodeInternalError, Message: "foldproxy withheld this request: it could not be scanned for secrets"}
	}
	res, err := s.request(ctx, sess, out, method, p)
	if err != nil {
		var re *upstreams.RPCError
		if errors.As(err, &re) {
			return nil, re
		}
		return nil, &upstreams.RPCError{Code: CodeInternalError, Message: fmt.Sprintf("%s: %v", method, err)}
	}
	return res, nil
}

// pickSession chooses the session (and stream) a server-to-client request
// from upstream goes to.
func (s *Server) pickSession(upstream string) (*Session, Outbound) {
	s.mu.Lock()
	if calls := s.calls[upstream]; len(calls) > 0 {
		c := calls[len(calls)-1]
		s.mu.Unlock()
		return c.sess, c.out
	}
	s.mu.Unlock()
	var best *Session
	for _, sess := range s.liveSessions() {
		if best == nil {
			best = sess
			continue
		}
		sess.mu.Lock()
		t := sess.lastActive
		sess.mu.Unlock()
		best.mu.Lock()
		bt := best.lastActive
		best.mu.Unlock()
		if t.After(bt) {
			best = sess
		}
	}
	return best, nil
}
