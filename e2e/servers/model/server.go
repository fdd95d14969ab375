package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// Options tunes the server.
type Options struct {
	// Chunk is the size in bytes of each text_delta and input_json_delta.
	// Default 16.
	Chunk int
	// Logger receives diagnostics; nil discards.
	Logger *slog.Logger
}

// Server is the scripted Messages API.
type Server struct {
	sc    *Script
	rec   *Recorder
	chunk int
	log   *slog.Logger
	seq   atomic.Int64
}

// NewServer returns the handler. rec may be nil.
func NewServer(sc *Script, rec *Recorder, opt Options) (*Server, error) {
	if sc == nil {
		return nil, fmt.Errorf("model: NewServer needs a script")
	}
	if opt.Chunk < 0 {
		return nil, fmt.Errorf("model: Chunk %d is negative", opt.Chunk)
	}
	if opt.Chunk == 0 {
		opt.Chunk = 16
	}
	log := opt.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Server{sc: sc, rec: rec, chunk: opt.Chunk, log: log}, nil
}

// maxBody bounds one request, as the real API does (32 MB).
const maxBody = 32 << 20

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	seq := s.seq.Add(1)
	var body []byte
	if r.Body != nil {
		var err error
		body, err = io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
		if err != nil {
			s.record(seq, r, body, "", "reading the body: "+err.Error())
			apiError(w, http.StatusRequestEntityTooLarge, "request_too_large", "request exceeds the maximum allowed number of bytes")
			return
		}
	}
	w.Header().Set("request-id", fmt.Sprintf("req_model_%06d", seq))
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/v1/messages":
		s.messages(w, r, seq, body)
	case r.Method == http.MethodPost && (r.URL.Path == "/v1/chat/completions" || r.URL.Path == "/v1/responses"):
		s.openai(w, r, seq, body, r.URL.Path == "/v1/responses")
	case r.Method == http.MethodGet && r.URL.Path == "/v1/models":
		s.record(seq, r, body, "models", "")
		name := s.sc.Model
		if name == "" {
			name = "scripted-model"
		}
		writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": []any{map[string]any{"id": name, "object": "model", "created": 0, "owned_by": "foldproxy-e2e"}}})
	case r.Method == http.MethodPost && r.URL.Path == "/v1/messages/count_tokens":
		if err := validate(body, false); err != nil {
			s.record(seq, r, body, "", err.Error())
			apiError(w, http.StatusBadRequest, "invalid_request_error", err.Error())
			return
		}
		s.record(seq, r, body, "count_tokens", "")
		writeJSON(w, http.StatusOK, map[string]int{"input_tokens": estimateTokens(body)})
	default:
		s.record(seq, r, body, "", "")
		apiError(w, http.StatusNotFound, "not_found_error", "Not found: "+r.Method+" "+r.URL.Path)
	}
}

func (s *Server) messages(w http.ResponseWriter, r *http.Request, seq int64, body []byte) {
	if err := validate(body, true); err != nil {
		s.record(seq, r, body, "", err.Error())
		s.log.Warn("model: invalid request", "seq", seq, "err", err)
		apiError(w, http.StatusBadRequest, "invalid_request_error", err.Error())
		return
	}
	var req request
	_ = json.Unmarshal(body, &req) // validate decoded it already
	turn, blocks := s.sc.pick(&req, body)
	s.record(seq, r, body, turn, "")
	s.log.Info("model: request", "seq", seq, "turn", turn, "stream", req.Stream, "bytes", len(body), "messages", len(req.Messages))
	model := s.sc.Model
	if model == "" {
		model = req.Model
	}
	msgID := fmt.Sprintf("msg_model_%06d", seq)
	in := estimateTokens(body)
	out := 0
	for _, b := range blocks {
		out += (len(b.Text) + len(b.Input) + 3) / 4
	}
	stop := "end_turn"
	for _, b := range blocks {
		if b.Type == "tool_use" {
			stop = "tool_use"
		}
	}
	usage := map[string]int{"input_tokens": in, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": out}
	if !req.Stream {
		content := make([]map[string]any, len(blocks))
		for i, b := range blocks {
			content[i] = blockJSON(b, true)
		}
		writeJSON(w, http.StatusOK, map[string]any{
			"id": msgID, "type": "message", "role": "assistant", "model": model,
			"content": content, "stop_reason": stop, "stop_sequence": nil, "usage": usage,
		})
		return
	}
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	ev := &events{w: w, rc: http.NewResponseController(w)}
	startUsage := map[string]int{"input_tokens": in, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 1}
	ev.send("message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": msgID, "type": "message", "role": "assistant", "model": model, "content": []any{},
		"stop_reason": nil, "stop_sequence": nil, "usage": startUsage,
	}})
	for i, b := range blocks {
		ev.send("content_block_start", map[string]any{"type": "content_block_start", "index": i, "content_block": blockJSON(b, false)})
		if i == 0 {
			ev.send("ping", map[string]any{"type": "ping"})
		}
		switch b.Type {
		case "text":
			for _, piece := range pieces(b.Text, s.chunk) {
				ev.send("content_block_delta", map[string]any{"type": "content_block_delta", "index": i,
					"delta": map[string]any{"type": "text_delta", "text": piece}})
			}
		case "tool_use":
			var compact bytes.Buffer
			_ = json.Compact(&compact, b.Input) // checked by LoadScript
			ev.send("content_block_delta", map[string]any{"type": "content_block_delta", "index": i,
				"delta": map[string]any{"type": "input_json_delta", "partial_json": ""}})
			for _, piece := range pieces(compact.String(), s.chunk) {
				ev.send("content_block_delta", map[string]any{"type": "content_block_delta", "index": i,
					"delta": map[string]any{"type": "input_json_delta", "partial_json": piece}})
			}
		}
		ev.send("content_block_stop", map[string]any{"type": "content_block_stop", "index": i})
	}
	ev.send("message_delta", map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": stop, "stop_sequence": nil},
		"usage": map[string]int{"output_tokens": out}})
	ev.send("message_stop", map[string]any{"type": "message_stop"})
	if ev.err != nil {
		s.log.Warn("model: writing the stream", "seq", seq, "err", ev.err)
	}
}

// blockJSON is a content block as the API shows it: whole in a message,
// or empty at content_block_start (text "", input {}) before its deltas.
func blockJSON(b Block, whole bool) map[string]any {
	switch b.Type {
	case "tool_use":
		input := json.RawMessage(`{}`)
		if whole {
			input = b.Input
		}
		return map[string]any{"type": "tool_use", "id": b.ID, "name": b.Name, "input": input}
	default:
		text := ""
		if whole {
			text = b.Text
		}
		return map[string]any{"type": "text", "text": text}
	}
}

// pieces splits s into chunks of about n bytes on rune boundaries.
func pieces(s string, n int) []string {
	var out []string
	for len(s) > 0 {
		k := min(n, len(s))
		for k < len(s) && !utf8.RuneStart(s[k]) {
			k++
		}
		out = append(out, s[:k])
		s = s[k:]
	}
	return out
}

// events writes server-sent events, flushing each as it is written.
type events struct {
	w   http.ResponseWriter
	rc  *http.ResponseController
	err error
}

func (e *events) send(name string, data any) {
	if e.err != nil {
		return
	}
	b, err := json.Marshal(data)
	if err != nil {
		e.err = err
		return
	}
	if _, err := fmt.Fprintf(e.w, "event: %s\ndata: %s\n\n", name, b); err != nil {
		e.err = err
		return
	}
	e.err = e.rc.Flush()
}

// estimateTokens is a rough count (4 bytes a token) for usage figures.
func estimateTokens(body []byte) int { return max(1, len(body)/4) }

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// apiError writes an error in the Messages API's shape.
func apiError(w http.ResponseWriter, status int, typ, msg string) {
	writeJSON(w, status, map[string]any{"type": "error", "error": map[string]string{"type": typ, "message": msg}})
}

// Record is one line of the record file.
type Record struct {
	Seq     int64               `json:"seq"`
	Time    time.Time           `json:"time"`
	Method  string              `json:"method"`
	Path    string              `json:"path"`
	Query   string              `json:"query,omitempty"`
	Headers map[string][]string `json:"headers"`
	// Body is the request body exactly as received (base64 in the file,
	// so that the bytes survive JSON encoding unchanged).
	Body []byte `json:"body,omitempty"`
	// Turn is the script turn played ("fallback", "count_tokens"), "" when
	// the request was refused.
	Turn string `json:"turn,omitempty"`
	// Invalid is why the request was refused with 400, as the real API would.
	Invalid string `json:"invalid,omitempty"`
}

// Recorder appends records to a file, one JSON line each, written whole
// before the request is answered.
type Recorder struct {
	mu sync.Mutex
	f  *os.File
}

// OpenRecorder creates (or truncates) path.
func OpenRecorder(path string) (*Recorder, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, err
	}
	return &Recorder{f: f}, nil
}

// Close closes the file.
func (r *Recorder) Close() error { return r.f.Close() }

func (r *Recorder) write(rec Record) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	_, err = r.f.Write(append(b, '\n'))
	return err
}

func (s *Server) record(seq int64, r *http.Request, body []byte, turn, invalid string) {
	if s.rec == nil {
		return
	}
	rec := Record{Seq: seq, Time: time.Now().UTC(), Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery,
		Headers: r.Header.Clone(), Body: body, Turn: turn, Invalid: invalid}
	if err := s.rec.write(rec); err != nil {
		s.log.Error("model: recording a request", "seq", seq, "err", err)
	}
}
