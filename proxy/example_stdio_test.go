package proxy_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sync"

	"github.com/foldproxy/foldproxy/fold"
	"github.com/foldproxy/foldproxy/policy"
	"github.com/foldproxy/foldproxy/proxy"
	"github.com/foldproxy/foldproxy/upstreams"
)

// notes is a tiny in-process upstream named "notes" with one tool, add.
type notes struct{}

func (notes) Name() string { return "notes" }
func (notes) Call(context.Context, string, json.RawMessage) (json.RawMessage, error) {
	return json.RawMessage(`{"content":[{"type":"text","text":"added"}]}`), nil
}
func (notes) Notify(context.Context, string, json.RawMessage) error { return nil }
func (notes) Catalog() upstreams.Catalog {
	return upstreams.Catalog{Tools: []json.RawMessage{json.RawMessage(`{"name":"add","description":"Adds a note.","inputSchema":{"type":"object"}}`)}}
}

// oneTool stands in for fold (*fold.Manager in serve): it offers one fold
// tool and keeps its sessions in memory.
type oneTool struct {
	mu       sync.Mutex
	sessions map[string]fold.SessionRecord
}

func (f *oneTool) Tools() []json.RawMessage {
	return []json.RawMessage{json.RawMessage(`{"name":"branch_create","inputSchema":{"type":"object"}}`)}
}
func (f *oneTool) CallTool(context.Context, string, string, json.RawMessage) (json.RawMessage, error) {
	return json.RawMessage(`{"content":[{"type":"text","text":"created"}]}`), nil
}
func (f *oneTool) OpenSession(_ context.Context, rec fold.SessionRecord) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.sessions == nil {
		f.sessions = map[string]fold.SessionRecord{}
	}
	f.sessions[rec.ID] = rec
	return nil
}
func (f *oneTool) ResumeSession(_ context.Context, id string) (*fold.SessionRecord, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r, ok := f.sessions[id]; ok {
		return &r, nil
	}
	return nil, fold.ErrSessionNotFound
}
func (f *oneTool) TouchSession(context.Context, string)     {}
func (f *oneTool) EndSession(context.Context, string) error { return nil }

// A server with one tiny in-process upstream, served on stdio over a pair
// of pipes: the agent initializes and lists the tools, the upstream's
// under its entry's name and foldproxy's own.
func ExampleServeStdio() {
	ctx := context.Background()
	set := policy.Default()
	logger := slog.New(slog.DiscardHandler) // stdout carries JSON-RPC only
	srv, err := proxy.New(proxy.Options{Settings: set, Upstreams: []proxy.Upstream{notes{}}, Fold: &oneTool{}, Logger: logger, Version: "example"})
	if err != nil {
		fmt.Println(err)
		return
	}

	agentOut, stdin := io.Pipe() // what the agent writes, the server reads
	stdout, agentIn := io.Pipe() // what the server writes, the agent reads
	done := make(chan error, 1)
	go func() {
		done <- proxy.ServeStdio(ctx, srv, agentOut, agentIn, proxy.StdioOptions{Logger: logger})
		agentIn.Close()
	}()
	lines := bufio.NewScanner(stdout)
	lines.Buffer(nil, 1<<20)
	ask := func(msg string) json.RawMessage {
		fmt.Fprintln(stdin, msg)
		if !lines.Scan() {
			return nil
		}
		var resp struct {
			Result json.RawMessage `json:"result"`
		}
		_ = json.Unmarshal(lines.Bytes(), &resp)
		return resp.Result
	}

	var init struct {
		ServerInfo struct{ Name string } `json:"serverInfo"`
	}
	_ = json.Unmarshal(ask(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"example","version":"1"}}}`), &init)
	fmt.Println("server:", init.ServerInfo.Name)
	fmt.Fprintln(stdin, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	var list struct {
		Tools []struct{ Name string } `json:"tools"`
	}
	_ = json.Unmarshal(ask(`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`), &list)
	for _, t := range list.Tools {
		fmt.Println("tool:", t.Name)
	}
	stdin.Close() // the agent leaves: the session ends
	fmt.Println("served:", <-done)
	// Output:
	// server: foldproxy
	// tool: branch_create
	// tool: notes__add
	// served: <nil>
}
