package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
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

// Message is one raw JSON-RPC message. Exactly one of the shapes holds:
// a request (Method and ID), a notification (Method, no ID) or a response
// (ID with Result or Error).
type Message struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method,omitempty"`
	Params  json.RawMessage `json:"params,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   *Error          `json:"error,omitempty"`
}

// IsRequest reports whether m is a request.
func (m *Message) IsRequest() bool { return m.Method != "" && len(m.ID) > 0 }

// IsNotification reports whether m is a notification.
func (m *Message) IsNotification() bool { return m.Method != "" && len(m.ID) == 0 }

// IsResponse reports whether m is a response.
func (m *Message) IsResponse() bool { return m.Method == "" && len(m.ID) > 0 }

// Error is a JSON-RPC error object. It implements error. An error decoded
// from a message (or relayed from an upstream, see rpcErrorOf) keeps the
// object's bytes, and Response writes them unchanged; one built here is
// encoded from its fields.
type Error struct {
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`

	raw json.RawMessage // the object as it came; nil when built here
}

// UnmarshalJSON decodes the object and keeps its bytes.
func (e *Error) UnmarshalJSON(b []byte) error {
	type plain Error
	var p plain
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*e = Error(p)
	e.raw = bytes.Clone(b)
	return nil
}

// Raw returns the error object exactly as it came, or nil when it was
// built here.
func (e *Error) Raw() json.RawMessage { return e.raw }

// appendObject appends the error object: its bytes as they came, or else
// encoded from its fields without HTML escaping.
func (e *Error) appendObject(b []byte) []byte {
	if len(e.raw) > 0 {
		return append(b, e.raw...)
	}
	b = append(b, `{"code":`...)
	b = strconv.AppendInt(b, int64(e.Code), 10)
	b = append(b, `,"message":`...)
	b = appendJSONString(b, e.Message)
	if len(e.Data) > 0 {
		b = append(b, `,"data":`...)
		b = append(b, e.Data...)
	}
	return append(b, '}')
}

func (e *Error) Error() string { return fmt.Sprintf("json-rpc error %d: %s", e.Code, e.Message) }

// Errorf builds an *Error with a formatted message.
func Errorf(code int, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// ErrBatchEmpty is returned by ParseMessages for an empty batch.
var ErrBatchEmpty = errors.New("empty JSON-RPC batch")

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

func parseOne(data []byte) (*Message, *Error) {
	m, ok := parseOneFast(data)
	if !ok {
		if err := json.Unmarshal(data, &m); err != nil {
			var se *json.SyntaxError
			if errors.As(err, &se) || !json.Valid(data) {
				return nil, Errorf(CodeParseError, "parse error: %v", err)
			}
			return nil, Errorf(CodeInvalidRequest, "invalid request: %v", err)
		}
	}
	if m.JSONRPC != "2.0" {
		return nil, Errorf(CodeInvalidRequest, `invalid request: "jsonrpc" must be "2.0", got %q`, m.JSONRPC)
	}
	if len(m.ID) > 0 && !utf8.Valid(m.ID) {
		// Echoing it would make the answer invalid JSON (RFC 8259 wants UTF-8).
		return nil, Errorf(CodeInvalidRequest, "invalid request: the id is not valid UTF-8")
	}
	if !utf8.Valid(data) {
		// Invalid UTF-8 elsewhere (JSON syntax is ASCII, so only inside
		// strings) becomes U+FFFD, as encoding/json decodes it: nothing of
		// it reaches an upstream, the agent's stdout or another message
		// (a progress token echoed into every notification, say).
		clean := bytes.ToValidUTF8(data, []byte("\uFFFD"))
		var c Message
		if err := json.Unmarshal(clean, &c); err != nil {
			return nil, Errorf(CodeInvalidRequest, "invalid request: %v", err)
		}
		c.ID = m.ID
		m = c
	}
	if len(m.ID) > 0 {
		switch m.ID[0] {
		case '"', '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		default:
			if string(m.ID) != "null" || m.Method != "" {
				return nil, Errorf(CodeInvalidRequest, "invalid request: id must be a string or a number, got %s", m.ID)
			}
		}
	}
	if m.Method == "" && len(m.ID) == 0 {
		return nil, Errorf(CodeInvalidRequest, "invalid request: a message needs a method or an id")
	}
	if m.Method == "" && m.Result == nil && m.Error == nil {
		return nil, Errorf(CodeInvalidRequest, "invalid request: a response needs a result or an error")
	}
	if len(m.Params) > 0 && m.Params[0] != '{' && m.Params[0] != '[' && string(m.Params) != "null" {
		return nil, Errorf(CodeInvalidRequest, "invalid request: params must be an object or an array")
	}
	return &m, nil
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

// The envelopes below are built by appending raw members to fixed bytes:
// the result, params, ids and error objects go out exactly as they came
// (an upstream's bytes are read and checked once, in upstreams), with no
// second encoding that would compact them or escape <, > and &. A front
// makes a message that holds a line break one line (frontCompact).

// envelopePrefix starts every response and request the core writes; a
// front that sees it reads the id without decoding the message
// (frontClassify).
const envelopePrefix = `{"jsonrpc":"2.0","id":`

// Response encodes a result or error response for id. An empty result is
// {}; result must be valid JSON.
func Response(id json.RawMessage, result json.RawMessage, rpcErr *Error) []byte {
	if len(id) == 0 {
		id = json.RawMessage("null")
	}
	if rpcErr != nil {
		b := make([]byte, 0, len(envelopePrefix)+len(id)+64+len(rpcErr.Message)+len(rpcErr.Data)+len(rpcErr.raw))
		b = append(b, envelopePrefix...)
		b = append(b, id...)
		b = append(b, `,"error":`...)
		b = rpcErr.appendObject(b)
		return append(b, '}')
	}
	if len(result) == 0 {
		result = json.RawMessage("{}")
	}
	b := make([]byte, 0, len(envelopePrefix)+len(id)+len(`,"result":}`)+len(result))
	b = append(b, envelopePrefix...)
	b = append(b, id...)
	b = append(b, `,"result":`...)
	b = append(b, result...)
	return append(b, '}')
}

// Notification encodes a notification; params, raw, are left out when
// empty.
func Notification(method string, params json.RawMessage) []byte {
	b := make([]byte, 0, 40+len(method)+len(params))
	b = append(b, `{"jsonrpc":"2.0","method":`...)
	b = appendJSONString(b, method)
	if len(params) > 0 {
		b = append(b, `,"params":`...)
		b = append(b, params...)
	}
	return append(b, '}')
}

// requestMessage encodes a request to the agent.
func requestMessage(id json.RawMessage, method string, params json.RawMessage) []byte {
	b := make([]byte, 0, len(envelopePrefix)+len(id)+40+len(method)+len(params))
	b = append(b, envelopePrefix...)
	b = append(b, id...)
	b = append(b, `,"method":`...)
	b = appendJSONString(b, method)
	if len(params) > 0 {
		b = append(b, `,"params":`...)
		b = append(b, params...)
	}
	return append(b, '}')
}

// appendJSONString appends s as a JSON string without HTML escaping.
func appendJSONString(b []byte, s string) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return append(b, bytes.TrimSuffix(buf.Bytes(), []byte("\n"))...)
}
