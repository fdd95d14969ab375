package upstreams

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"sync"

	"github.com/foldproxy/foldproxy/policy/jsonrpc"
	"github.com/foldproxy/foldproxy/policy/jsonscan"
)

// This file holds what the three transports (stdio.go, http.go, sse.go)
// share. Every message from an upstream is read once into a
// jsonrpc.Envelope whose
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
	call(ctx context.Context, id int64, method string, body []byte) (*envelope, error)
	// send writes a notification, or a response to a request of the
	// upstream's.
	send(ctx context.Context, body []byte) error
	// close ends the connection; it ends a stdio child process.
	close() error
}

// wireHandler is what a wire passes the upstream's own messages to: its
// notifications and its requests. ctx is the call a request arrived for
// (on a streamable HTTP call's own response stream), or the wire's life.
type wireHandler func(ctx context.Context, m *envelope)

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

// envelope is one message from an upstream, read once (jsonrpc.Envelope):
// the method decoded, every other member raw.
type envelope = jsonrpc.Envelope

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
func parseIn(b []byte) (*envelope, error) {
	if m, ok := parseInFast(b); ok {
		return m, nil
	}
	return jsonrpc.DecodeEnvelope(b)
}

// parseInFast is parseIn's quick path; ok is false when b is left to
// json.Unmarshal.
func parseInFast(b []byte) (m *envelope, ok bool) {
	if !jsonscan.Valid(b) {
		return nil, false
	}
	members, err := jsonscan.Object(b)
	if err != nil {
		return nil, false
	}
	m = &envelope{}
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

// The envelopes to an upstream are policy/jsonrpc's; these leave out
// params that are empty or null, as an upstream expects.

// requestBody builds a request.
func requestBody(id int64, method string, params json.RawMessage) []byte {
	return jsonrpc.Request(strconv.AppendInt(nil, id, 10), method, withoutNull(params))
}

// notificationBody builds a notification.
func notificationBody(method string, params json.RawMessage) []byte {
	return jsonrpc.Notification(method, withoutNull(params))
}

// withoutNull is params, or nil when they are null.
func withoutNull(params json.RawMessage) json.RawMessage {
	if len(params) > 0 && isNull(params) {
		return nil
	}
	return params
}

// pending holds the calls of a wire that wait for their responses.
type pending struct {
	mu    sync.Mutex
	calls map[string]chan *envelope
}

// add registers a call waiting for the response with id; the returned
// func unregisters it.
func (p *pending) add(id int64) (chan *envelope, func()) {
	key := "n" + strconv.FormatInt(id, 10)
	ch := make(chan *envelope, 1)
	p.mu.Lock()
	if p.calls == nil {
		p.calls = make(map[string]chan *envelope)
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
func (p *pending) call(ctx context.Context, done <-chan struct{}, id int64, send func() error) (*envelope, error) {
	return p.callWith(ctx, done, id, send, nil)
}

// callWith is call; once the request is sent, read (when not nil) may
// read the response itself: it returns the response or an error with ok,
// or ok false, and the call then waits as call does.
func (p *pending) callWith(ctx context.Context, done <-chan struct{}, id int64, send func() error, read func(ch chan *envelope) (*envelope, error, bool)) (*envelope, error) {
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
func (p *pending) deliver(m *envelope) bool {
	key := jsonrpc.IDKey(m.ID)
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
