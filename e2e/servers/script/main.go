// Command script is an MCP server that writes exactly the bytes it is
// told to, so that tests can check that foldproxy relays an upstream's
// messages byte for byte. It stands in for an upstream; foldproxy is the
// component under test.
//
// Usage:
//
//	script --script FILE [--listen ADDR [--sse]]
//
// FILE is a JSON object mapping a tool name to the lines the server writes
// when that tool is called, in order. In a line, ${id} is the raw id of the
// tools/call it got, ${progressToken} the raw _meta.progressToken of its
// params and ${got} the last message received from the client; a line that
// is only "<" waits for the client's next response (an answer to one of the
// server's own requests) and binds ${got} to it, byte for byte.
//
// Without --listen it serves newline-delimited JSON-RPC on stdio; with it,
// streamable HTTP on ADDR at /mcp: a tools/call whose script is one line is
// answered with that line as an application/json body, any other with a
// text/event-stream carrying one event per line. It offers no standalone
// GET stream (405). With --sse it speaks the legacy HTTP+SSE transport
// instead: GET /sse opens the stream, whose endpoint event names where to
// POST; every message it writes is an event on that stream.
//
// Every tool is listed in tools/list with an empty object schema; the
// server declares the tools capability only. Logs go to stderr.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

const initResult = `{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"script","version":"1"}}`

func main() {
	scriptPath := flag.String("script", "", "JSON file: tool name → lines to write")
	listen := flag.String("listen", "", "serve streamable HTTP on this address instead of stdio")
	sse := flag.Bool("sse", false, "with --listen: serve the legacy HTTP+SSE transport")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	b, err := os.ReadFile(*scriptPath)
	if err != nil {
		log.Error("reading the script", "err", err)
		os.Exit(2)
	}
	var scripts map[string][]string
	if err := json.Unmarshal(b, &scripts); err != nil {
		log.Error("the script is not a JSON object of string arrays", "err", err)
		os.Exit(2)
	}
	s := &server{scripts: scripts, log: log}
	if *listen == "" {
		s.serveStdio(os.Stdin, os.Stdout)
		return
	}
	log.Info("listening", "addr", *listen, "sse", *sse)
	h := http.HandlerFunc(s.serveHTTP)
	if *sse {
		h = s.serveSSE
	}
	if err := http.ListenAndServe(*listen, h); err != nil {
		log.Error("serving", "err", err)
		os.Exit(1)
	}
}

type server struct {
	scripts map[string][]string
	log     *slog.Logger
	// answers carries the client's responses to the server's own requests
	// (HTTP mode: they arrive in POSTs of their own).
	answers  chan []byte
	sessions atomic.Int64
	mu       sync.Mutex
	posts    map[string]chan []byte // legacy SSE: each stream's POSTed bodies
	once     sync.Once
}

// envelope is what the server reads of a message.
type envelope struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
}

// callLines returns the lines to write for a tools/call, and the function
// that fills a line's placeholders in.
func (s *server) callLines(m envelope) ([]string, func(line string, got []byte) string, error) {
	var p struct {
		Name string `json:"name"`
		Meta struct {
			Token json.RawMessage `json:"progressToken"`
		} `json:"_meta"`
	}
	if err := json.Unmarshal(m.Params, &p); err != nil {
		return nil, nil, err
	}
	lines, ok := s.scripts[p.Name]
	if !ok {
		return nil, nil, fmt.Errorf("no script for tool %q", p.Name)
	}
	fill := func(line string, got []byte) string {
		return strings.NewReplacer("${id}", string(m.ID), "${progressToken}", string(p.Meta.Token), "${got}", string(got)).Replace(line)
	}
	return lines, fill, nil
}

// answer returns the response to a request other than tools/call.
func (s *server) answer(m envelope) string {
	switch m.Method {
	case "initialize":
		return `{"jsonrpc":"2.0","id":` + string(m.ID) + `,"result":` + initResult + `}`
	case "tools/list":
		names := make([]string, 0, len(s.scripts))
		for n := range s.scripts {
			names = append(names, n)
		}
		slices.Sort(names)
		var b strings.Builder
		for i, n := range names {
			if i > 0 {
				b.WriteByte(',')
			}
			q, _ := json.Marshal(n)
			b.WriteString(`{"name":` + string(q) + `,"inputSchema":{"type":"object"}}`)
		}
		return `{"jsonrpc":"2.0","id":` + string(m.ID) + `,"result":{"tools":[` + b.String() + `]}}`
	case "ping", "logging/setLevel":
		return `{"jsonrpc":"2.0","id":` + string(m.ID) + `,"result":{}}`
	}
	q, _ := json.Marshal("method not found: " + m.Method)
	return `{"jsonrpc":"2.0","id":` + string(m.ID) + `,"error":{"code":-32601,"message":` + string(q) + `}}`
}

func (s *server) serveStdio(in io.Reader, out io.Writer) {
	r := bufio.NewReaderSize(in, 1<<20)
	w := bufio.NewWriter(out)
	write := func(line string) {
		w.WriteString(line)
		w.WriteByte('\n')
		w.Flush()
	}
	next := func() ([]byte, bool) {
		for {
			line, err := r.ReadBytes('\n')
			if t := bytes.TrimSpace(line); len(t) > 0 {
				return t, true
			}
			if err != nil {
				return nil, false
			}
		}
	}
	s.serveLines(next, write)
}

// serveLines answers the messages next returns, one at a time, writing
// with write; it returns when next has no more.
func (s *server) serveLines(next func() ([]byte, bool), write func(string)) {
	for {
		line, ok := next()
		if !ok {
			return
		}
		var m envelope
		if err := json.Unmarshal(line, &m); err != nil {
			s.log.Warn("not JSON-RPC", "err", err)
			continue
		}
		if m.Method == "" || len(m.ID) == 0 {
			continue // a notification, or an answer nobody waits for
		}
		if m.Method != "tools/call" {
			write(s.answer(m))
			continue
		}
		lines, fill, err := s.callLines(m)
		if err != nil {
			q, _ := json.Marshal(err.Error())
			write(`{"jsonrpc":"2.0","id":` + string(m.ID) + `,"error":{"code":-32602,"message":` + string(q) + `}}`)
			continue
		}
		var got []byte
		for _, l := range lines {
			if l != "<" {
				write(fill(l, got))
				continue
			}
			// Wait for the client's answer; requests meanwhile are
			// answered as usual.
			for {
				msg, ok := next()
				if !ok {
					return
				}
				var a envelope
				if json.Unmarshal(msg, &a) != nil {
					continue
				}
				if a.Method == "" && len(a.ID) > 0 {
					got = msg
					break
				}
				if a.Method != "" && len(a.ID) > 0 {
					write(s.answer(a))
				}
			}
		}
	}
}

func (s *server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	s.once.Do(func() { s.answers = make(chan []byte, 16) })
	switch r.Method {
	case http.MethodGet:
		http.Error(w, "no standalone stream", http.StatusMethodNotAllowed)
		return
	case http.MethodDelete:
		w.WriteHeader(http.StatusOK)
		return
	case http.MethodPost:
	default:
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 16<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var m envelope
	if err := json.Unmarshal(body, &m); err != nil {
		http.Error(w, "not JSON-RPC: "+err.Error(), http.StatusBadRequest)
		return
	}
	if len(m.ID) == 0 || m.Method == "" {
		if m.Method == "" && len(m.ID) > 0 {
			s.answers <- bytes.TrimSpace(body)
		}
		w.WriteHeader(http.StatusAccepted)
		return
	}
	if m.Method != "tools/call" {
		if m.Method == "initialize" {
			w.Header().Set("Mcp-Session-Id", "script-"+strconv.FormatInt(s.sessions.Add(1), 10))
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, s.answer(m))
		return
	}
	lines, fill, err := s.callLines(m)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if len(lines) == 1 {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, fill(lines[0], nil))
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	var got []byte
	for _, l := range lines {
		if l == "<" {
			select {
			case got = <-s.answers:
			case <-r.Context().Done():
				return
			}
			continue
		}
		fmt.Fprintf(w, "event: message\ndata: %s\n\n", fill(l, got))
		if flusher != nil {
			flusher.Flush()
		}
	}
}

// serveSSE serves the legacy HTTP+SSE transport: each GET /sse is a
// session of its own, whose POSTs carry its number.
func (s *server) serveSSE(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/sse":
		id := strconv.FormatInt(s.sessions.Add(1), 10)
		posts := make(chan []byte, 64)
		s.mu.Lock()
		if s.posts == nil {
			s.posts = map[string]chan []byte{}
		}
		s.posts[id] = posts
		s.mu.Unlock()
		defer func() {
			s.mu.Lock()
			delete(s.posts, id)
			s.mu.Unlock()
		}()
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		flusher, _ := w.(http.Flusher)
		var wmu sync.Mutex
		emit := func(event, data string) {
			wmu.Lock()
			defer wmu.Unlock()
			fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, data)
			if flusher != nil {
				flusher.Flush()
			}
		}
		emit("endpoint", "/message?session="+id)
		ctx := r.Context()
		next := func() ([]byte, bool) {
			select {
			case b := <-posts:
				return b, true
			case <-ctx.Done():
				return nil, false
			}
		}
		s.serveLines(next, func(line string) { emit("message", line) })
	case r.Method == http.MethodPost && r.URL.Path == "/message":
		s.mu.Lock()
		posts := s.posts[r.URL.Query().Get("session")]
		s.mu.Unlock()
		if posts == nil {
			http.Error(w, "no such session", http.StatusNotFound)
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, 16<<20))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusAccepted)
		posts <- bytes.TrimSpace(body)
	default:
		http.Error(w, "not found", http.StatusNotFound)
	}
}
