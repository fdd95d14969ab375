package upstreams

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

const (
	headerSessionID       = "Mcp-Session-Id"
	headerProtocolVersion = "Mcp-Protocol-Version"
	// listenRetry is the wait before the standalone event stream is opened
	// again after it failed or ended.
	listenRetry = time.Second
	// deleteTimeout bounds the DELETE that ends a session on close.
	deleteTimeout = 5 * time.Second
	// maxHTTPMessage bounds one message (a JSON body or an event's data).
	maxHTTPMessage = 256 << 20
)

// httpWire is a client of MCP's streamable HTTP transport: each request is
// POSTed and answered with a JSON body or an event stream (which may carry
// the server's notifications and requests for that call before the
// response); a standalone GET event stream carries the rest. The session
// id the server gives at initialize goes on every later request; a 404 for
// it means the server has forgotten the session (errSessionLost), and the
// conn initializes a new one in place. Every message is read once and
// relayed raw (see wire.go).
type httpWire struct {
	url     string
	headers map[string]string
	client  *http.Client
	log     *slog.Logger
	handle  wireHandler
	lost    func(error)
	tracked func(func()) bool

	ctx    context.Context // the wire's life; cancelled by close
	cancel context.CancelFunc

	mu        sync.Mutex
	session   string
	version   string
	sessionUp chan struct{} // closed and replaced when a session starts
	listening bool
	closed    bool
}

var _ wire = (*httpWire)(nil)

func newHTTPWire(rawURL string, headers map[string]string, handle wireHandler, lost func(error), log *slog.Logger, tracked func(func()) bool) (*httpWire, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, err
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("the scheme must be http or https, not %q", u.Scheme)
	}
	return &httpWire{
		url: rawURL, headers: headers, client: &http.Client{}, log: log,
		handle: handle, lost: lost, tracked: tracked,
		sessionUp: make(chan struct{}),
	}, nil
}

// start does nothing over the network: the session starts with the
// initialize request, and the standalone stream once it has.
func (w *httpWire) start(ctx context.Context) error {
	w.ctx, w.cancel = context.WithCancel(ctx)
	return nil
}

// setProtocolVersion records the version initialize agreed on; it is sent
// on every later request.
func (w *httpWire) setProtocolVersion(v string) {
	w.mu.Lock()
	w.version = v
	w.mu.Unlock()
}

// newRequest builds a request with the session's headers; it returns the
// session id it carries.
func (w *httpWire) newRequest(ctx context.Context, method string, body []byte, accept string, startsSession bool) (*http.Request, string, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, w.url, rd)
	if err != nil {
		return nil, "", err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", accept)
	w.mu.Lock()
	session, version := w.session, w.version
	w.mu.Unlock()
	if startsSession {
		session = ""
	}
	if session != "" {
		req.Header.Set(headerSessionID, session)
	}
	if version != "" && !startsSession {
		req.Header.Set(headerProtocolVersion, version)
	}
	for k, v := range w.headers {
		req.Header.Set(k, v)
	}
	return req, session, nil
}

// sessionGone forgets session, which the server answered 404 for.
func (w *httpWire) sessionGone(session string) {
	w.mu.Lock()
	if w.session == session {
		w.session = ""
	}
	w.mu.Unlock()
}

// bound returns ctx, ended as well when the wire is closed.
func (w *httpWire) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(w.ctx, cancel)
	return ctx, func() { stop(); cancel() }
}

func (w *httpWire) call(ctx context.Context, _ int64, method string, body []byte) (*envelope, error) {
	ctx, cancel := w.bound(ctx)
	defer cancel()
	initialize := method == methodInitialize
	req, session, err := w.newRequest(ctx, http.MethodPost, body, "application/json, text/event-stream", initialize)
	if err != nil {
		return nil, err
	}
	resp, err := w.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound && session != "":
		w.sessionGone(session)
		return nil, fmt.Errorf("%w: the server answered 404 for session %s", errSessionLost, session)
	case initialize && resp.StatusCode >= 400 && resp.StatusCode < 500:
		return nil, fmt.Errorf("%w (%s)", errLegacySSE, resp.Status)
	case resp.StatusCode != http.StatusOK:
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxHTTPMessage))
		if m, err := parseIn(b); err == nil && m.IsResponse() && len(m.Error) > 0 {
			return m, nil // a JSON-RPC error sent with an HTTP error status
		}
		return nil, fmt.Errorf("the server answered %s: %s", resp.Status, strings.TrimSpace(string(b[:min(len(b), 512)])))
	}
	if initialize {
		w.mu.Lock()
		w.session = resp.Header.Get(headerSessionID)
		w.mu.Unlock()
	}
	mediaType, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	var m *envelope
	switch mediaType {
	case "application/json":
		b, err := io.ReadAll(io.LimitReader(resp.Body, maxHTTPMessage+1))
		if err != nil {
			return nil, fmt.Errorf("reading the response: %w", err)
		}
		if len(b) > maxHTTPMessage {
			return nil, fmt.Errorf("the response is larger than %d bytes", maxHTTPMessage)
		}
		if m, err = parseIn(b); err != nil {
			return nil, fmt.Errorf("the response is not a JSON-RPC message: %w", err)
		}
		if !m.IsResponse() {
			return nil, errors.New("the response body is not a JSON-RPC response")
		}
	case "text/event-stream":
		err := readEvents(resp.Body, func(_ string, data []byte) bool {
			msg, err := parseIn(data)
			if err != nil {
				w.log.Warn("ignoring a malformed message on a response stream", "err", err)
				return true
			}
			if msg.IsResponse() {
				m = msg
				return false
			}
			if msg.Method != "" {
				w.handle(ctx, msg) // for this call: ctx carries it
			}
			return true
		})
		if m == nil {
			if err == nil {
				err = errors.New("the response stream ended before the response")
			}
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, err
		}
	default:
		return nil, fmt.Errorf("the server answered with content type %q", resp.Header.Get("Content-Type"))
	}
	if initialize && (len(m.Error) == 0 || isNull(m.Error)) {
		w.sessionStarted()
	}
	return m, nil
}

// sessionStarted starts the standalone stream the first time, and wakes
// it when a new session replaces a lost one.
func (w *httpWire) sessionStarted() {
	w.mu.Lock()
	close(w.sessionUp)
	w.sessionUp = make(chan struct{})
	start := !w.listening && !w.closed
	w.listening = true
	w.mu.Unlock()
	if start {
		w.tracked(w.listen)
	}
}

// send posts a notification or a response; the server answers 202.
func (w *httpWire) send(ctx context.Context, body []byte) error {
	ctx, cancel := w.bound(ctx)
	defer cancel()
	req, session, err := w.newRequest(ctx, http.MethodPost, body, "application/json, text/event-stream", false)
	if err != nil {
		return err
	}
	resp, err := w.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK, http.StatusAccepted, http.StatusNoContent:
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return nil
	case http.StatusNotFound:
		if session != "" {
			w.sessionGone(session)
			return fmt.Errorf("%w: the server answered 404 for session %s", errSessionLost, session)
		}
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	return fmt.Errorf("the server answered %s: %s", resp.Status, strings.TrimSpace(string(b)))
}

// listen keeps the standalone event stream open for the wire's life: the
// server's notifications and requests that belong to no call arrive there.
// A server that does not offer it (405) is not asked again; a lost session
// waits for the next one.
func (w *httpWire) listen() {
	for w.ctx.Err() == nil {
		w.mu.Lock()
		session, up := w.session, w.sessionUp
		w.mu.Unlock()
		gone, err := w.listenOnce()
		switch {
		case w.ctx.Err() != nil:
			return
		case errors.Is(err, errNoListen):
			w.log.Debug("the server offers no standalone event stream")
			return
		case gone:
			w.sessionGone(session)
			select {
			case <-up:
			case <-w.ctx.Done():
				return
			}
			continue
		case err != nil:
			w.log.Debug("the standalone event stream failed; opening it again", "err", err, "retry_in", listenRetry)
		}
		t := time.NewTimer(listenRetry)
		select {
		case <-t.C:
		case <-w.ctx.Done():
			t.Stop()
			return
		}
	}
}

var errNoListen = errors.New("GET not allowed")

// listenOnce opens the standalone stream and reads it to its end; gone
// reports a 404 for the session.
func (w *httpWire) listenOnce() (gone bool, err error) {
	req, _, err := w.newRequest(w.ctx, http.MethodGet, nil, "text/event-stream", false)
	if err != nil {
		return false, err
	}
	resp, err := w.client.Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusMethodNotAllowed:
		return false, errNoListen
	case http.StatusNotFound:
		return true, nil
	default:
		return false, fmt.Errorf("the server answered %s", resp.Status)
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "text/event-stream" {
		return false, fmt.Errorf("the server answered with content type %q", resp.Header.Get("Content-Type"))
	}
	return false, readEvents(resp.Body, func(_ string, data []byte) bool {
		m, err := parseIn(data)
		if err != nil {
			w.log.Warn("ignoring a malformed message on the event stream", "err", err)
			return true
		}
		if m.Method != "" {
			w.handle(w.ctx, m)
		}
		return true
	})
}

// close ends the standalone stream and the calls in flight, and ends the
// session with a DELETE.
func (w *httpWire) close() error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	session, version := w.session, w.version
	w.mu.Unlock()
	if w.cancel != nil {
		w.cancel()
	}
	if session == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), deleteTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, w.url, nil)
	if err != nil {
		return err
	}
	req.Header.Set(headerSessionID, session)
	if version != "" {
		req.Header.Set(headerProtocolVersion, version)
	}
	for k, v := range w.headers {
		req.Header.Set(k, v)
	}
	resp, err := w.client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// readEvents reads a text/event-stream and calls fn with each event's data
// (its data lines joined with "\n") until fn returns false or the stream
// ends; it returns nil then, or the read error.
func readEvents(r io.Reader, fn0 func(event string, data []byte) bool) error {
	// An event with empty data carries no message: MCP servers send one
	// first on a stream (an event id to resume from, "data:" empty), and
	// it is not a malformed message.
	fn := func(event string, data []byte) bool {
		if len(bytes.TrimSpace(data)) == 0 {
			return true
		}
		return fn0(event, data)
	}
	br := bufio.NewReaderSize(r, 64<<10)
	var event string
	var data []byte
	has := false
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// A long line: gather it whole.
			long := bytes.Clone(line)
			for errors.Is(err, bufio.ErrBufferFull) {
				if len(long) > maxHTTPMessage {
					return fmt.Errorf("an event is larger than %d bytes", maxHTTPMessage)
				}
				line, err = br.ReadSlice('\n')
				long = append(long, line...)
			}
			line = long
		}
		if err != nil && !(errors.Is(err, io.EOF) && len(line) > 0) {
			if errors.Is(err, io.EOF) {
				if has && !fn(event, data) {
					return nil
				}
				return nil
			}
			return err
		}
		line = bytes.TrimRight(line, "\r\n")
		switch {
		case len(line) == 0:
			if has {
				if !fn(event, data) {
					return nil
				}
			}
			event, data, has = "", nil, false
		case line[0] == ':':
		case bytes.HasPrefix(line, []byte("event:")):
			event = strings.TrimSpace(string(line[len("event:"):]))
		case bytes.HasPrefix(line, []byte("data:")):
			v := bytes.TrimPrefix(line[len("data:"):], []byte(" "))
			if len(data)+len(v) > maxHTTPMessage {
				return fmt.Errorf("an event is larger than %d bytes", maxHTTPMessage)
			}
			if has {
				data = append(data, '\n')
			}
			data = append(data, v...)
			has = true
		}
		if err != nil { // io.EOF after a last line without its break
			if has {
				fn(event, data)
			}
			return nil
		}
	}
}
