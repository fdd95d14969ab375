package proxy

import (
	"context"
	"encoding/json"

	"github.com/foldproxy/foldproxy/intercept"
)

// The core's side of the remote MCP front of transparent mode
// (transparent.RemoteFront): the fold tools' calls and the JSON-RPC codec
// as the MCP front has them, so that both fronts answer alike.

// CallFoldTool answers ex, a call of one of fold's tools, as the MCP
// front does.
func CallFoldTool(ctx context.Context, fold Folder, ex *intercept.Exchange) error {
	return callFoldTool(ctx, fold, ex)
}

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

// NewID returns a new random id with prefix, as the core makes its
// session ids.
func NewID(prefix string) string { return newID(prefix) }
