package proxy

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// sseStream writes Server-Sent Events on one HTTP response. Its methods are
// safe for concurrent use; each event is written and flushed whole under a
// lock, with a write deadline so that an agent that stops reading cannot hold
// a writer forever. Once closed it never touches the ResponseWriter again, so
// the handler that owns the response may return.
type sseStream struct {
	w            http.ResponseWriter
	rc           *http.ResponseController
	writeTimeout time.Duration
	failed       chan struct{} // closed at the first write error

	mu     sync.Mutex
	closed bool
	err    error
}

func newSSEStream(w http.ResponseWriter, writeTimeout time.Duration) *sseStream {
	return &sseStream{w: w, rc: http.NewResponseController(w), writeTimeout: writeTimeout, failed: make(chan struct{})}
}

// start sends the status line and the SSE headers.
func (st *sseStream) start() error {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.closed {
		return ErrOutboundClosed
	}
	h := st.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache, no-transform")
	h.Set("X-Accel-Buffering", "no") // keep reverse proxies from buffering the stream
	st.w.WriteHeader(http.StatusOK)
	return st.flushLocked()
}

// event writes one "message" event carrying data (one line of JSON), with
// an "id" field when id is not empty.
func (st *sseStream) event(id string, data []byte) error {
	var buf bytes.Buffer
	buf.Grow(len(data) + 48)
	if id != "" {
		buf.WriteString("id: ")
		buf.WriteString(id)
		buf.WriteByte('\n')
	}
	buf.WriteString("event: message\ndata: ")
	buf.Write(data)
	buf.WriteString("\n\n")
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.writeLocked(buf.Bytes())
}

// comment writes an SSE comment line, which clients ignore: it keeps
// intermediaries from timing the stream out.
func (st *sseStream) comment(text string) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.writeLocked([]byte(": " + text + "\n\n"))
}

func (st *sseStream) writeLocked(p []byte) error {
	if st.closed {
		return ErrOutboundClosed
	}
	if st.err != nil {
		return st.err
	}
	if st.writeTimeout > 0 {
		// Not every ResponseWriter supports deadlines (httptest's recorder
		// does not); the write goes ahead without one then.
		_ = st.rc.SetWriteDeadline(time.Now().Add(st.writeTimeout))
	}
	if _, err := st.w.Write(p); err != nil {
		return st.failLocked(err)
	}
	return st.flushLocked()
}

func (st *sseStream) flushLocked() error {
	if err := st.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return st.failLocked(err)
	}
	return nil
}

func (st *sseStream) failLocked(err error) error {
	st.err = fmt.Errorf("writing to the agent's event stream: %w", err)
	close(st.failed)
	return st.err
}

// close ends all writing; it waits for a write in progress.
func (st *sseStream) close() {
	st.mu.Lock()
	st.closed = true
	st.mu.Unlock()
}

// isClosed reports whether close was called.
func (st *sseStream) isClosed() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.closed
}

// sseRing keeps the last events of a session's standalone stream so that an
// agent reconnecting with Last-Event-ID gets what it missed. It is bounded by
// count and by bytes; its owner locks.
type sseRing struct {
	events []sseEvent
	bytes  int
}

type sseEvent struct {
	id   uint64
	data []byte
}

const (
	sseRingEvents = 64
	sseRingBytes  = 4 << 20
)

// add keeps an event, dropping the oldest ones past the bounds. An event
// larger than the byte bound is not kept at all.
func (r *sseRing) add(id uint64, data []byte) {
	if len(data) > sseRingBytes {
		return
	}
	r.events = append(r.events, sseEvent{id: id, data: bytes.Clone(data)})
	r.bytes += len(data)
	drop := 0
	for len(r.events)-drop > sseRingEvents || r.bytes > sseRingBytes {
		r.bytes -= len(r.events[drop].data)
		drop++
	}
	if drop > 0 {
		r.events = append(r.events[:0:0], r.events[drop:]...)
	}
}

// after returns the kept events with an id above lastID. A Last-Event-ID
// that is not one of ours (not a number) yields nothing.
func (r *sseRing) after(lastEventID string) []sseEvent {
	last, err := strconv.ParseUint(lastEventID, 10, 64)
	if err != nil {
		return nil
	}
	var out []sseEvent
	for _, e := range r.events {
		if e.id > last {
			out = append(out, e)
		}
	}
	return out
}
