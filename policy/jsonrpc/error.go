package jsonrpc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// Error is a JSON-RPC error object, and the one Go error type of a
// JSON-RPC error in foldproxy: an upstream's error reaches the agent as
// this type, whether it passed the scrubber untouched or was rewritten by
// it. An error read from a message keeps the object's bytes (Raw), and the
// envelopes write them unchanged; one built here, or changed, is encoded
// from its fields.
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

func (e *Error) Error() string { return fmt.Sprintf("json-rpc error %d: %s", e.Code, e.Message) }

// Errorf builds an *Error with a formatted message.
func Errorf(code int, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// ParseError reads an error object as an upstream sent it: it must have a
// code. The returned error keeps raw (not a copy) as its Raw, and its data
// raw in Data.
func ParseError(raw json.RawMessage) (*Error, error) {
	var e struct {
		Code    *int            `json:"code"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(raw, &e); err != nil {
		return nil, fmt.Errorf("the error object is not valid: %w", err)
	}
	if e.Code == nil {
		return nil, errors.New("the error object has no code")
	}
	re := &Error{Code: *e.Code, Message: e.Message, raw: raw}
	if len(e.Data) > 0 {
		re.Data = e.Data
	}
	return re, nil
}

// AppendObject appends the error object: its bytes as they came, or else
// encoded from its fields without HTML escaping.
func (e *Error) AppendObject(b []byte) []byte {
	if len(e.raw) > 0 {
		return append(b, e.raw...)
	}
	b = append(b, `{"code":`...)
	b = strconv.AppendInt(b, int64(e.Code), 10)
	b = append(b, `,"message":`...)
	b = AppendString(b, e.Message)
	if len(e.Data) > 0 {
		b = append(b, `,"data":`...)
		b = append(b, e.Data...)
	}
	return append(b, '}')
}
