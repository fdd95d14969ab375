// Package upstreams owns foldproxy's side of the upstream MCP servers: the
// mcpServers configuration entries (ParseServers, in the format of Claude
// Code's .mcp.json), one supervised client per server over stdio, streamable
// HTTP or SSE (Upstream), and the set of them (Set).
//
// An Upstream does the initialize handshake itself and speaks JSON-RPC over
// its own transports (stdio.go, http.go, sse.go), which read each message
// once and keep its members raw: results, notification and request params
// and error objects reach the proxy byte for byte (integers beyond 2^53,
// key order, escapes and whitespace included), and the answers to the
// server's requests go back the same way. The envelopes, the id key and
// the error type (*jsonrpc.Error, which a JSON-RPC error from a server is
// returned as) are policy/jsonrpc's, the one codec both sides share. It keeps each server's catalogue (tools, resources, resource
// templates, prompts) fresh across list_changed notifications, relays the
// server's notifications and requests to the caller's callbacks, restarts a
// crashed stdio server on the next call, retries a server that fails to start
// with capped exponential backoff, and starts a new HTTP session when the
// server has forgotten the old one.
//
// upstreams must never write to stdout (in stdio mode it carries the agent's
// JSON-RPC): logs, a child's stderr included, go to the slog.Logger passed
// in. It never interprets or rewrites results, never hangs a call on a server
// that is down (such calls fail with ErrUnavailable within a bounded time),
// and leaves no goroutine or child process behind once closed. The
// credentials of an entry (Entry.Credentials) never leave it: they are
// redacted from every error an Upstream returns and every line it logs.
// It imports nothing else of foldproxy's but the leaves under policy/
// (jsonrpc, jsonscan, rawio, redact).
package upstreams
