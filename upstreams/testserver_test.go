package upstreams

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// envServer makes the test binary serve MCP on stdio instead of running
// tests: "mcp" serves newTestServer with mcp-go, "raw" a hand-written
// JSON-RPC server whose bytes the tests know exactly.
const envServer = "FOLDPROXY_UPSTREAMS_TEST_SERVER"

// envMarker names a file the slow tool writes to when it is cancelled.
const envMarker = "FOLDPROXY_UPSTREAMS_TEST_MARKER"

func TestMain(m *testing.M) {
	switch os.Getenv(envServer) {
	case "mcp":
		if err := server.ServeStdio(newTestServer()); err != nil {
			fmt.Fprintln(os.Stderr, "serve:", err)
			os.Exit(1)
		}
		os.Exit(0)
	case "raw":
		serveRaw()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// testToolNames are the tools of newTestServer, in the order they are added.
var testToolNames = []string{"echo", "crash", "slow", "notify", "sample", "addtool", "env", "stderr", "diesoon"}

// newTestServer is the MCP server the tests talk to: over stdio in a child
// process, or in process behind streamable HTTP and SSE. Its page size is 2,
// so every list takes several pages.
func newTestServer() *server.MCPServer {
	s := server.NewMCPServer("testsrv", "1.2.3",
		server.WithToolCapabilities(true),
		server.WithResourceCapabilities(false, true),
		server.WithPromptCapabilities(true),
		server.WithPaginationLimit(2),
		server.WithLegacyServerInitiatedRequests(),
		server.WithInstructions("test instructions"),
	)
	text := func(s string) (*mcp.CallToolResult, error) { return mcp.NewToolResultText(s), nil }
	s.AddTool(mcp.NewTool("echo", mcp.WithString("text")), func(ctx context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return text(r.GetString("text", ""))
	})
	s.AddTool(mcp.NewTool("crash"), func(ctx context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		os.Exit(3)
		return nil, nil
	})
	s.AddTool(mcp.NewTool("slow"), func(ctx context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		_ = s.SendNotificationToClient(ctx, "notifications/message", map[string]any{"level": "info", "data": "slow started"})
		select {
		case <-ctx.Done():
			if p := os.Getenv(envMarker); p != "" {
				_ = os.WriteFile(p, []byte("cancelled"), 0o600)
			}
			return nil, ctx.Err()
		case <-time.After(time.Minute):
			return text("slow done")
		}
	})
	s.AddTool(mcp.NewTool("notify"), func(ctx context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var token any = "none"
		if r.Params.Meta != nil && r.Params.Meta.ProgressToken != nil {
			token = r.Params.Meta.ProgressToken
		}
		for i := 1; i <= 3; i++ {
			_ = s.SendNotificationToClient(ctx, "notifications/progress", map[string]any{"progressToken": token, "progress": i, "total": 3})
		}
		_ = s.SendNotificationToClient(ctx, "notifications/message", map[string]any{"level": "info", "data": "notified"})
		return text("notified")
	})
	s.AddTool(mcp.NewTool("sample"), func(ctx context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		res, err := s.RequestSampling(ctx, mcp.CreateMessageRequest{CreateMessageParams: mcp.CreateMessageParams{
			Messages:  []mcp.SamplingMessage{{Role: mcp.RoleUser, Content: mcp.NewTextContent("say hi")}},
			MaxTokens: 10,
		}})
		if err != nil {
			return mcp.NewToolResultError("sampling failed: " + err.Error()), nil
		}
		b, _ := json.Marshal(res.Content)
		return text("sampled " + res.Model + " " + string(b))
	})
	s.AddTool(mcp.NewTool("addtool"), func(ctx context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		s.AddTool(mcp.NewTool("added"), func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) { return text("added") })
		return text("ok")
	})
	s.AddTool(mcp.NewTool("env"), func(ctx context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		wd, _ := os.Getwd()
		return text(os.Getenv("FOLDPROXY_TEST_VAR") + "|" + wd)
	})
	s.AddTool(mcp.NewTool("stderr"), func(ctx context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		fmt.Fprintln(os.Stderr, "hello stderr")
		return text("ok")
	})
	s.AddTool(mcp.NewTool("diesoon"), func(ctx context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		go func() {
			time.Sleep(100 * time.Millisecond)
			os.Exit(4)
		}()
		return text("ok")
	})
	for i := range 3 {
		uri := fmt.Sprintf("test://r%d", i)
		s.AddResource(mcp.NewResource(uri, fmt.Sprintf("r%d", i)), func(ctx context.Context, r mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
			return []mcp.ResourceContents{mcp.TextResourceContents{URI: uri, Text: "content"}}, nil
		})
		s.AddPrompt(mcp.NewPrompt(fmt.Sprintf("p%d", i)), func(ctx context.Context, r mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
			return mcp.NewGetPromptResult("p", nil), nil
		})
	}
	s.AddResourceTemplate(mcp.NewResourceTemplate("test://t/{id}", "t"), func(ctx context.Context, r mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
		return nil, nil
	})
	return s
}

// Exact bytes the raw server sends, which tests compare byte for byte.
const (
	rawInitResult = `{"protocolVersion":"2025-06-18","capabilities":{"tools":{"listChanged":false}},"serverInfo":{"name":"raw","version":"0"},"instructions":"raw server"}`
	rawTool1      = `{ "name": "a",  "inputSchema": {"type":"object","properties":{"n":{"type":"number","default":1.50}}} }`
	rawTool2      = `{"name":"b","inputSchema":{"type":"object"},"z":1e3}`
	rawCallResult = `{ "content" : [ {"type":"text","text":"x\u00e9"} ], "z": 1.50, "a": 1e3, "_meta": {"k":[true,null]} }`
	rawErrorData  = `{"why": "because",  "n": 2}`
	// rawExact is what JSON encoders change: an integer beyond 2^53, HTML
	// characters, keys out of order, odd whitespace, unicode escapes.
	rawExact = `{"z":9007199254740993, "a" :"<&>",	"m":"\u00e9\u2028\ud83d\ude00\/","n":[1.0,-0,1E+2]}`
)

// serveRaw is a line-by-line JSON-RPC server written by hand, so that tests
// know every byte it sends. It declares only tools, lists them in two
// pages, answers tools/call with rawCallResult, "notify" with three
// progress notifications and a log message before its result, "fail" with
// a JSON-RPC error carrying rawErrorData, "pingme" by pinging the client first, and
// "seen" with every method and id it has received.
func serveRaw() {
	var mu sync.Mutex
	out := bufio.NewWriter(os.Stdout)
	write := func(s string) {
		mu.Lock()
		defer mu.Unlock()
		out.WriteString(s + "\n")
		out.Flush()
	}
	var seen []string
	big := map[int]string{}
	var pendingPing json.RawMessage  // id of the pingme request awaiting the client's pong
	var pendingExact json.RawMessage // id of the exact request awaiting the client's answer
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	for in.Scan() {
		var msg struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
			Result json.RawMessage `json:"result"`
		}
		if json.Unmarshal(in.Bytes(), &msg) != nil {
			continue
		}
		if msg.Method == "" {
			if string(msg.ID) == `"srv-exact"` && pendingExact != nil {
				// The client's answer to the exact request goes back in
				// an error's data, as a string of the line it wrote.
				b, _ := json.Marshal(string(in.Bytes()))
				write(`{"jsonrpc":"2.0","id":` + string(pendingExact) + `,"error":{"message":"m <&>\u00e9", "code":-32002,"data":{"line":` + string(b) + `,"x":` + rawExact + `}}}`)
				pendingExact = nil
				continue
			}
			// The client's answer to our ping.
			if pendingPing != nil {
				b, _ := json.Marshal(string(in.Bytes()))
				write(`{"jsonrpc":"2.0","id":` + string(pendingPing) + `,"result":{"pong":` + string(b) + `}}`)
				pendingPing = nil
			}
			continue
		}
		seen = append(seen, msg.Method+" "+string(msg.ID))
		if msg.ID == nil {
			continue
		}
		id := string(msg.ID)
		switch msg.Method {
		case "initialize":
			write(`{"jsonrpc":"2.0","id":` + id + `,"result":` + rawInitResult + `}`)
		case "tools/list":
			if strings.Contains(string(msg.Params), `"p2"`) {
				write(`{"jsonrpc":"2.0","id":` + id + `,"result":{"tools":[` + rawTool2 + `]}}`)
			} else {
				write(`{"jsonrpc":"2.0","id":` + id + `,"result":{"tools":[` + rawTool1 + `],"nextCursor":"p2"}}`)
			}
		case "tools/call":
			write(`{"jsonrpc":"2.0","id":` + id + `,"result":` + rawCallResult + `}`)
		case "notify":
			var p struct {
				Meta struct {
					Token json.RawMessage `json:"progressToken"`
				} `json:"_meta"`
			}
			_ = json.Unmarshal(msg.Params, &p)
			for i := 1; i <= 3; i++ {
				write(fmt.Sprintf(`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":%s,"progress":%d,"total":3}}`, p.Meta.Token, i))
			}
			write(`{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"notified"}}`)
			write(`{"jsonrpc":"2.0","id":` + id + `,"result":{"content":[{"type":"text","text":"notified"}]}}`)
		case "fail":
			write(`{"jsonrpc":"2.0","id":` + id + `,"error":{"code":-32001,"message":"nope","data":` + rawErrorData + `}}`)
		case "big":
			// A result of about n bytes of text, for the benchmarks.
			var p struct {
				N int `json:"n"`
			}
			_ = json.Unmarshal(msg.Params, &p)
			if big[p.N] == "" {
				line := "line of tool output <&> \u00e9\n"
				text, _ := json.Marshal(strings.Repeat(line, p.N/len(line)+1)[:p.N])
				big[p.N] = `{"content":[{"type":"text","text":` + string(text) + `}],"isError":false}`
			}
			write(`{"jsonrpc":"2.0","id":` + id + `,"result":` + big[p.N] + `}`)
		case "exact":
			pendingExact = msg.ID
			write(`{"jsonrpc":"2.0","method":"notifications/message","params":` + rawExact + `}`)
			write(`{"jsonrpc":"2.0","id":"srv-exact","method":"sampling/createMessage","params":` + rawExact + `}`)
		case "pingme":
			pendingPing = msg.ID
			write(`{"jsonrpc":"2.0","id":"srv-1","method":"ping"}`)
		case "seen":
			b, _ := json.Marshal(seen)
			write(`{"jsonrpc":"2.0","id":` + id + `,"result":{"seen":` + string(b) + `}}`)
		default:
			write(`{"jsonrpc":"2.0","id":` + id + `,"error":{"code":-32601,"message":"method not found"}}`)
		}
	}
}
