package upstreams

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/foldproxy/foldproxy/policy/jsonscan"
)

// This file holds what the three transports (stdio.go, http.go, sse.go)
// share. Every message from an upstream is read once into an inMsg whose
// members stay raw, so that results, notification and request params and
// error objects reach the proxy exactly as the upstream wrote them: no
// number is rounded, no key reordered, no string re-escaped. Every message
// to an upstream is built by appending raw members to a fixed envelope.

// wire is one transport to an upstream: a child process's pipes, a
// streamable HTTP session or an SSE stream.
type wire interface {
	// start connects. Messages from the upstream go to the handler the
	// wire was made with from then on.
	start(ctx context.Context) error
	// call sends request body, whose id is id, and returns the upstream's
	// response to it.
	call(ctx context.Context, id int64, method string, body []byte) (*inMsg, error)
	// send writes a notification, or a response to a request of the
	// upstream's.
	send(ctx context.Context, body []byte) error
	// close ends the connection; it ends a stdio child process.
	close() error
}

// wireHandler is what a wire passes the upstream's own messages to: its
// notifications and its requests. ctx is the call a request arrived for
// (on a streamable HTTP call's own response stream), or the wire's life.
type wireHandler func(ctx context.Context, m *inMsg)

var (
	// errTransportClosed fails a request on a wire that has been closed or
	// whose stream has ended.
	errTransportClosed = errors.New("transport closed")
	// errChildShutdownTimeout is what closing a stdio wire returns when the
	// child outlived every signal.
	errChildShutdownTimeout = errors.New("stdio child did not exit after forced shutdown")
	// errLegacySSE is returned for an initialize that a streamable HTTP URL
	// refused with a 4xx: most likely an HTTP+SSE (2024-11-05) server.
	errLegacySSE = errors.New("the server answered initialize with a 4xx status, as a legacy SSE server does")
)

// inMsg is one JSON-RPC message from an upstream, read once: the envelope
// decoded, every member raw (a member absent is nil, one that is null holds
// "null").
type inMsg struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
	Result json.RawMessage `json:"result"`
	Error  json.RawMessage `json:"error"`
}

// parseIn reads one message. The members point into b, which the caller
// must not reuse.
//
// It reads b as json.Unmarshal into an inMsg does, in two quick passes: one
// strict check (jsonscan.Valid, which accepts exactly what encoding/json
// accepts) and one walk of the object's members, whose values are taken as
// they are, not copied. A message with any other member than the five of
// an inMsg and "jsonrpc" (a key in another case, "Method", say, which
// encoding/json matches too), or a method that is not a string, is left to
// json.Unmarshal itself; so is anything that is not an object.
func parseIn(b []byte) (*inMsg, error) {
	if m, ok := parseInFast(b); ok {
		return m, nil
	}
	var m inMsg
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	return &m, nil
}

// parseInFast is parseIn's quick path; ok is false when b is left to
// json.Unmarshal.
func parseInFast(b []byte) (m *inMsg, ok bool) {
	if !jsonscan.Valid(b) {
		return nil, false
	}
	members, err := jsonscan.Object(b)
	if err != nil {
		return nil, false
	}
	m = &inMsg{}
	for _, mem := range members {
		v := mem.Value.Of(b)
		switch mem.Key {
		case "jsonrpc":
		case "id":
			m.ID = v
		case "params":
			m.Params = v
		case "result":
			m.Result = v
		case "error":
			m.Error = v
		case "method":
			switch v[0] {
			case '"':
				if m.Method, err = jsonscan.Unquote(v); err != nil {
					return nil, false
				}
			case 'n':
				// null leaves a string as it was, as in encoding/json.
			default:
				return nil, false
			}
		default:
			return nil, false
		}
	}
	return m, true
}

// hasID reports whether m carries a non-null id.
func (m *inMsg) hasID() bool { return len(m.ID) > 0 && !isNull(m.ID) }

// isResponse reports whether m answers a request.
func (m *inMsg) isResponse() bool { return m.Method == "" && m.hasID() }

// idKey turns a raw JSON-RPC id into a key that compares ids by value: `1`
// and `"1"` stay distinct, "a" and "\u0061" are one.
func idKey(id json.RawMessage) string {
	id = bytes.TrimSpace(id)
	if len(id) > 0 && id[0] == '"' {
		var s string
		if json.Unmarshal(id, &s) == nil {
			return "s" + s
		}
	}
	return "n" + string(id)
}

// requestBody builds a request; params, raw, are left out when empty or
// null.
func requestBody(id int64, method string, params json.RawMessage) []byte {
	b := make([]byte, 0, 64+len(method)+len(params))
	b = append(b, `{"jsonrpc":"2.0","id":`...)
	b = strconv.AppendInt(b, id, 10)
	b = append(b, `,"method":`...)
	b = jsonscan.AppendQuote(b, method)
	if len(params) > 0 && !isNull(params) {
		b = append(b, `,"params":`...)
		b = append(b, params...)
	}
	return append(b, '}')
}

// notificationBody builds a notification; params as in requestBody.
func notificationBody(method string, params json.RawMessage) []byte {
	b := make([]byte, 0, 48+len(method)+len(params))
	b = append(b, `{"jsonrpc":"2.0","method":`...)
	b = jsonscan.AppendQuote(b, method)
	if len(params) > 0 && !isNull(params) {
		b = append(b, `,"params":`...)
		b = append(b, params...)
	}
	return append(b, '}')
}

// resultBody builds the response to the upstream's request id.
func resultBody(id, result json.RawMessage) []byte {
	b := make([]byte, 0, 40+len(id)+len(result))
	b = append(b, `{"jsonrpc":"2.0","id":`...)
	b = append(b, id...)
	b = append(b, `,"result":`...)
	b = append(b, result...)
	return append(b, '}')
}

// errorBody builds an error response to the upstream's request id: the
// error object raw when e carries one, else built from its parts.
func errorBody(id json.RawMessage, e *RPCError) []byte {
	b := make([]byte, 0, 64+len(id)+len(e.Message)+len(e.Data)+len(e.Raw))
	b = append(b, `{"jsonrpc":"2.0","id":`...)
	b = append(b, id...)
	b = append(b, `,"error":`...)
	b = e.appendObject(b)
	return append(b, '}')
}

// appendObject appends the JSON-RPC error object: Raw when set, else built
// from Code, Message and Data.
func (e *RPCError) appendObject(b []byte) []byte {
	if len(e.Raw) > 0 {
		return append(b, e.Raw...)
	}
	b = append(b, `{"code":`...)
	b = strconv.AppendInt(b, int64(e.Code), 10)
	b = append(b, `,"message":`...)
	b = jsonscan.AppendQuote(b, e.Message)
	if len(e.Data) > 0 {
		b = append(b, `,"data":`...)
		b = append(b, e.Data...)
	}
	return append(b, '}')
}

// parseRPCError reads an error object, keeping it raw in Raw and its data
// raw in Data.
func parseRPCError(raw json.RawMessage) (*RPCError, error) {
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
	re := &RPCError{Code: *e.Code, Message: e.Message, Raw: raw}
	if len(e.Data) > 0 {
		re.Data = e.Data
	}
	return re, nil
}

// pending holds the calls of a wire that wait for their responses.
type pending struct {
	mu    sync.Mutex
	calls map[string]chan *inMsg
}

// add registers a call waiting for the response with id; the returned
// func unregisters it.
func (p *pending) add(id int64) (chan *inMsg, func()) {
	key := "n" + strconv.FormatInt(id, 10)
	ch := make(chan *inMsg, 1)
	p.mu.Lock()
	if p.calls == nil {
		p.calls = make(map[string]chan *inMsg)
	}
	p.calls[key] = ch
	p.mu.Unlock()
	return ch, func() {
		p.mu.Lock()
		delete(p.calls, key)
		p.mu.Unlock()
	}
}

// call registers id, sends the request with send and waits for its
// response, ctx's end, or done (the wire closing; a response that arrived
// just before still counts).
func (p *pending) call(ctx context.Context, done <-chan struct{}, id int64, send func() error) (*inMsg, error) {
	return p.callWith(ctx, done, id, send, nil)
}

// callWith is call; once the request is sent, read (when not nil) may
// read the response itself: it returns the response or an error with ok,
// or ok false, and the call then waits as call does.
func (p *pending) callWith(ctx context.Context, done <-chan struct{}, id int64, send func() error, read func(ch chan *inMsg) (*inMsg, error, bool)) (*inMsg, error) {
	select {
	case <-done:
		return nil, errTransportClosed
	default:
	}
	ch, forget := p.add(id)
	defer forget()
	if err := send(); err != nil {
		return nil, err
	}
	if read != nil {
		if m, err, ok := read(ch); ok {
			return m, err
		}
	}
	select {
	case m := <-ch:
		return m, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-done:
		select {
		case m := <-ch:
			return m, nil
		default:
		}
		return nil, errTransportClosed
	}
}

// idle reports whether no call waits for its response.
func (p *pending) idle() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.calls) == 0
}

// deliver passes a response to the call waiting for it and reports
// whether one was.
func (p *pending) deliver(m *inMsg) bool {
	key := idKey(m.ID)
	p.mu.Lock()
	ch := p.calls[key]
	delete(p.calls, key)
	p.mu.Unlock()
	if ch == nil {
		return false
	}
	ch <- m
	return true
}

// oneLine returns body on one line, for the line-framed stdio transport:
// JSON text that holds a line break (params an agent sent pretty-printed
// over HTTP) is compacted; line breaks inside strings are always escaped,
// so no value changes.
func oneLine(body []byte) ([]byte, error) {
	if bytes.IndexByte(body, '\n') < 0 && bytes.IndexByte(body, '\r') < 0 {
		return body, nil
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, body); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
