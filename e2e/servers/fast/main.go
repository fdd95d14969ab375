// Command fast is the bench's fast MCP stdio server: one tool, emit(bytes),
// answered from text prepared at start, so that what a call through
// foldproxy costs beyond a call made directly is foldproxy's work and not
// the server's. It speaks raw newline-delimited JSON-RPC (initialize,
// ping, tools/list, tools/call) without an SDK.
//
// Each answer is made when it is asked for, as a Go MCP server makes it:
// the text taken from the corpus and the result encoded with
// encoding/json. The corpus is realistic tool output, in blocks that take
// turns: the recorded outputs of the trajectory file (real shell steps of
// coding agents), Go source code, JSON records and log lines
// (trajectory.Mixed). Each call starts at another place in it, so that no
// two calls in a row get the same bytes.
//
//	fast [-data FILE]
//
// Logs go to stderr; stdout carries JSON-RPC only.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"unicode/utf8"

	"github.com/foldproxy/foldproxy/e2e/trajectory"
)

// maxEmit bounds emit's size argument.
const maxEmit = 64 << 20

func main() {
	data := flag.String("data", trajectory.File, "gzip JSONL trajectories; a relative path is resolved against the repository root")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	var outs []string
	if path, err := resolveData(*data); err != nil {
		log.Warn("fast: no trajectory file; the text is code, JSON and logs only", "err", err)
	} else if trajs, err := trajectory.Load(path); err != nil {
		log.Warn("fast: no trajectories; the text is code, JSON and logs only", "err", err)
	} else {
		for _, t := range trajs {
			for _, s := range t.Steps {
				outs = append(outs, s.Output)
			}
		}
	}
	s := &server{corpus: trajectory.Mixed(outs, 8<<20), out: bufio.NewWriterSize(os.Stdout, 64<<10)}
	if err := s.serve(os.Stdin); err != nil {
		log.Error("fast: serving stdio", "err", err)
		os.Exit(1)
	}
}

// resolveData makes a relative data path absolute against the repository
// root (the folder with go.mod above the working directory).
func resolveData(p string) (string, error) {
	if filepath.IsAbs(p) {
		return p, nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, p), nil
		}
		if filepath.Dir(dir) == dir {
			return "", fmt.Errorf("data path %q is relative and no go.mod was found above %s", p, wd)
		}
	}
}

type server struct {
	corpus string
	out    *bufio.Writer
	calls  int
	buf    []byte
}

type request struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params struct {
		Name      string `json:"name"`
		Arguments struct {
			Bytes *float64 `json:"bytes"`
		} `json:"arguments"`
	} `json:"params"`
}

const toolsList = `{"tools":[{"name":"emit","description":"Returns realistic tool output (trajectory steps, Go code, JSON records, log lines) of exactly the given number of bytes.","inputSchema":{"type":"object","properties":{"bytes":{"type":"number","description":"size in bytes"}},"required":["bytes"]}}]}`

func (s *server) serve(in io.Reader) error {
	br := bufio.NewReaderSize(in, 64<<10)
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			if werr := s.handle(line); werr != nil {
				return werr
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

func (s *server) handle(line []byte) error {
	var req request
	if err := json.Unmarshal(line, &req); err != nil {
		return s.reply(nil, `{"code":-32700,"message":"parse error"}`, true)
	}
	if len(req.ID) == 0 {
		return nil // a notification
	}
	switch req.Method {
	case "initialize":
		return s.reply(req.ID, `{"protocolVersion":"2025-03-26","capabilities":{"tools":{}},"serverInfo":{"name":"fast","version":"1.0.0"}}`, false)
	case "ping":
		return s.reply(req.ID, `{}`, false)
	case "tools/list":
		return s.reply(req.ID, toolsList, false)
	case "tools/call":
		b := req.Params.Arguments.Bytes
		if req.Params.Name != "emit" || b == nil || *b < 0 || *b > maxEmit || *b != float64(int(*b)) {
			return s.reply(req.ID, `{"content":[{"type":"text","text":"emit: bytes must be a whole number from 0 to 67108864"}],"isError":true}`, false)
		}
		return s.emit(req.ID, int(*b))
	}
	return s.reply(req.ID, `{"code":-32601,"message":"method not found"}`, true)
}

func (s *server) reply(id json.RawMessage, body string, isErr bool) error {
	if id == nil {
		id = json.RawMessage("null")
	}
	key := `,"result":`
	if isErr {
		key = `,"error":`
	}
	s.buf = append(append(append(append(s.buf[:0], `{"jsonrpc":"2.0","id":`...), id...), key...), body...)
	s.buf = append(s.buf, "}\n"...)
	return s.write(s.buf)
}

// emit answers with n bytes of the corpus from the next starting place,
// encoded as a Go MCP server encodes a result (encoding/json), call by
// call.
func (s *server) emit(id json.RawMessage, n int) error {
	s.calls++
	text := ""
	if n > 0 {
		start := (s.calls * 104_729) % len(s.corpus)
		text = wrapSlice(s.corpus, start, n)
	}
	type content struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	type result struct {
		Content []content `json:"content"`
	}
	b, err := json.Marshal(struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Result  result          `json:"result"`
	}{"2.0", id, result{Content: []content{{Type: "text", Text: text}}}})
	if err != nil {
		return err
	}
	return s.write(append(b, '\n'))
}

func (s *server) write(b []byte) error {
	if _, err := s.out.Write(b); err != nil {
		return err
	}
	return s.out.Flush()
}

// wrapSlice returns n bytes of s from start, going round to its
// beginning: whole UTF-8 sequences only, padded with spaces to n bytes.
func wrapSlice(s string, start, n int) string {
	for start < len(s) && !utf8.RuneStart(s[start]) {
		start++
	}
	var out []byte
	if start+n <= len(s) {
		out = []byte(s[start : start+n])
	} else {
		out = make([]byte, 0, n)
		for len(out) < n {
			take := min(n-len(out), len(s)-start)
			out = append(out, s[start:start+take]...)
			start = 0
		}
	}
	// Cut a sequence split at the end, and pad.
	end := len(out)
	for i := max(0, len(out)-utf8.UTFMax); i < len(out); i++ {
		if utf8.RuneStart(out[i]) && !utf8.FullRune(out[i:]) {
			end = i
			break
		}
	}
	for i := end; i < len(out); i++ {
		out[i] = ' '
	}
	return string(out)
}
