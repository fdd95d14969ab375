// The JSON-RPC 2.0 and MCP error codes foldproxy sends, coded in one place:
// every package that answers a JSON-RPC error uses these constants rather
// than its own copy of the numbers.

package jsonrpc

// The codes JSON-RPC 2.0 defines.
const (
	CodeParseError     = -32700
	CodeInvalidRequest = -32600
	CodeMethodNotFound = -32601
	CodeInvalidParams  = -32602
	CodeInternalError  = -32603
)

// MCP's codes and foldproxy's own (implementation-defined server error
// range, -32000 to -32099).
const (
	// CodeSessionNotFound goes with an HTTP 404 for an unknown session, as
	// the MCP SDKs send it.
	CodeSessionNotFound = -32001
	// CodeResourceNotFound is MCP's code for an unknown resource URI.
	CodeResourceNotFound = -32002
	// CodeUpstreamUnavailable is foldproxy's code for an upstream that is
	// down or restarting.
	CodeUpstreamUnavailable = -32010
	// CodeMessageTooLarge refuses a message above the size bound.
	CodeMessageTooLarge = -32011
)
