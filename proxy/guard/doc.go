// Package guard is the one access check of foldproxy's HTTP-facing fronts:
// the MCP front, the model front and the forward proxy of transparent mode
// each decide with it whether a request may be served.
//
// It owns three decisions: the bearer token (Token: required off
// loopback, compared in constant time against its hash, read from the
// header each front uses; FrontToken words its configuration errors alike
// for every front), the DNS-rebinding check (Origins.Refusal: on a
// loopback listener the Host header must name a loopback host, and an
// Origin header must be a loopback origin, the request's own host, or one
// configured), and what counts as a loopback address (IsLoopback,
// LoopbackHost).
//
// guard must never keep or log a token (it keeps only its SHA-256), never
// answer a request itself (each front words its own refusal), and never
// import another foldproxy package: every front depends on it, not the
// other way round. The check that a loopback peer is the user's own
// (cmd/foldproxy's localUsers) stays with the listener that owns the
// sockets.
package guard
