package proxy

import "context"

// Outbound delivers messages to the agent: one stdio stream, one HTTP
// response stream (JSON or SSE), or a session's standalone SSE stream.
//
// WriteMessage must be safe for concurrent use. It returns an error when the
// message can no longer be delivered (stream closed); callers then fall back
// to the session's standalone outbound or drop the message.
type Outbound interface {
	WriteMessage(msg []byte) error
}

// Endpoint is the seam between the fronts (stdio.go, http.go) and the core
// (server.go). A front opens a session per downstream connection, hands it
// every message the agent sends, and closes it when the connection ends.
type Endpoint interface {
	// OpenSession starts a session. id is the session id (the HTTP front
	// generates one; stdio passes ""), transport is "stdio" or "http", and
	// standalone is where messages not tied to a request go (stdout; the
	// HTTP GET stream, which may be absent: nil until the agent opens it,
	// see SetStandalone).
	OpenSession(ctx context.Context, id, transport string, standalone Outbound) *Session
	// Deliver processes one message from the agent. A request is answered
	// on out, together with any notifications and requests tied to it;
	// Deliver returns once the response is written. Notifications and
	// responses are processed and Deliver returns at once.
	Deliver(ctx context.Context, s *Session, msg *Message, out Outbound)
	// CloseSession ends a session: in-flight requests are cancelled and its
	// active branches force-returned within the configured grace.
	CloseSession(s *Session)
}
