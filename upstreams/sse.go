package upstreams

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
)

// sseTransport is a client of MCP's HTTP+SSE transport (protocol
// 2024-11-05): a GET opens an event stream whose first "endpoint" event
// names the URL to POST messages to; responses, notifications and the
// server's own requests arrive on the stream.
//
// foldproxy has its own because mcp-go's SSE client drops requests from the
// server: sampling, elicitation and roots would never reach the agent.
type sseTransport struct {
	base            *url.URL
	headers         map[string]string
	client          *http.Client
	log             *slog.Logger
	endpointTimeout time.Duration

	mu        sync.Mutex
	endpoint  *url.URL
	responses map[string]chan *transport.JSONRPCResponse
	onNotify  func(mcp.JSONRPCNotification)
	onRequest transport.RequestHandler
	onLost    func(error)
	ctx       context.Context // the stream's life; cancelled by Close
	cancel    context.CancelFunc
	closed    bool

	done     chan struct{} // closed when the stream has ended
	doneOnce sync.Once
	doneErr  error
}

var _ transport.BidirectionalInterface = (*sseTransport)(nil)

// maxSSEEvent bounds one event's data; a larger one ends the stream.
const maxSSEEvent = 256 << 20

func newSSETransport(rawURL string, headers map[string]string, endpointTimeout time.Duration, log *slog.Logger) (*sseTransport, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, err
	}
	if endpointTimeout <= 0 {
		endpointTimeout = 30 * time.Second
	}
	return &sseTransport{
		base: u, headers: headers, client: &http.Client{}, log: log,
		endpointTimeout: endpointTimeout,
		responses:       make(map[string]chan *transport.JSONRPCResponse),
		done:            make(chan struct{}),
	}, nil
}

// Start opens the event stream and waits for the endpoint event.
func (t *sseTransport) Start(ctx context.Context) error {
	sctx, cancel := context.WithCancel(ctx)
	t.mu.Lock()
	t.ctx, t.cancel = sctx, cancel
	t.mu.Unlock()
	req, err := http.NewRequestWithContext(sctx, http.MethodGet, t.base.String(), nil)
	if err != nil {
		cancel()
		return err
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Cache-Control", "no-cache")
	for k, v := range t.headers {
		req.Header.Set(k, v)
	}
	resp, err := t.client.Do(req)
	if err != nil {
		cancel()
		return err
	}
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		resp.Body.Close()
		cancel()
		return fmt.Errorf("opening the event stream: %s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	gotEndpoint := make(chan struct{})
	go t.read(resp.Body, gotEndpoint)
	timer := time.NewTimer(t.endpointTimeout)
	defer timer.Stop()
	select {
	case <-gotEndpoint:
		return nil
	case <-t.done:
		return fmt.Errorf("the event stream ended before its endpoint event: %w", t.doneErr)
	case <-timer.C:
		t.finish(errors.New("no endpoint event"))
		return fmt.Errorf("no endpoint event within %s", t.endpointTimeout)
	case <-ctx.Done():
		t.finish(ctx.Err())
		return ctx.Err()
	}
}

// read parses the event stream until it ends.
func (t *sseTransport) read(body io.ReadCloser, gotEndpoint chan struct{}) {
	defer body.Close()
	r := bufio.NewReaderSize(body, 64<<10)
	var event string
	var data bytes.Buffer
	var once sync.Once
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = errors.New("the server closed the event stream")
			}
			t.finish(err)
			return
		}
		line = strings.TrimRight(line, "\r\n")
		switch {
		case line == "":
			if data.Len() > 0 || event != "" {
				t.dispatch(event, bytes.TrimSuffix(data.Bytes(), []byte("\n")), gotEndpoint, &once)
			}
			event = ""
			data.Reset()
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "event:"):
			event = strings.TrimSpace(strings.TrimPrefix(line, "event:"))
		case strings.HasPrefix(line, "data:"):
			v := strings.TrimPrefix(line, "data:")
			v = strings.TrimPrefix(v, " ")
			if data.Len()+len(v) > maxSSEEvent {
				t.finish(fmt.Errorf("an event is larger than %d bytes", maxSSEEvent))
				return
			}
			data.WriteString(v)
			data.WriteByte('\n')
		}
	}
}

func (t *sseTransport) dispatch(event string, data []byte, gotEndpoint chan struct{}, once *sync.Once) {
	switch event {
	case "endpoint":
		ep, err := t.base.Parse(string(data))
		if err != nil || ep.Host != t.base.Host || ep.Scheme != t.base.Scheme {
			t.log.Warn("ignoring an SSE endpoint event that is not on the server's own origin", "endpoint", string(data))
			return
		}
		t.mu.Lock()
		t.endpoint = ep
		t.mu.Unlock()
		once.Do(func() { close(gotEndpoint) })
	case "", "message":
		t.handleMessage(data)
	}
}

func (t *sseTransport) handleMessage(data []byte) {
	var env struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params json.RawMessage `json:"params"`
	}
	if err := json.Unmarshal(data, &env); err != nil {
		t.log.Warn("ignoring a malformed message on the event stream", "err", err)
		return
	}
	hasID := len(env.ID) > 0 && string(env.ID) != "null"
	switch {
	case env.Method != "" && hasID:
		var id mcp.RequestId
		if err := json.Unmarshal(env.ID, &id); err != nil {
			return
		}
		req := transport.JSONRPCRequest{JSONRPC: mcp.JSONRPC_VERSION, ID: id, Method: env.Method}
		if len(env.Params) > 0 {
			req.Params = env.Params
		}
		go t.answer(req)
	case env.Method != "":
		var n mcp.JSONRPCNotification
		if err := json.Unmarshal(data, &n); err != nil {
			return
		}
		t.mu.Lock()
		h := t.onNotify
		t.mu.Unlock()
		if h != nil {
			h(n)
		}
	case hasID:
		var resp transport.JSONRPCResponse
		if err := json.Unmarshal(data, &resp); err != nil {
			return
		}
		key := resp.ID.String()
		t.mu.Lock()
		ch := t.responses[key]
		delete(t.responses, key)
		t.mu.Unlock()
		if ch != nil {
			ch <- &resp
		}
	}
}

// answer runs the request handler for a request from the server and posts
// the response back.
func (t *sseTransport) answer(req transport.JSONRPCRequest) {
	t.mu.Lock()
	h, ctx := t.onRequest, t.ctx
	t.mu.Unlock()
	var resp *transport.JSONRPCResponse
	if h == nil {
		resp = transport.NewJSONRPCErrorResponse(req.ID, mcp.METHOD_NOT_FOUND, "method not found: "+req.Method, nil)
	} else {
		var err error
		resp, err = h(ctx, req)
		if err != nil {
			resp = transport.NewJSONRPCErrorResponse(req.ID, mcp.INTERNAL_ERROR, err.Error(), nil)
		}
	}
	if resp == nil {
		return
	}
	if err := t.post(ctx, resp); err != nil {
		t.log.Debug("posting a response to the server", "method", req.Method, "err", err)
	}
}

// post sends one message to the endpoint.
func (t *sseTransport) post(ctx context.Context, msg any) error {
	t.mu.Lock()
	ep := t.endpoint
	t.mu.Unlock()
	if ep == nil {
		return errors.New("the SSE transport is not started")
	}
	body, err := json.Marshal(msg)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ep.String(), bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range t.headers {
		req.Header.Set(k, v)
	}
	resp, err := t.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("the server answered %s: %s", resp.Status, strings.TrimSpace(string(b)))
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return nil
}

// SendRequest posts a request and waits for its response on the stream.
func (t *sseTransport) SendRequest(ctx context.Context, req transport.JSONRPCRequest) (*transport.JSONRPCResponse, error) {
	select {
	case <-t.done:
		return nil, transport.ErrTransportClosed
	default:
	}
	key := req.ID.String()
	ch := make(chan *transport.JSONRPCResponse, 1)
	t.mu.Lock()
	t.responses[key] = ch
	t.mu.Unlock()
	defer func() {
		t.mu.Lock()
		delete(t.responses, key)
		t.mu.Unlock()
	}()
	if err := t.post(ctx, req); err != nil {
		return nil, err
	}
	select {
	case resp := <-ch:
		return resp, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-t.done:
		return nil, transport.ErrTransportClosed
	}
}

// SendNotification posts a notification.
func (t *sseTransport) SendNotification(ctx context.Context, n mcp.JSONRPCNotification) error {
	return t.post(ctx, n)
}

// SetNotificationHandler sets the handler of notifications from the server.
func (t *sseTransport) SetNotificationHandler(h func(mcp.JSONRPCNotification)) {
	t.mu.Lock()
	t.onNotify = h
	t.mu.Unlock()
}

// SetRequestHandler sets the handler of requests from the server.
func (t *sseTransport) SetRequestHandler(h transport.RequestHandler) {
	t.mu.Lock()
	t.onRequest = h
	t.mu.Unlock()
}

// SetConnectionLostHandler sets what is called when the stream ends
// without Close.
func (t *sseTransport) SetConnectionLostHandler(h func(error)) {
	t.mu.Lock()
	t.onLost = h
	t.mu.Unlock()
}

// finish ends the stream once, failing pending requests.
func (t *sseTransport) finish(err error) {
	t.doneOnce.Do(func() {
		t.mu.Lock()
		t.doneErr = err
		closed := t.closed
		lost := t.onLost
		cancel := t.cancel
		t.mu.Unlock()
		if cancel != nil {
			cancel()
		}
		close(t.done)
		if !closed && lost != nil {
			lost(err)
		}
	})
}

// Close ends the stream.
func (t *sseTransport) Close() error {
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
	t.finish(transport.ErrTransportClosed)
	return nil
}

// GetSessionId returns "": the SSE transport has no session header.
func (t *sseTransport) GetSessionId() string { return "" }
