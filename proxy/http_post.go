package proxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// httpPost is the Outbound the core answers one POST's requests on. It
// starts out answering with JSON, holding the responses until all are in,
// and switches to an event stream at the first message that is not one of
// the owed responses (a progress or logging notification, a sampling
// request), or at once when the agent accepts only text/event-stream.
type httpPost struct {
	w            http.ResponseWriter
	writeTimeout time.Duration
	allowJSON    bool
	allowSSE     bool
	batch        bool
	initKey      string // id key of an initialize request, "" otherwise

	mu         sync.Mutex
	await      *frontAwait
	held       [][]byte   // responses not yet written (JSON mode)
	st         *sseStream // non-nil once switched to an event stream
	done       bool       // every owed response is written; nothing more goes here
	finished   bool
	initFailed bool
	allPaid    chan struct{}
}

// WriteMessage is safe for concurrent use.
func (p *httpPost) WriteMessage(msg []byte) error {
	data, err := frontCompact(msg)
	if err != nil {
		return fmt.Errorf("http front: %w", err)
	}
	key, isResp, isErr := frontClassify(data)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done {
		return ErrOutboundClosed
	}
	if isResp && p.await.pay(key) {
		if p.initKey != "" && key == p.initKey && isErr {
			p.initFailed = true
		}
		err := p.emitLocked(bytes.Clone(data))
		if p.await.left == 0 {
			p.done = true
			close(p.allPaid)
		}
		return err
	}
	if !p.allowSSE {
		return fmt.Errorf("%w: the agent's POST does not accept text/event-stream", ErrOutboundClosed)
	}
	if err := p.switchLocked(); err != nil {
		return err
	}
	return p.st.event("", data)
}

// forgetRequest settles a request the agent cancelled: it is owed no
// response.
func (p *httpPost) forgetRequest(id json.RawMessage) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done || !p.await.pay(frontIDKey(id)) {
		return
	}
	if p.await.left == 0 {
		p.done = true
		close(p.allPaid)
	}
}

// emitLocked sends or holds one response.
func (p *httpPost) emitLocked(data []byte) error {
	if p.st == nil && !p.allowJSON {
		if err := p.switchLocked(); err != nil {
			return err
		}
	}
	if p.st != nil {
		return p.st.event("", data)
	}
	p.held = append(p.held, data)
	return nil
}

// switchLocked turns the response into an event stream, sending the held
// responses first.
func (p *httpPost) switchLocked() error {
	if p.st != nil {
		return nil
	}
	p.st = newSSEStream(p.w, p.writeTimeout)
	err := p.st.start()
	for _, m := range p.held {
		if err != nil {
			break
		}
		err = p.st.event("", m)
	}
	p.held = nil
	return err
}

func (p *httpPost) keepAlive() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.st != nil && !p.done {
		_ = p.st.comment("keepalive") // a failed stream is seen by the next write
	}
}

// finish answers every request still owed with an internal error, writes
// the JSON response or ends the stream, and stops all further writing. It
// is idempotent.
func (p *httpPost) finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.finished {
		return
	}
	p.finished = true
	for _, id := range p.await.missing() {
		if p.initKey != "" && frontIDKey(id) == p.initKey {
			p.initFailed = true
		}
		_ = p.emitLocked(frontNoResponse(id)) // the agent may be gone; nothing to do then
	}
	if !p.done {
		p.done = true
		close(p.allPaid)
	}
	if p.st != nil {
		p.st.close()
		return
	}
	if p.initFailed {
		p.w.Header().Del("Mcp-Session-Id")
	}
	if p.writeTimeout > 0 {
		// Best effort, as for event streams: not every ResponseWriter has deadlines.
		_ = http.NewResponseController(p.w).SetWriteDeadline(time.Now().Add(p.writeTimeout))
	}
	if len(p.held) == 0 {
		// Every request of the POST was cancelled by the agent: nothing
		// is owed.
		p.w.WriteHeader(http.StatusAccepted)
		return
	}
	httpWriteJSON(p.w, http.StatusOK, httpBody(p.held, p.batch))
	p.held = nil
}

// httpBody encodes responses: the single one, or an array for a batch.
func httpBody(msgs [][]byte, batch bool) []byte {
	if !batch && len(msgs) == 1 {
		return msgs[0]
	}
	return stdioJoinArray(msgs)
}

// httpWriteJSON writes a JSON body with status.
func httpWriteJSON(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body) // a write error means the agent left; nothing to do
}

// httpError writes a JSON-RPC error response with a null id and status.
func httpError(w http.ResponseWriter, status, code int, format string, args ...any) {
	httpWriteJSON(w, status, Response(nil, nil, Errorf(code, format, args...)))
}

// httpTrackWriter notes whether anything was written, so that a recovered
// panic is answered only when the response has not started.
type httpTrackWriter struct {
	http.ResponseWriter
	wrote atomic.Bool
}

func (w *httpTrackWriter) WriteHeader(code int) {
	w.wrote.Store(true)
	w.ResponseWriter.WriteHeader(code)
}

func (w *httpTrackWriter) Write(p []byte) (int, error) {
	w.wrote.Store(true)
	return w.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach Flush and SetWriteDeadline.
func (w *httpTrackWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// httpAccepts reports whether the Accept headers admit typ ("major/minor").
// No Accept header admits everything. The most specific matching range
// decides, so "text/event-stream;q=0, */*" excludes the event stream.
func httpAccepts(hdr http.Header, typ string) bool {
	major, _, _ := strings.Cut(typ, "/")
	seen := false
	best, bestQ := -1, 0.0
	for _, v := range hdr.Values("Accept") {
		for part := range strings.SplitSeq(v, ",") {
			part = strings.TrimSpace(part)
			if part == "" {
				continue
			}
			seen = true
			mt, params, err := mime.ParseMediaType(part)
			if err != nil {
				continue
			}
			spec := -1
			switch mt {
			case typ:
				spec = 2
			case major + "/*":
				spec = 1
			case "*/*":
				spec = 0
			}
			if spec < 0 {
				continue
			}
			q := 1.0
			if qs, ok := params["q"]; ok {
				if f, err := strconv.ParseFloat(qs, 64); err == nil {
					q = f
				}
			}
			if spec > best || (spec == best && q > bestQ) {
				best, bestQ = spec, q
			}
		}
	}
	return !seen || (best >= 0 && bestQ > 0)
}
