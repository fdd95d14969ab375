package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/foldproxy/foldproxy/e2e/cost"
	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
)

// dataRel is the trajectory file, relative to the repository root.
const dataRel = "e2e/testdata/trajectories/swe-dev.jsonl.gz"

// protocolVersion is what the bench clients ask for: the newest version
// with the initialize handshake, as in the e2e tests.
const protocolVersion = mcp.LATEST_LEGACY_PROTOCOL_VERSION

// env is what every section shares: the repository, the binaries built for
// this run, a scratch folder and the logger.
type env struct {
	repo   string // repository root (holds go.mod)
	data   string // the trajectory file
	tmp    string // scratch folder, removed at the end
	proxy  string // foldproxy built with -tags gore2regex
	replay string // the replay helper server
	model  string // the scripted model server (e2e/servers/model)
	relay  string // the bare byte-copying stdio relay (e2e/servers/relay)
	fast   string // the fast stdio server of realistic text (e2e/servers/fast)
	// base is foldproxy built from another worktree (-base), measured
	// beside this one in the overhead, archive and start-up sections; ""
	// when none.
	base     string
	baseRepo string // the worktree base is built from
	node     string // e2e/node_modules/node/bin/node, "" when absent
	fsScript string // server-filesystem's entry point, "" when absent
	log      *slog.Logger
	quick    bool
	rounds   int
}

// findRepo returns the folder holding go.mod, searched upwards from the
// working directory.
func findRepo() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		if filepath.Dir(dir) == dir {
			return "", fmt.Errorf("no go.mod above %s: run the bench from inside the repository", wd)
		}
	}
}

// goBuild runs "go build -o out args..." in the repository root.
func goBuild(ctx context.Context, repo, out string, args ...string) error {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("finding the go command: %w", err)
	}
	cmd := exec.CommandContext(ctx, goBin, append([]string{"build", "-o", out}, args...)...)
	cmd.Dir = repo
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build -o %s %s: %w\n%s", out, strings.Join(args, " "), err, buf.String())
	}
	return nil
}

// buildBinaries builds foldproxy (with the gore2regex tag, as make build
// does) and the replay server into e.tmp.
func (e *env) buildBinaries(ctx context.Context) error {
	e.proxy = filepath.Join(e.tmp, "foldproxy")
	e.replay = filepath.Join(e.tmp, "replay")
	e.model = filepath.Join(e.tmp, "model")
	e.relay = filepath.Join(e.tmp, "relay")
	e.fast = filepath.Join(e.tmp, "fast")
	var wg sync.WaitGroup
	var perr, rerr, merr, lerr, ferr, berr error
	wg.Go(func() { perr = goBuild(ctx, e.repo, e.proxy, "-tags", "gore2regex", "./cmd/foldproxy") })
	wg.Go(func() { rerr = goBuild(ctx, e.repo, e.replay, "./e2e/servers/replay") })
	wg.Go(func() { merr = goBuild(ctx, e.repo, e.model, "./e2e/servers/model") })
	wg.Go(func() { lerr = goBuild(ctx, e.repo, e.relay, "./e2e/servers/relay") })
	wg.Go(func() { ferr = goBuild(ctx, e.repo, e.fast, "./e2e/servers/fast") })
	if e.baseRepo != "" {
		e.base = filepath.Join(e.tmp, "foldproxy-base")
		wg.Go(func() { berr = goBuild(ctx, e.baseRepo, e.base, "-tags", "gore2regex", "./cmd/foldproxy") })
	}
	wg.Wait()
	return errors.Join(perr, rerr, merr, lerr, ferr, berr)
}

// loadOutputs returns the output of every step of the trajectories.
func loadOutputs(path string) ([]string, error) {
	trajs, err := cost.LoadTrajectories(path)
	if err != nil {
		return nil, err
	}
	var outs []string
	for _, steps := range trajs {
		for _, s := range steps {
			outs = append(outs, s.Output)
		}
	}
	if len(outs) == 0 {
		return nil, fmt.Errorf("%s: no steps", path)
	}
	return outs, nil
}

// toolResult wraps a text as the result object of tools/call, as an
// upstream built on mcp-go sends it.
func toolResult(text string) json.RawMessage {
	b, _ := json.Marshal(map[string]any{
		"content": []map[string]string{{"type": "text", "text": text}},
	})
	return b
}

// writeConfig writes a foldproxy configuration file and returns its path.
func (e *env) writeConfig(name string, servers map[string]any, settings map[string]any) (string, error) {
	doc := map[string]any{"mcpServers": servers}
	if settings != nil {
		doc["foldproxy"] = settings
	}
	data, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return "", err
	}
	p := filepath.Join(e.tmp, name)
	return p, os.WriteFile(p, data, 0o600)
}

// replayEntry is an mcpServers entry running the replay server.
func (e *env) replayEntry() map[string]any {
	return map[string]any{"command": e.replay, "args": []string{"-data", e.data}}
}

// benchSettings are foldproxy settings that keep the limits out of the way
// of the measurements: creation rate and active-branch limits high, the
// audit log on (the real path) but never fsynced per record (the default,
// "interval").
func benchSettings() map[string]any {
	return map[string]any{
		"fold": map[string]any{
			"createsPerMinute":     100000,
			"maxActivePerSession":  1000,
			"maxActivePerInstance": 100000,
		},
	}
}

// stateDir returns a fresh state folder for one foldproxy process.
func (e *env) stateDir(name string) (string, error) {
	return os.MkdirTemp(e.tmp, "state-"+name+"-")
}

// mcpPeer is an mcp-go client over stdio to a process of its own.
type mcpPeer struct {
	*client.Client
	name   string
	cmd    *exec.Cmd
	stderr *tailBuffer
	stop   context.CancelFunc
}

// startStdio runs command as a stdio MCP server (in its own process group)
// and returns a started but not yet initialized client.
func startStdio(name, command string, args ...string) (*mcpPeer, error) {
	p := &mcpPeer{name: name, stderr: &tailBuffer{max: 16 << 10}}
	tr := transport.NewStdioWithOptions(command, nil, args, transport.WithCommandFunc(
		func(ctx context.Context, command string, env []string, args []string) (*exec.Cmd, error) {
			cmd := exec.CommandContext(ctx, command, args...)
			cmd.Env = append(os.Environ(), env...)
			cmd.Stderr = p.stderr
			ownGroup(cmd)
			cmd.Cancel = func() error { return killGroup(cmd) }
			cmd.WaitDelay = 5 * time.Second
			p.cmd = cmd
			return cmd, nil
		}))
	p.Client = client.NewClient(tr, client.WithProtocolVersion(protocolVersion))
	// The life context outlives every request: the transport kills its
	// process when the context given to Start ends.
	life, stop := context.WithCancel(context.Background())
	p.stop = stop
	// Start must come before Initialize.
	if err := p.Start(life); err != nil {
		stop()
		return nil, fmt.Errorf("%s: start: %w", name, err)
	}
	return p, nil
}

// initialize performs the MCP handshake.
func (p *mcpPeer) initialize(ctx context.Context) error {
	_, err := p.Initialize(ctx, mcp.InitializeRequest{Params: mcp.InitializeParams{
		ProtocolVersion: protocolVersion,
		ClientInfo:      mcp.Implementation{Name: "foldproxy-bench", Version: "1.0.0"},
	}})
	if err != nil {
		return fmt.Errorf("%s: initialize: %w%s", p.name, err, p.stderr.tail())
	}
	return nil
}

// connectStdio starts and initializes a stdio client.
func connectStdio(ctx context.Context, name, command string, args ...string) (*mcpPeer, error) {
	p, err := startStdio(name, command, args...)
	if err != nil {
		return nil, err
	}
	if err := p.initialize(ctx); err != nil {
		p.close()
		return nil, err
	}
	return p, nil
}

// close ends the client: stdin is closed so that the server exits on its
// own (foldproxy then stops its upstreams), and whatever is left of the
// process group is killed.
func (p *mcpPeer) close() {
	done := make(chan struct{})
	go func() { _ = p.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
	}
	p.stop()
	if p.cmd != nil && p.cmd.Process != nil {
		_ = killGroup(p.cmd)
	}
}

// pid returns the server's process id.
func (p *mcpPeer) pid() int {
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// call calls a tool and fails on a JSON-RPC error or a tool error.
func (p *mcpPeer) call(ctx context.Context, name string, args map[string]any) (*mcp.CallToolResult, error) {
	if args == nil {
		args = map[string]any{}
	}
	res, err := p.CallTool(ctx, mcp.CallToolRequest{Params: mcp.CallToolParams{Name: name, Arguments: args}})
	if err != nil {
		return nil, fmt.Errorf("%s: %s: %w%s", p.name, name, err, p.stderr.tail())
	}
	if res.IsError {
		return res, fmt.Errorf("%s: %s: tool error: %s", p.name, name, truncate(resultText(res), 300))
	}
	return res, nil
}

// resultText joins the text contents of a tool result.
func resultText(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if tc, ok := mcp.AsTextContent(c); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// tailBuffer keeps the last max bytes written to it, for error messages.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

// tail returns the buffered stderr as a suffix for an error message.
func (t *tailBuffer) tail() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.buf) == 0 {
		return ""
	}
	s := string(t.buf)
	if len(s) > 2000 {
		s = s[len(s)-2000:]
	}
	return "\n--- stderr (tail) ---\n" + s
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// procStatus reads fields (VmRSS, VmHWM...) of /proc/<pid>/status, in bytes.
func procStatus(pid int, fields ...string) (map[string]int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for _, line := range strings.Split(string(data), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		for _, f := range fields {
			if k == f {
				var n int64
				if _, err := fmt.Sscanf(strings.TrimSpace(v), "%d kB", &n); err == nil {
					out[f] = n << 10
				}
			}
		}
	}
	for _, f := range fields {
		if _, ok := out[f]; !ok {
			return nil, fmt.Errorf("/proc/%d/status: no %s", pid, f)
		}
	}
	return out, nil
}

// timeCalls calls tool(bytes) n times in a row and returns each latency.
func timeCalls(ctx context.Context, p *mcpPeer, tool string, bytes, n int) ([]time.Duration, error) {
	out := make([]time.Duration, 0, n)
	args := map[string]any{"bytes": bytes}
	for range n {
		t0 := time.Now()
		r, err := p.call(ctx, tool, args)
		d := time.Since(t0)
		if err != nil {
			return nil, err
		}
		if got := len(resultText(r)); got != bytes {
			return nil, fmt.Errorf("%s: %s(%d) returned %d bytes of text", p.name, tool, bytes, got)
		}
		out = append(out, d)
	}
	return out, nil
}
