package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// remoteMCP is server-everything (streamable HTTP, plain) behind a TLS
// terminator in this process: the remote MCP server of section 8's
// tools/call rows, at https://localhost:PORT/mcp.
type remoteMCP struct {
	url  string
	stop func()
}

// startRemoteMCP starts it; nil when e2e/node_modules is not installed.
func startRemoteMCP(ctx context.Context, e *env, certFile, keyFile string) (*remoteMCP, error) {
	if e.node == "" {
		return nil, nil
	}
	script := filepath.Join(e.repo, "e2e", "node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js")
	if !fileExists(script) {
		return nil, nil
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(e.node, script, "streamableHttp")
	cmd.Env = append(cmd.Environ(), fmt.Sprintf("PORT=%d", port))
	ownGroup(cmd)
	stderr := &tailBuffer{max: 16 << 10}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("server-everything: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	kill := func() {
		_ = termGroup(cmd)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = killGroup(cmd)
			<-exited
		}
	}
	origin := fmt.Sprintf("127.0.0.1:%d", port)
	for deadline := time.Now().Add(60 * time.Second); ; {
		c, err := net.Dial("tcp", origin)
		if err == nil {
			c.Close()
			break
		}
		select {
		case err := <-exited:
			return nil, fmt.Errorf("server-everything exited: %v%s", err, stderr.tail())
		case <-ctx.Done():
			kill()
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			kill()
			return nil, fmt.Errorf("server-everything did not listen%s", stderr.tail())
		}
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		kill()
		return nil, err
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		kill()
		return nil, err
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(&url.URL{Scheme: "http", Host: origin})
			pr.Out.Host = origin
		},
		FlushInterval: -1,
	}
	hs := &http.Server{Handler: rp, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	return &remoteMCP{
		url:  fmt.Sprintf("https://localhost:%d/mcp", ln.Addr().(*net.TCPAddr).Port),
		stop: func() { _ = hs.Close(); kill() },
	}, nil
}

// mcpSession is a minimal streamable HTTP client: one session, requests
// answered in a JSON body or an event stream.
type mcpSession struct {
	hc  *http.Client
	url string
	sid string
	id  int
}

// post sends one message and returns the response to it (nil for a
// notification).
func (s *mcpSession) post(ctx context.Context, method string, params any, notify bool) (json.RawMessage, error) {
	msg := map[string]any{"jsonrpc": "2.0", "method": method}
	if params != nil {
		msg["params"] = params
	}
	if !notify {
		s.id++
		msg["id"] = s.id
	}
	body, _ := json.Marshal(msg)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", protocolVersion)
	if s.sid != "" {
		req.Header.Set("Mcp-Session-Id", s.sid)
	}
	resp, err := s.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if sid := resp.Header.Get("Mcp-Session-Id"); sid != "" {
		s.sid = sid
	}
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(resp.Body)
		return nil, fmt.Errorf("%s: HTTP %d: %s", method, resp.StatusCode, strings.TrimSpace(string(b)))
	}
	if notify {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil, nil
	}
	var res struct {
		ID     int             `json:"id"`
		Result json.RawMessage `json:"result"`
		Error  json.RawMessage `json:"error"`
	}
	found := func(data []byte) (bool, error) {
		if json.Unmarshal(data, &res) != nil || res.ID != s.id || (res.Result == nil && res.Error == nil) {
			return false, nil
		}
		if res.Error != nil {
			return true, fmt.Errorf("%s: %s", method, res.Error)
		}
		return true, nil
	}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 16<<20)
		for sc.Scan() {
			if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				if ok, err := found([]byte(data)); ok {
					return res.Result, err
				}
			}
		}
		return nil, fmt.Errorf("%s: the stream ended without the response", method)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if ok, err := found(b); ok {
		return res.Result, err
	}
	return nil, fmt.Errorf("%s: no response in %q", method, b)
}

// open initializes the session.
func (s *mcpSession) open(ctx context.Context) error {
	if _, err := s.post(ctx, "initialize", map[string]any{"protocolVersion": protocolVersion, "capabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "foldproxy-bench", "version": "1"}}, false); err != nil {
		return err
	}
	_, err := s.post(ctx, "notifications/initialized", nil, true)
	return err
}

// toolNamed is the name of the listed tool that is echo or ends in it.
func (s *mcpSession) toolNamed(ctx context.Context, suffix string) (string, error) {
	res, err := s.post(ctx, "tools/list", map[string]any{}, false)
	if err != nil {
		return "", err
	}
	var l struct {
		Tools []struct {
			Name string `json:"name"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(res, &l); err != nil {
		return "", err
	}
	for _, t := range l.Tools {
		if t.Name == suffix || strings.HasSuffix(t.Name, "_"+suffix) {
			return t.Name, nil
		}
	}
	return "", errors.New("no tool named " + suffix)
}

// callTimes times n tools/call of tool with args.
func (s *mcpSession) callTimes(ctx context.Context, tool string, args map[string]any, n int) ([]time.Duration, error) {
	out := make([]time.Duration, 0, n)
	for range n {
		t0 := time.Now()
		res, err := s.post(ctx, "tools/call", map[string]any{"name": tool, "arguments": args}, false)
		if err != nil {
			return nil, err
		}
		if bytes.Contains(res, []byte(`"isError":true`)) {
			return nil, fmt.Errorf("tools/call %s: %s", tool, res)
		}
		out = append(out, time.Since(t0))
	}
	return out, nil
}
