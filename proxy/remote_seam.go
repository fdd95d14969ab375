package proxy

import (
	"context"
	"encoding/json"
	"time"

	"github.com/foldproxy/foldproxy/fold"
	"github.com/foldproxy/foldproxy/intercept"
	"github.com/foldproxy/foldproxy/policy/jsonscan"
)

// The core's side of the remote MCP front of transparent mode
// (transparent.RemoteFront), a transport of this core: the JSON-RPC codec
// as the MCP front has it, so that both fronts answer alike, and below the
// sessions and fold tools the core serves it.

// ToolError is a tools/call result that reports text as the tool's error.
func ToolError(text string) json.RawMessage { return toolError(text) }

// RPCErrorOf is the JSON-RPC error the MCP front answers err with.
func RPCErrorOf(err error) *Error { return rpcErrorOf(err) }

// ParseOne decodes one JSON-RPC message (not a batch).
func ParseOne(data []byte) (*Message, *Error) { return parseOne(data) }

// Request encodes a request to the client (a server-to-client request
// relayed).
func Request(id json.RawMessage, method string, params json.RawMessage) []byte {
	return requestMessage(id, method, params)
}

// MarshalNoEscape is json.Marshal without escaping <, > and &.
func MarshalNoEscape(v any) json.RawMessage { return marshalNoEscape(v) }

// The core's sessions of transport fronts that relay a client's own MCP
// session to its own server (the remote MCP front of transparent mode):
// the core holds their fold sessions, opens, touches and ends them as it
// does its own, and answers their fold tools through its own chains; it
// sends them nothing (they are not among the sessions it relays upstream
// traffic to, see liveSessions).

// OpenTransportSession opens a session of such a front, with a new id
// (prefix "t"), and its fold session (transport, the client described by
// clientInfo).
func (s *Server) OpenTransportSession(ctx context.Context, transport string, clientInfo json.RawMessage) (*Session, error) {
	sess := newSession(newID("t"), transport, nil)
	now := time.Now()
	if err := s.opts.Fold.OpenSession(ctx, fold.SessionRecord{
		ID: sess.id, Transport: transport, Created: now, LastSeen: now, ClientInfo: clientInfo,
	}); err != nil {
		return nil, err
	}
	sess.initialized, sess.relayOnly = true, true
	s.mu.Lock()
	s.sessions[sess.id] = sess
	s.mu.Unlock()
	if s.opts.Observer != nil {
		s.opts.Observer.SessionOpened()
	}
	return sess, nil
}

// TouchSession notes activity of sess, in memory and in its fold session.
func (s *Server) TouchSession(ctx context.Context, sess *Session) {
	sess.touch()
	s.opts.Fold.TouchSession(ctx, sess.id)
}

// FoldTools are the catalogue entries of the fold tools, as the MCP
// front's tools/list serves them.
func (s *Server) FoldTools() []json.RawMessage {
	cat := s.catalog()
	out := make([]json.RawMessage, 0, len(cat.foldTools))
	for _, t := range cat.tools {
		if cat.foldTools[jsonscan.StringField(t, "name")] {
			out = append(out, t)
		}
	}
	return out
}

// IsFoldTool reports whether name is one of the fold tools.
func (s *Server) IsFoldTool(name string) bool { return s.catalog().foldTools[name] }

// CallFoldToolOf answers ex, a call of one of fold's tools (ex.Name), as
// the MCP front does: through the control chain, or the full one for a
// charged tool (branch_recall).
func (s *Server) CallFoldToolOf(ctx context.Context, ex *intercept.Exchange) error {
	h := s.control
	if fold.ChargedTool(ex.Name) {
		h = s.recall
	}
	return h(ctx, ex)
}

// AddServed records tools, the tool objects a transport front served, in
// the registry of served tools (Options.Served), so that the model front
// knows their results were charged on the MCP wire.
func (s *Server) AddServed(tools []json.RawMessage) { s.opts.Served.Add(tools) }
