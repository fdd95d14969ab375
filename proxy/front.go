package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"unicode/utf8"

	"github.com/foldproxy/foldproxy/policy/jsonrpc"
)

// This file holds what the two downstream fronts (stdio.go, http.go) share:
// decoding what the agent sent, element by element, and keeping track of the
// responses owed for the requests handed to the core.

// DefaultMaxMessageBytes bounds one message from the agent when the front's
// options leave MaxMessageBytes at 0. It matches policy's default.
const DefaultMaxMessageBytes = 16 << 20

// ErrOutboundClosed is returned by a front's Outbound when the stream it
// writes to has ended: the HTTP response is finished or the agent went away,
// or the stdio session is over. The core then falls back to the session's
// standalone outbound or drops the message.
var ErrOutboundClosed = errors.New("outbound stream closed")

// frontItem is one element of what the agent sent: a parsed message, or the
// encoded error response owed for an element that could not be parsed.
type frontItem struct {
	msg  *Message
	fail []byte
}

// frontDecode decodes one message or a batch. Unlike ParseMessages it judges
// a batch element by element, as JSON-RPC 2.0 asks: a malformed element gets
// its own error response (with its id when that can be recovered) and does
// not spoil the others. batch reports whether the answer must be an array;
// a batch that is not even valid JSON, or is empty, is answered with a single
// error, so batch is false then.
func frontDecode(data []byte) (items []frontItem, batch bool) {
	data = bytes.TrimSpace(data)
	if len(data) == 0 || data[0] != '[' {
		msgs, _, rpcErr := ParseMessages(data)
		if rpcErr != nil {
			return []frontItem{{fail: Response(frontRecoverID(data), nil, rpcErr)}}, false
		}
		return []frontItem{{msg: msgs[0]}}, false
	}
	var raws []json.RawMessage
	if err := json.Unmarshal(data, &raws); err != nil {
		return []frontItem{{fail: Response(nil, nil, Errorf(CodeParseError, "parse error: %v", err))}}, false
	}
	if len(raws) == 0 {
		return []frontItem{{fail: Response(nil, nil, Errorf(CodeInvalidRequest, "invalid request: %v", ErrBatchEmpty))}}, false
	}
	items = make([]frontItem, 0, len(raws))
	for _, raw := range raws {
		raw = bytes.TrimSpace(raw)
		if len(raw) > 0 && raw[0] == '[' {
			items = append(items, frontItem{fail: Response(nil, nil, Errorf(CodeInvalidRequest, "invalid request: a batch element must be an object, not a nested batch"))})
			continue
		}
		msgs, _, rpcErr := ParseMessages(raw)
		if rpcErr != nil {
			items = append(items, frontItem{fail: Response(frontRecoverID(raw), nil, rpcErr)})
			continue
		}
		items = append(items, frontItem{msg: msgs[0]})
	}
	return items, true
}

// frontRecoverID returns the id of a message that failed validation, when it
// is valid JSON whose "id" is a string or a number; nil otherwise, so that
// the error response carries a null id.
func frontRecoverID(data []byte) json.RawMessage {
	var v struct {
		ID json.RawMessage `json:"id"`
	}
	if json.Unmarshal(data, &v) != nil || !jsonrpc.IsID(v.ID) || !utf8.Valid(v.ID) {
		return nil // an id that is not UTF-8 cannot be echoed in valid JSON
	}
	return v.ID
}

// frontEnvelope is the part of an outgoing message a front needs to route it.
// Result and params are left out so that a large result is scanned, not copied.
type frontEnvelope struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Error  json.RawMessage `json:"error"`
}

// frontClassify reports the id key of an encoded outgoing message, whether it
// is a response (an id and no method) and whether that response is an error.
// A message that does not decode is neither.
func frontClassify(msg []byte) (key string, isResponse, isError bool) {
	if key, isResponse, isError, ok := frontClassifyOurs(msg); ok {
		return key, isResponse, isError
	}
	var env frontEnvelope
	if json.Unmarshal(msg, &env) != nil {
		return "", false, false
	}
	if env.Method != "" || len(env.ID) == 0 || string(env.ID) == "null" {
		return "", false, false
	}
	return frontIDKey(env.ID), true, len(env.Error) > 0 && string(env.Error) != "null"
}

// frontClassifyOurs classifies a message the core built (Response,
// requestMessage) from its first bytes, without reading the rest: the
// envelope prefix, the id, then the member that follows it. ok is false for
// any other shape, which frontClassify decodes.
func frontClassifyOurs(msg []byte) (key string, isResponse, isError, ok bool) {
	if !bytes.HasPrefix(msg, []byte(envelopePrefix)) {
		return "", false, false, false
	}
	rest := msg[len(envelopePrefix):]
	n := jsonIDLen(rest)
	if n == 0 {
		return "", false, false, false
	}
	id, after := rest[:n], rest[n:]
	switch {
	case bytes.HasPrefix(after, []byte(`,"result":`)):
		isError = false
	case bytes.HasPrefix(after, []byte(`,"error":`)):
		isError = true
	case bytes.HasPrefix(after, []byte(`,"method":`)):
		return "", false, false, true // a request to the agent
	default:
		return "", false, false, false
	}
	if string(id) == "null" {
		return "", false, false, true
	}
	return frontIDKey(id), true, isError, true
}

// jsonIDLen returns the length of the id at the start of b: a string
// (escapes skipped), a number or null; 0 when b starts with none of them.
func jsonIDLen(b []byte) int {
	if len(b) == 0 {
		return 0
	}
	switch c := b[0]; {
	case c == '"':
		for i := 1; i < len(b); i++ {
			switch b[i] {
			case '\\':
				i++
			case '"':
				return i + 1
			}
		}
		return 0
	case c == '-' || (c >= '0' && c <= '9'):
		i := 1
		for i < len(b) && (b[i] == '-' || b[i] == '+' || b[i] == '.' || b[i] == 'e' || b[i] == 'E' || (b[i] >= '0' && b[i] <= '9')) {
			i++
		}
		return i
	case bytes.HasPrefix(b, []byte("null")):
		return 4
	}
	return 0
}

// frontIDKey is policy/jsonrpc's id key: ids compared by value, so that
// `1` and `"1"` stay distinct while "&" and "\u0026" (json.Marshal escapes
// HTML characters when the core re-encodes an id) are one id.
func frontIDKey(id json.RawMessage) string { return jsonrpc.IDKey(id) }

// frontCompact returns msg as one line: JSON text that holds a line break
// (an upstream's pretty-printed result passed through byte for byte) is
// compacted, since a line break would end the message early both on stdio
// and in an SSE data field. Line breaks inside JSON strings are always
// escaped, so compacting changes no value.
func frontCompact(msg []byte) ([]byte, error) {
	msg = bytes.TrimSpace(msg)
	if !utf8.Valid(msg) {
		// Never write a line that is not UTF-8 (RFC 8259), whatever put
		// it there: invalid bytes can only sit inside strings and become
		// U+FFFD.
		msg = bytes.ToValidUTF8(msg, []byte("\uFFFD"))
	}
	if len(msg) == 0 {
		return nil, errors.New("empty JSON-RPC message")
	}
	if bytes.IndexByte(msg, '\n') < 0 && bytes.IndexByte(msg, '\r') < 0 {
		return msg, nil // two vectorized scans; ContainsAny goes byte by byte
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, msg); err != nil {
		return nil, fmt.Errorf("JSON-RPC message is not valid JSON: %w", err)
	}
	return buf.Bytes(), nil
}

// frontAwait tracks the responses owed for a set of requests. It is not safe
// for concurrent use; its owner locks.
type frontAwait struct {
	owed map[string][]json.RawMessage // id key → ids still owed; a batch may repeat an id
	left int
}

func newFrontAwait() *frontAwait {
	return &frontAwait{owed: make(map[string][]json.RawMessage)}
}

// add records that a response is owed for id.
func (a *frontAwait) add(id json.RawMessage) {
	k := frontIDKey(id)
	a.owed[k] = append(a.owed[k], id)
	a.left++
}

// pay marks one response owed under key as written. It reports false when
// no response was owed under key, so the message is not one of ours.
func (a *frontAwait) pay(key string) bool {
	ids := a.owed[key]
	if len(ids) == 0 {
		return false
	}
	if len(ids) == 1 {
		delete(a.owed, key)
	} else {
		a.owed[key] = ids[1:]
	}
	a.left--
	return true
}

// missing returns the ids still owed and forgets them.
func (a *frontAwait) missing() []json.RawMessage {
	var out []json.RawMessage
	for k, ids := range a.owed {
		out = append(out, ids...)
		delete(a.owed, k)
	}
	a.left = 0
	return out
}

// frontNoResponse is the error a front answers with when the core returned
// from Deliver without writing the response it owed (or panicked).
func frontNoResponse(id json.RawMessage) []byte {
	return Response(id, nil, Errorf(CodeInternalError, "internal error: the request ended without a response"))
}

// frontDeliver hands msg to the core, recovering a panic so that one bad
// message cannot take the connection down. It reports whether Deliver
// panicked; the caller then answers an owed request itself.
func frontDeliver(ctx context.Context, log *slog.Logger, ep Endpoint, s *Session, msg *Message, out Outbound) (panicked bool) {
	defer func() {
		if v := recover(); v != nil {
			panicked = true
			log.Error("panic while delivering a message to the core",
				"session", s.ID(), "method", msg.Method, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
		}
	}()
	ep.Deliver(ctx, s, msg, out)
	return false
}

// frontLogger returns l, or a logger that discards everything when l is nil.
func frontLogger(l *slog.Logger) *slog.Logger {
	if l != nil {
		return l
	}
	return slog.New(slog.DiscardHandler)
}

// frontOutboundFunc adapts a function to Outbound.
type frontOutboundFunc func(msg []byte) error

func (f frontOutboundFunc) WriteMessage(msg []byte) error { return f(msg) }
