package jsonrpc

import (
	"bytes"
	"encoding/json"
	"errors"
	"unicode/utf8"
)

// Message is one JSON-RPC message as the agent sends it, its envelope
// decoded and checked (see Check), params and result raw. Exactly one of
// the shapes holds: a request (Method and ID), a notification (Method, no
// ID) or a response (ID with Result or Error).
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

// ErrBatchEmpty is the reason an empty batch is refused.
var ErrBatchEmpty = errors.New("empty JSON-RPC batch")

// Decode decodes one message with encoding/json and checks it (Check). A
// caller with a quicker reader for the common shapes calls Check on what
// it read instead, and Decode for the rest. On failure it returns the
// *Error to answer (parse error or invalid request).
func Decode(data []byte) (*Message, *Error) {
	var m Message
	if err := json.Unmarshal(data, &m); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) || !json.Valid(data) {
			return nil, Errorf(CodeParseError, "parse error: %v", err)
		}
		return nil, Errorf(CodeInvalidRequest, "invalid request: %v", err)
	}
	return Check(m, data)
}

// Check validates the envelope of m, decoded from data: "jsonrpc" must be
// "2.0", an id must be a string or a number (valid UTF-8), and m must be a
// request, notification or response whose params are an object or an
// array. Invalid UTF-8 in data outside the id becomes U+FFFD, as
// encoding/json decodes it, so that none of it goes further.
func Check(m Message, data []byte) (*Message, *Error) {
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
	if len(m.ID) > 0 && !IsID(m.ID) {
		if string(m.ID) != "null" || m.Method != "" {
			return nil, Errorf(CodeInvalidRequest, "invalid request: id must be a string or a number, got %s", m.ID)
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

// IsID reports whether the raw id starts as a string or a number does
// (JSON-RPC allows no other kind of id in a request).
func IsID(id json.RawMessage) bool {
	if len(id) == 0 {
		return false
	}
	switch id[0] {
	case '"', '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		return true
	}
	return false
}

// IDKey turns a raw id into a map key that compares ids by value: `1` and
// `"1"` stay distinct, while "&" and "\u0026" (an id re-encoded with HTML
// escaping) are one id.
func IDKey(id json.RawMessage) string {
	id = bytes.TrimSpace(id)
	if len(id) > 0 && id[0] == '"' {
		var s string
		if json.Unmarshal(id, &s) == nil {
			return "s" + s
		}
	}
	return "n" + string(id)
}

// Envelope is one message from a peer that is relayed rather than
// checked (an upstream's), read once: the method decoded, every other
// member raw (a member absent is nil, one that is null holds "null"), the
// error object too, so that it can be relayed byte for byte.
type Envelope struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
	Result json.RawMessage `json:"result"`
	Error  json.RawMessage `json:"error"`
}

// DecodeEnvelope reads one message with encoding/json; the members are
// copies. A caller with a quicker reader uses it for what that reader
// leaves.
func DecodeEnvelope(b []byte) (*Envelope, error) {
	var m Envelope
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	return &m, nil
}

// HasID reports whether m carries a non-null id.
func (m *Envelope) HasID() bool { return len(m.ID) > 0 && !IsNull(m.ID) }

// IsResponse reports whether m answers a request.
func (m *Envelope) IsResponse() bool { return m.Method == "" && m.HasID() }

// IsNull reports whether raw is the JSON null (surrounding space allowed).
func IsNull(raw json.RawMessage) bool { return string(bytes.TrimSpace(raw)) == "null" }
