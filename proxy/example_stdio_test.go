package proxy_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"

	"github.com/foldproxy/foldproxy/fold"
	"github.com/foldproxy/foldproxy/intercept"
	"github.com/foldproxy/foldproxy/policy"
	"github.com/foldproxy/foldproxy/proxy"
)

// A server with no upstream, served on stdio over a pair of pipes: the
// agent initializes and lists the tools, which are foldproxy's own fold
// tools.
func ExampleServeStdio() {
	ctx := context.Background()
	set := policy.Default()
	scrubber, err := intercept.NewScrubber(set.Scrub, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	counter, err := intercept.NewCounter(set.Tokens)
	if err != nil {
		fmt.Println(err)
		return
	}
	mgr, err := fold.NewManager(ctx, fold.Options{
		Settings: set.Fold, Store: fold.NewMemStore(), Scanner: scrubber, Counter: counter, PruneInterval: -1,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer mgr.Close()
	logger := slog.New(slog.DiscardHandler) // stdout carries JSON-RPC only
	srv, err := proxy.New(proxy.Options{Settings: set, Fold: mgr, Scrubber: scrubber, Logger: logger, Version: "example"})
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
	// tool: branch_return
	// tool: branch_status
	// tool: branch_recall
	// tool: checkpoint_save
	// tool: checkpoint_list
	// tool: checkpoint_resume
	// served: <nil>
}
