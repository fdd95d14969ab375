// Command replay is an MCP stdio server that serves recorded coding-agent
// trajectories as tool results, so that foldproxy's tests and benchmarks run
// on real tool output rather than synthetic text.
//
// Tools:
//   - run(trajectory, step): the recorded output of that step, as one text content.
//   - list(): every trajectory id with its step count, as JSON text.
//   - emit(bytes, kind): a generated text of exactly that many bytes
//     (10 B, 1 KB, 100 KB, 1 MB, 10 MB for the benchmark table).
//
// The data file is gzip-compressed JSONL, one trajectory a line:
// {"id": "...", "task": "...", "steps": [{"command": "...", "returncode": 0, "output": "..."}]}.
// By default it is e2e/testdata/trajectories/swe-dev.jsonl.gz relative to
// the repository root (the folder holding go.mod, searched upwards from the
// working directory).
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
	"path/filepath"
	"sort"
	"strings"

	"github.com/foldproxy/foldproxy/e2e/trajectory"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// defaultData is the data file, relative to the repository root.
const defaultData = trajectory.File

// maxEmit bounds emit's size argument.
const maxEmit = 64 << 20

func main() {
	data := flag.String("data", defaultData, "gzip JSONL trajectories; a relative path is resolved against the repository root (the folder with go.mod above the working directory)")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	path, err := resolveData(*data)
	if err != nil {
		log.Error("replay: locating the data file", "err", err)
		os.Exit(1)
	}
	trajs, err := trajectory.Load(path)
	if err != nil {
		log.Error("replay: loading trajectories", "err", err)
		os.Exit(1)
	}
	log.Info("replay: loaded trajectories", "path", path, "count", len(trajs))
	if err := server.ServeStdio(newServer(trajs)); err != nil {
		log.Error("replay: serving stdio", "err", err)
		os.Exit(1)
	}
}

// resolveData makes a relative data path absolute against the repository
// root. An absolute path, or a relative one that exists from the working
// directory, is used as it is.
func resolveData(p string) (string, error) {
	if filepath.IsAbs(p) {
		return p, nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("working directory: %w", err)
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, p), nil
		}
		if filepath.Dir(dir) == dir {
			break
		}
	}
	return "", fmt.Errorf("data path %q is relative and no go.mod was found above %s: pass -data with an absolute path", p, wd)
}

type replay struct {
	byID map[string]trajectory.Trajectory
	ids  []string
}

func newServer(trajs []trajectory.Trajectory) *server.MCPServer {
	r := &replay{byID: make(map[string]trajectory.Trajectory, len(trajs))}
	for _, t := range trajs {
		r.byID[t.ID] = t
		r.ids = append(r.ids, t.ID)
	}
	sort.Strings(r.ids)
	s := server.NewMCPServer("replay", "1.0.0", server.WithToolCapabilities(false))
	s.AddTool(mcp.NewTool("run",
		mcp.WithDescription("Replays one recorded shell step of a coding-agent trajectory and returns its output."),
		mcp.WithString("trajectory", mcp.Required(), mcp.Description("trajectory id, from list")),
		mcp.WithNumber("step", mcp.Required(), mcp.Description("step index, from 0")),
	), r.run)
	s.AddTool(mcp.NewTool("list",
		mcp.WithDescription("Lists the recorded trajectories: id and number of steps."),
	), r.list)
	s.AddTool(mcp.NewTool("emit",
		mcp.WithDescription("Returns a generated text of exactly the given number of bytes."),
		mcp.WithNumber("bytes", mcp.Required(), mcp.Description(fmt.Sprintf("size in bytes, 0 to %d", maxEmit))),
		mcp.WithString("kind", mcp.Description("text (default), log, json or code"), mcp.Enum(kinds...)),
	), r.emit)
	return s
}

func (r *replay) run(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	id := req.GetString("trajectory", "")
	t, ok := r.byID[id]
	if !ok {
		return mcp.NewToolResultErrorf("run: unknown trajectory %q (call list for the ids)", id), nil
	}
	step := req.GetFloat("step", -1)
	if step < 0 || step != float64(int(step)) || int(step) >= len(t.Steps) {
		return mcp.NewToolResultErrorf("run: step %v of trajectory %q is out of range: it has steps 0 to %d", step, id, len(t.Steps)-1), nil
	}
	return mcp.NewToolResultText(t.Steps[int(step)].Output), nil
}

// Entry is one line of list's answer.
type Entry struct {
	ID    string `json:"id"`
	Steps int    `json:"steps"`
}

func (r *replay) list(_ context.Context, _ mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	out := make([]Entry, 0, len(r.ids))
	for _, id := range r.ids {
		out = append(out, Entry{ID: id, Steps: len(r.byID[id].Steps)})
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, fmt.Errorf("list: encoding: %w", err)
	}
	return mcp.NewToolResultText(string(b)), nil
}

func (r *replay) emit(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	n := req.GetFloat("bytes", -1)
	if n < 0 || n > maxEmit || n != float64(int(n)) {
		return mcp.NewToolResultErrorf("emit: bytes must be a whole number from 0 to %d, got %v", maxEmit, n), nil
	}
	kind := req.GetString("kind", "text")
	text, err := generate(int(n), kind)
	if err != nil {
		return mcp.NewToolResultError("emit: " + err.Error()), nil
	}
	return mcp.NewToolResultText(text), nil
}

var kinds = []string{"text", "log", "json", "code"}

// generate returns exactly n bytes of ASCII text of the given kind. The
// output is deterministic: the same n and kind give the same text.
func generate(n int, kind string) (string, error) {
	var line func(i int) string
	switch kind {
	case "text":
		words := strings.Fields("the agent reads a file then runs the tests and folds the branch back into a short summary of what it found")
		line = func(i int) string {
			var b strings.Builder
			for j := 0; j < 12; j++ {
				if j > 0 {
					b.WriteByte(' ')
				}
				b.WriteString(words[(i*7+j*3)%len(words)])
			}
			b.WriteString(".\n")
			return b.String()
		}
	case "log":
		line = func(i int) string {
			return fmt.Sprintf("2025-01-01T00:%02d:%02d.%03dZ INFO worker=%d request served path=/api/v1/items/%d status=200 bytes=%d\n", i/60%60, i%60, i%1000, i%8, i, i*37%9973)
		}
	case "json":
		line = func(i int) string {
			return fmt.Sprintf("{\"id\":%d,\"name\":\"item-%d\",\"tags\":[\"a%d\",\"b%d\"],\"score\":%d.%02d}\n", i, i, i%5, i%7, i%100, i%97)
		}
	case "code":
		line = func(i int) string {
			return fmt.Sprintf("func step%d(x int) int {\n\tif x > %d {\n\t\treturn x - %d\n\t}\n\treturn x + %d\n}\n\n", i, i%50, i%13, i%29)
		}
	default:
		return "", fmt.Errorf("unknown kind %q: want one of %s", kind, strings.Join(kinds, ", "))
	}
	var b strings.Builder
	b.Grow(n)
	for i := 0; b.Len() < n; i++ {
		l := line(i)
		if rest := n - b.Len(); len(l) > rest {
			l = l[:rest]
		}
		b.WriteString(l)
	}
	return b.String(), nil
}
