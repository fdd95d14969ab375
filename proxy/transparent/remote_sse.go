package transparent

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// The event streams of the remote MCP front: the streamable HTTP answers
// and GET streams, and the legacy SSE transport's GET /sse stream.

// remoteEvent is one event of a stream: its lines as received, and the data.
type remoteEvent struct {
	lines [][]byte // every line but data lines, without line ends
	event string
	data  []byte
	has   bool // a data line was seen
}

// readEvent reads one event (through its blank line); io.EOF at the end.
func readEvent(br *bufio.Reader, max int64) (*remoteEvent, error) {
	ev := &remoteEvent{}
	var size int64
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// A line longer than the buffer: gather it.
			full := append([]byte(nil), line...)
			for errors.Is(err, bufio.ErrBufferFull) {
				if int64(len(full)) > max {
					return nil, fmt.Errorf("an event line is larger than foldproxy.maxMessageBytes (%d)", max)
				}
				line, err = br.ReadSlice('\n')
				full = append(full, line...)
			}
			line = full
		}
		if err != nil && !(errors.Is(err, io.EOF) && len(line) > 0) {
			if errors.Is(err, io.EOF) && (len(ev.lines) > 0 || ev.has) {
				return ev, nil
			}
			return nil, err
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			if len(ev.lines) == 0 && !ev.has {
				continue
			}
			return ev, nil
		}
		size += int64(len(line))
		if size > max {
			return nil, fmt.Errorf("an event is larger than foldproxy.maxMessageBytes (%d)", max)
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch string(field) {
		case "data":
			if ev.has {
				ev.data = append(ev.data, '\n')
			}
			ev.data = append(ev.data, value...)
			ev.has = true
			continue
		case "event":
			ev.event = string(value)
		}
		ev.lines = append(ev.lines, append([]byte(nil), line...))
	}
}

// write writes the event with data (one line: JSON-RPC messages are
// compact).
func (ev *remoteEvent) write(w io.Writer, data []byte) error {
	var b bytes.Buffer
	for _, l := range ev.lines {
		b.Write(l)
		b.WriteByte('\n')
	}
	if data != nil {
		for _, l := range bytes.Split(data, []byte("\n")) {
			b.WriteString("data: ")
			b.Write(l)
			b.WriteByte('\n')
		}
	}
	b.WriteByte('\n')
	_, err := w.Write(b.Bytes())
	return err
}

// relayStream relays an event stream, each message event through
// transform. s is set for a GET of a server's endpoint, whose stream may be
// the legacy SSE transport's: its endpoint event opens the session.
func (f *RemoteFront) relayStream(w http.ResponseWriter, r *http.Request, resp *http.Response, sess *remoteSession, s *remoteServer) {
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.Header().Del("Content-Length")
	w.WriteHeader(resp.StatusCode)
	rc := http.NewResponseController(w)
	_ = rc.Flush()

	type read struct {
		ev  *remoteEvent
		err error
	}
	events := make(chan read)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		br := bufio.NewReaderSize(resp.Body, 64<<10)
		for {
			ev, err := readEvent(br, f.maxMsg)
			select {
			case events <- read{ev, err}:
			case <-stop:
				return
			}
			if err != nil {
				return
			}
		}
	}()
	var inject chan []byte
	defer func() {
		if inject != nil && sess != nil {
			f.endSession(sess, "SSE stream closed")
		}
	}()
	target, _ := r.Context().Value(mitmTargetKey{}).(string)
	srv := s
	if srv == nil {
		srv = sess.srv
	}
	for {
		var ev *remoteEvent
		select {
		case <-r.Context().Done():
			return
		case m := <-inject:
			if err := (&remoteEvent{lines: [][]byte{[]byte("event: message")}}).write(w, m); err != nil {
				return
			}
			_ = rc.Flush()
			continue
		case rd := <-events:
			if rd.err != nil {
				if !errors.Is(rd.err, io.EOF) && !errors.Is(rd.err, context.Canceled) {
					f.log.Debug("transparent MCP: the server's event stream ended", "err", rd.err)
				}
				return
			}
			ev = rd.ev
		}
		var data []byte
		switch {
		case s != nil && sess == nil && ev.event == "endpoint":
			// The legacy SSE transport: POSTs of this session go to the
			// announced endpoint (on the same host, through foldproxy).
			ep, err := s.url.Parse(strings.TrimSpace(string(ev.data)))
			if err == nil && strings.EqualFold(ep.Hostname(), s.url.Hostname()) {
				inject = make(chan []byte)
				sess = f.session("e:"+hashKey(s.name, ep.RequestURI()), s, inject)
				f.mu.Lock()
				f.legacy[target+" "+ep.RequestURI()] = sess
				f.mu.Unlock()
			}
			data = f.scrubAny(r.Context(), srv, "event endpoint", ev.data)
		case !ev.has:
		case ev.event != "" && ev.event != "message":
			// Clients read only message events; these are scrubbed all
			// the same, as text (or JSON).
			data = f.scrubAny(r.Context(), srv, "event "+ev.event, ev.data)
		case sess == nil:
			// A stream of no known session (a stateless server's): still
			// scrubbed, with a session of its own for pending lookups.
			sess = f.session(fmt.Sprintf("g:%s:%p", s.name, r), s, nil)
			defer f.endSession(sess, "stream closed")
			data = f.transformOrDrop(r.Context(), sess, ev.data)
		default:
			data = f.transformOrDrop(r.Context(), sess, ev.data)
		}
		if ev.has && data == nil || !f.scrubLines(r.Context(), srv, ev) {
			continue // withheld or dropped: nothing of it reaches the client
		}
		if err := ev.write(w, data); err != nil {
			return
		}
		_ = rc.Flush()
	}
}

// scrubLines scrubs the event's lines other than its data (its name, id,
// retry and comments), which clients do not show the model but receive;
// false when they could not be scanned (the event is then dropped).
func (f *RemoteFront) scrubLines(ctx context.Context, s *remoteServer, ev *remoteEvent) bool {
	if len(ev.lines) == 0 {
		return true
	}
	joined := bytes.Join(ev.lines, []byte("\n"))
	clean := f.scrubAny(ctx, s, "event fields", joined)
	if clean == nil {
		return false
	}
	if !bytes.Equal(clean, joined) {
		ev.lines = [][]byte{clean}
	}
	return true
}

func (f *RemoteFront) transformOrDrop(ctx context.Context, sess *remoteSession, data []byte) []byte {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	return f.transformBody(ctx, sess, data, true)
}
