package proxy

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"

	"github.com/foldproxy/foldproxy/policy/jsonrpc"
	"github.com/foldproxy/foldproxy/policy/jsonscan"
)

// JSON-RPC and MCP error codes, under proxy's names; the numbers are coded
// in one place, policy/jsonrpc.
const (
	CodeParseError          = jsonrpc.CodeParseError
	CodeInvalidRequest      = jsonrpc.CodeInvalidRequest
	CodeMethodNotFound      = jsonrpc.CodeMethodNotFound
	CodeInvalidParams       = jsonrpc.CodeInvalidParams
	CodeInternalError       = jsonrpc.CodeInternalError
	CodeResourceNotFound    = jsonrpc.CodeResourceNotFound
	CodeUpstreamUnavailable = jsonrpc.CodeUpstreamUnavailable
	CodeMessageTooLarge     = jsonrpc.CodeMessageTooLarge
)

// Message is one JSON-RPC message from the agent (policy/jsonrpc's).
type Message = jsonrpc.Message

// Error is a JSON-RPC error object, policy/jsonrpc's one error type: an
// upstream's error, the agent's and foldproxy's own are all this type.
type Error = jsonrpc.Error

// Errorf builds an *Error with a formatted message.
func Errorf(code int, format string, args ...any) *Error {
	return jsonrpc.Errorf(code, format, args...)
}

// ErrBatchEmpty is the reason ParseMessages refuses an empty batch.
var ErrBatchEmpty = jsonrpc.ErrBatchEmpty

// ParseMessages decodes one message or a batch (a JSON array of messages).
// It validates the envelope: "jsonrpc" must be "2.0", an id must be a string
// or a number, and a message must be a request, notification or response.
// On failure it returns the *Error to send back (with a null id).
func ParseMessages(data []byte) (msgs []*Message, batch bool, err *Error) {
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return nil, false, Errorf(CodeParseError, "parse error: empty message")
	}
	if data[0] == '[' {
		var raws []json.RawMessage
		if e := json.Unmarshal(data, &raws); e != nil {
			return nil, true, Errorf(CodeParseError, "parse error: %v", e)
		}
		if len(raws) == 0 {
			return nil, true, Errorf(CodeInvalidRequest, "invalid request: %v", ErrBatchEmpty)
		}
		for _, r := range raws {
			m, e := parseOne(r)
			if e != nil {
				return nil, true, e
			}
			msgs = append(msgs, m)
		}
		return msgs, true, nil
	}
	m, e := parseOne(data)
	if e != nil {
		return nil, false, e
	}
	return []*Message{m}, false, nil
}

// parseOne decodes one message: quickly (parseOneFast) when it has a
// common shape, else with encoding/json; either way the envelope is
// checked by policy/jsonrpc.
func parseOne(data []byte) (*Message, *Error) {
	m, ok := parseOneFast(data)
	if !ok {
		return jsonrpc.Decode(data)
	}
	return jsonrpc.Check(m, data)
}

// parseOneFast decodes data as json.Unmarshal into a Message does, for
// the messages an agent sends most: one valid UTF-8 object whose members
// are among "jsonrpc", "id", "method", "params" and "result", each once,
// with "jsonrpc" and "method" strings. It reads data with policy/jsonscan
// (jsonscan.Valid accepts exactly what encoding/json accepts) and copies
// data once, where json.Unmarshal copies each raw member. ok is false for
// anything else (an error object, a repeated or unknown member, a key in
// another case, which encoding/json would match too, a null), which
// json.Unmarshal then decodes, its errors included.
func parseOneFast(data []byte) (m Message, ok bool) {
	if !utf8.Valid(data) || !jsonscan.Valid(data) {
		return Message{}, false
	}
	members, err := jsonscan.Object(data)
	if err != nil || len(members) > 5 {
		return Message{}, false
	}
	var seen [5]bool
	for _, mem := range members {
		v := mem.Value.Of(data)
		var k int
		switch mem.Key {
		case "jsonrpc":
			k = 0
		case "id":
			k = 1
		case "method":
			k = 2
		case "params":
			k = 3
		case "result":
			k = 4
		default:
			return Message{}, false
		}
		if seen[k] {
			return Message{}, false
		}
		seen[k] = true
		switch k {
		case 0, 2:
			if v[0] != '"' {
				return Message{}, false
			}
			s := "2.0"
			if string(v) != `"2.0"` {
				if s, err = jsonscan.Unquote(v); err != nil {
					return Message{}, false
				}
			}
			if k == 0 {
				m.JSONRPC = s
			} else {
				m.Method = s
			}
		}
	}
	// The raw members point into one copy of data, as json.Unmarshal's
	// copies of them do not alias the caller's buffer.
	data = bytes.Clone(data)
	for _, mem := range members {
		v := json.RawMessage(mem.Value.Of(data))
		switch mem.Key {
		case "id":
			m.ID = v
		case "params":
			m.Params = v
		case "result":
			m.Result = v
		}
	}
	return m, true
}

// The envelopes are policy/jsonrpc's, built by appending raw members to
// fixed bytes: the result, params, ids and error objects go out exactly as
// they came (an upstream's bytes are read and checked once, in upstreams).
// A front makes a message that holds a line break one line (frontCompact).

// envelopePrefix starts every response and request the core writes; a
// front that sees it reads the id without decoding the message
// (frontClassify).
const envelopePrefix = jsonrpc.ResponsePrefix

// Response encodes a result or error response for id. An empty result is
// {}; result must be valid JSON.
func Response(id json.RawMessage, result json.RawMessage, rpcErr *Error) []byte {
	return jsonrpc.Response(id, result, rpcErr)
}

// Notification encodes a notification; params, raw, are left out when
// empty.
func Notification(method string, params json.RawMessage) []byte {
	return jsonrpc.Notification(method, params)
}

// requestMessage encodes a request to the agent.
func requestMessage(id json.RawMessage, method string, params json.RawMessage) []byte {
	return jsonrpc.Request(id, method, params)
}
