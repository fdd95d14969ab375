package jsonrpc

import (
	"bytes"
	"encoding/json"
)

// The envelopes below are built by appending raw members to fixed bytes:
// results, params, ids and error objects go out exactly as they came,
// with no second encoding that would compact them or escape <, > and &.

// ResponsePrefix starts every response and request built here; a reader
// that sees it finds the id right after it without decoding the message.
const ResponsePrefix = `{"jsonrpc":"2.0","id":`

// Response encodes a result or error response for id: the error when e is
// not nil, else the result. A missing id is null, a missing result {};
// result must be valid JSON.
func Response(id json.RawMessage, result json.RawMessage, e *Error) []byte {
	if len(id) == 0 {
		id = json.RawMessage("null")
	}
	if e != nil {
		b := make([]byte, 0, len(ResponsePrefix)+len(id)+64+len(e.Message)+len(e.Data)+len(e.raw))
		b = append(b, ResponsePrefix...)
		b = append(b, id...)
		b = append(b, `,"error":`...)
		b = e.AppendObject(b)
		return append(b, '}')
	}
	if len(result) == 0 {
		result = json.RawMessage("{}")
	}
	b := make([]byte, 0, len(ResponsePrefix)+len(id)+len(`,"result":}`)+len(result))
	b = append(b, ResponsePrefix...)
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
	b = AppendString(b, method)
	if len(params) > 0 {
		b = append(b, `,"params":`...)
		b = append(b, params...)
	}
	return append(b, '}')
}

// Request encodes a request with id; params, raw, are left out when
// empty.
func Request(id json.RawMessage, method string, params json.RawMessage) []byte {
	b := make([]byte, 0, len(ResponsePrefix)+len(id)+40+len(method)+len(params))
	b = append(b, ResponsePrefix...)
	b = append(b, id...)
	b = append(b, `,"method":`...)
	b = AppendString(b, method)
	if len(params) > 0 {
		b = append(b, `,"params":`...)
		b = append(b, params...)
	}
	return append(b, '}')
}

// AppendString appends s as a JSON string as encoding/json writes it
// without HTML escaping.
func AppendString(b []byte, s string) []byte {
	plain := true
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			plain = false
			break
		}
	}
	if plain { // method names and most messages: nothing to escape
		b = append(b, '"')
		b = append(b, s...)
		return append(b, '"')
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return append(b, bytes.TrimSuffix(buf.Bytes(), []byte("\n"))...)
}
