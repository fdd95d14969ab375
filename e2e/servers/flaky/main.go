// Command flaky is an MCP stdio server for foldproxy's end-to-end tests of
// upstream supervision: its tool "work" crashes the whole process on every
// N-th call, "slow" sleeps and notices when it is cancelled, and "stats"
// reports what the process has seen since it started.
//
// Logs go to stderr; stdout carries JSON-RPC only.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

func main() {
	crashEvery := flag.Int("crash-every", 3, "the N-th call of the work tool (N, 2N, ...) exits the process with status 1; 0 never crashes")
	maxSleep := flag.Duration("max-sleep", 10*time.Minute, "upper bound of the slow tool's sleep")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if *crashEvery < 0 {
		log.Error("flaky: -crash-every must be 0 or more", "value", *crashEvery)
		os.Exit(2)
	}
	f := &flaky{crashEvery: *crashEvery, maxSleep: *maxSleep, log: log, exit: os.Exit}
	if err := server.ServeStdio(f.server()); err != nil {
		log.Error("flaky: serving stdio", "err", err)
		os.Exit(1)
	}
}

// flaky holds the process-wide counters. Its methods are safe for
// concurrent use.
type flaky struct {
	crashEvery int
	maxSleep   time.Duration
	log        *slog.Logger
	exit       func(code int) // os.Exit; replaced in tests

	mu        sync.Mutex
	calls     int // calls of work
	slow      int // calls of slow
	cancelled int // slow calls whose context ended before the sleep did
}

func (f *flaky) server() *server.MCPServer {
	s := server.NewMCPServer("flaky", "1.0.0", server.WithToolCapabilities(false))
	s.AddTool(mcp.NewTool("work",
		mcp.WithDescription("Does a little work. Every N-th call (the -crash-every flag) crashes the server process."),
	), f.work)
	s.AddTool(mcp.NewTool("slow",
		mcp.WithDescription("Sleeps for ms milliseconds. With a progress token it first sends one progress notification saying it started. Cancellation ends the sleep."),
		mcp.WithNumber("ms", mcp.Required(), mcp.Description("milliseconds to sleep")),
	), f.slowTool)
	s.AddTool(mcp.NewTool("stats",
		mcp.WithDescription("Reports the calls and cancellations this process has seen, and its pid."),
	), f.stats)
	return s
}

func (f *flaky) work(_ context.Context, _ mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	f.mu.Lock()
	f.calls++
	n := f.calls
	f.mu.Unlock()
	if f.crashEvery > 0 && n%f.crashEvery == 0 {
		f.log.Error("flaky: crashing on purpose", "call", n, "crashEvery", f.crashEvery)
		f.exit(1)
	}
	return mcp.NewToolResultText(fmt.Sprintf("work call %d done by pid %d", n, os.Getpid())), nil
}

func (f *flaky) slowTool(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	ms := req.GetFloat("ms", -1)
	if ms < 0 {
		return mcp.NewToolResultError("slow: argument ms must be a number of milliseconds, 0 or more"), nil
	}
	d := time.Duration(ms * float64(time.Millisecond))
	if d > f.maxSleep {
		return mcp.NewToolResultErrorf("slow: ms=%v is above the limit of %v", ms, f.maxSleep), nil
	}
	f.mu.Lock()
	f.slow++
	f.mu.Unlock()
	if req.Params.Meta != nil && req.Params.Meta.ProgressToken != nil {
		srv := server.ServerFromContext(ctx)
		err := srv.SendNotificationToClient(ctx, string(mcp.MethodNotificationProgress), map[string]any{
			"progressToken": req.Params.Meta.ProgressToken,
			"progress":      0,
			"message":       "slow started",
		})
		if err != nil {
			f.log.Warn("flaky: sending progress", "err", err)
		}
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return mcp.NewToolResultText(fmt.Sprintf("slept %v", d)), nil
	case <-ctx.Done():
		f.mu.Lock()
		f.cancelled++
		f.mu.Unlock()
		f.log.Info("flaky: slow call cancelled", "err", ctx.Err())
		return nil, ctx.Err()
	}
}

// Stats is the JSON text the stats tool returns.
type Stats struct {
	PID       int `json:"pid"`
	Calls     int `json:"calls"`
	Slow      int `json:"slow"`
	Cancelled int `json:"cancelled"`
}

func (f *flaky) stats(_ context.Context, _ mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	f.mu.Lock()
	st := Stats{PID: os.Getpid(), Calls: f.calls, Slow: f.slow, Cancelled: f.cancelled}
	f.mu.Unlock()
	b, err := json.Marshal(st)
	if err != nil {
		return nil, fmt.Errorf("stats: encoding: %w", err)
	}
	return mcp.NewToolResultText(string(b)), nil
}
