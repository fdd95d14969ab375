package upstreams

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// sseWire is a client of MCP's HTTP+SSE transport (protocol
// 2024-11-05): a GET opens an event stream whose first "endpoint" event
// names the URL to POST messages to; responses, notifications and the
// server's own requests arrive on the stream.
//
// Each event's data is read once and relayed raw (see wire.go).
type sseWire struct {
	base            *url.URL
	headers         map[string]string
	client          *http.Client
	log             *slog.Logger
	endpointTimeout time.Duration

	handle  wireHandler
	onLost  func(error)
	tracked func(func()) bool // runs a goroutine that the upstream's Close waits for
	calls   pending

	mu       sync.Mutex
	endpoint *url.URL
	ctx      context.Context // the stream's life; cancelled by close
	cancel   context.CancelFunc
	closed   bool

	done     chan struct{} // closed when the stream has ended
	doneOnce sync.Once
	doneErr  error
}

var _ wire = (*sseWire)(nil)

// maxSSEEvent bounds one event's data; a larger one ends the stream.
const maxSSEEvent = 256 << 20

func newSSEWire(rawURL string, headers map[string]string, endpointTimeout time.Duration, handle wireHandler, lost func(error), log *slog.Logger, tracked func(func()) bool) (*sseWire, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, err
	}
	if endpointTimeout <= 0 {
		endpointTimeout = 30 * time.Second
	}
	return &sseWire{
		base: u, headers: headers, client: &http.Client{}, log: log,
		endpointTimeout: endpointTimeout,
		handle:          handle, onLost: lost, tracked: tracked,
		done: make(chan struct{}),
	}, nil
}

// start opens the event stream and waits for the endpoint event.
func (t *sseWire) start(ctx context.Context) error {
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
	if !t.tracked(func() { t.read(resp.Body, gotEndpoint) }) {
		resp.Body.Close()
		cancel()
		return errClosing
	}
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
func (t *sseWire) read(body io.ReadCloser, gotEndpoint chan struct{}) {
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

func (t *sseWire) dispatch(event string, data []byte, gotEndpoint chan struct{}, once *sync.Once) {
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

func (t *sseWire) handleMessage(data []byte) {
	m, err := parseIn(bytes.Clone(data))
	if err != nil {
		t.log.Warn("ignoring a malformed message on the event stream", "err", err)
		return
	}
	switch {
	case m.IsResponse():
		t.calls.deliver(m)
	case m.Method != "":
		t.mu.Lock()
		ctx := t.ctx
		t.mu.Unlock()
		t.handle(ctx, m)
	}
}

// post sends one message to the endpoint.
func (t *sseWire) post(ctx context.Context, body []byte) error {
	t.mu.Lock()
	ep := t.endpoint
	t.mu.Unlock()
	if ep == nil {
		return errors.New("the SSE transport is not started")
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

// call posts a request and waits for its response on the stream.
func (t *sseWire) call(ctx context.Context, id int64, _ string, body []byte) (*envelope, error) {
	return t.calls.call(ctx, t.done, id, func() error { return t.post(ctx, body) })
}

// send posts a notification or a response.
func (t *sseWire) send(ctx context.Context, body []byte) error {
	return t.post(ctx, body)
}

// finish ends the stream once, failing pending requests.
func (t *sseWire) finish(err error) {
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

// close ends the stream.
func (t *sseWire) close() error {
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
	t.finish(errTransportClosed)
	return nil
}
