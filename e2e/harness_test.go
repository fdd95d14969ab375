package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
)

// protocolVersion is the version the test clients ask for. It is the newest
// one with the initialize handshake, the version the npm reference servers
// and foldproxy's relays (sampling, elicitation, roots, logging) speak.
const protocolVersion = mcp.LATEST_LEGACY_PROTOCOL_VERSION

// Paths filled in by TestMain.
var (
	e2eDir   string // this package's folder
	repoDir  string // the repository root
	buildDir string // the binaries TestMain built

	// proxyBuildErr is why bin/foldproxy did not build, if it did not:
	// every test that needs the binary fails with it, the others still run.
	proxyBuildErr  error
	helperBuildErr error
)

// helperServers are the Go helper upstreams under servers/.
var helperServers = []string{"replay", "leaky", "flaky", "model", "script", "intruder"}

// foldTools are foldproxy's own tools (the fold tools, the checkpoint
// tools and the memory tools, on by default), listed beside the upstream
// tools.
var foldTools = []string{"branch_create", "branch_return", "branch_status", "branch_recall",
	"checkpoint_save", "checkpoint_list", "checkpoint_resume", "memory_record", "memory_search", "remediation_record"}

func TestMain(m *testing.M) { os.Exit(testMain(m)) }

func testMain(m *testing.M) int {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	wd, err := os.Getwd()
	if err != nil {
		log.Error("e2e: working directory", "err", err)
		return 1
	}
	e2eDir = wd
	repoDir = filepath.Dir(wd)
	dir, err := os.MkdirTemp("", "foldproxy-e2e-")
	if err != nil {
		log.Error("e2e: temporary folder for the binaries", "err", err)
		return 1
	}
	defer os.RemoveAll(dir)
	buildDir = dir

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	// The tag foldproxy_e2e adds the test hooks of cmd/foldproxy/testhooks_e2e.go
	// (read from the environment, which no other test sets).
	proxyBuildErr = goBuild(ctx, filepath.Join(dir, "foldproxy"), "-tags", "gore2regex foldproxy_e2e", "./cmd/foldproxy")
	if proxyBuildErr != nil {
		log.Warn("e2e: foldproxy did not build; the tests that need it will fail", "err", proxyBuildErr)
	}
	pkgs := make([]string, 0, len(helperServers))
	for _, s := range helperServers {
		pkgs = append(pkgs, "./e2e/servers/"+s)
	}
	helperBuildErr = goBuild(ctx, dir+string(filepath.Separator), pkgs...)
	if helperBuildErr != nil {
		log.Warn("e2e: the helper servers did not build; the tests that need them will fail", "err", helperBuildErr)
	}
	return m.Run()
}

// goBuild runs "go build -o out args..." in the repository root.
func goBuild(ctx context.Context, out string, args ...string) error {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("finding the go command: %w", err)
	}
	cmd := exec.CommandContext(ctx, goBin, append([]string{"build", "-o", out}, args...)...)
	cmd.Dir = repoDir
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build -o %s %s: %w\n%s", out, strings.Join(args, " "), err, buf.String())
	}
	return nil
}

// proxyBin returns the foldproxy binary TestMain built.
func proxyBin(t testing.TB) string {
	t.Helper()
	if proxyBuildErr != nil {
		t.Fatalf("the foldproxy binary did not build:\n%v", proxyBuildErr)
	}
	return filepath.Join(buildDir, "foldproxy")
}

// helperBin returns the binary of one of the helper servers under servers/.
func helperBin(t testing.TB, name string) string {
	t.Helper()
	if helperBuildErr != nil {
		t.Fatalf("the helper servers did not build:\n%v", helperBuildErr)
	}
	p := filepath.Join(buildDir, name)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("helper server %q: %v (known helpers: %v)", name, err, helperServers)
	}
	return p
}

// nodeModules returns e2e/node_modules, failing the test when npm ci has
// not been run.
func nodeModules(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(e2eDir, "node_modules")
	if _, err := os.Stat(filepath.Join(dir, ".package-lock.json")); err != nil {
		t.Fatalf("%s is missing or incomplete (%v): run npm ci --prefix e2e", dir, err)
	}
	return dir
}

// nodeBin returns the Node 22 binary installed by the "node" npm package.
// Every npm server and tool of the tests runs on it, whatever node is on PATH.
func nodeBin(t testing.TB) string {
	t.Helper()
	p := filepath.Join(nodeModules(t), "node", "bin", "node")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("node binary %s: %v: run npm ci --prefix e2e", p, err)
	}
	return p
}

// npmBin returns an executable from e2e/node_modules/.bin.
func npmBin(t testing.TB, name string) string {
	t.Helper()
	p := filepath.Join(nodeModules(t), ".bin", name)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s: %v: run npm ci --prefix e2e", p, err)
	}
	return p
}

// npmScript returns the path of a file inside an npm package, failing
// the test when it is missing.
func npmScript(t testing.TB, pkg, rel string) string {
	t.Helper()
	p := filepath.Join(nodeModules(t), filepath.FromSlash(pkg), filepath.FromSlash(rel))
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s: %v: run npm ci --prefix e2e", p, err)
	}
	return p
}

// everythingScript is server-everything's entry point.
func everythingScript(t testing.TB) string {
	t.Helper()
	return npmScript(t, "@modelcontextprotocol/server-everything", "dist/index.js")
}

// filesystemScript is server-filesystem's entry point.
func filesystemScript(t testing.TB) string {
	t.Helper()
	return npmScript(t, "@modelcontextprotocol/server-filesystem", "dist/index.js")
}

// testContext returns a context that ends after d or shortly before the
// test's own deadline, whichever is first, and is cancelled at cleanup.
func testContext(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	deadline := time.Now().Add(d)
	if td, ok := deadlineOf(t); ok && td.Add(-5*time.Second).Before(deadline) {
		deadline = td.Add(-5 * time.Second)
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	t.Cleanup(cancel)
	return ctx
}

func deadlineOf(t testing.TB) (time.Time, bool) {
	if d, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		return d.Deadline()
	}
	return time.Time{}, false
}

// syncBuffer is a bytes.Buffer safe for concurrent use, for the output of
// child processes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// ownProcessGroup makes cmd the leader of a new process group, so that
// cleanup can end it with everything it started (an upstream's children
// included), and bounds how long Wait may block on its pipes.
func ownProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = 5 * time.Second
}

// killGroup kills cmd's process group. A group that is already gone is not
// an error.
func killGroup(cmd *exec.Cmd) error {
	if cmd.Process == nil {
		return nil
	}
	err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	if err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("killing process group %d: %w", cmd.Process.Pid, err)
	}
	return nil
}

// dumpOnFailure logs a process's captured output if the test failed.
func dumpOnFailure(t testing.TB, name string, out *syncBuffer) {
	t.Helper()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("---- output of %s ----\n%s\n---- end of %s ----", name, out.String(), name)
		}
	})
}

// process is a child process started by startProcess.
type process struct {
	name string
	cmd  *exec.Cmd
	out  *syncBuffer // stdout and stderr, interleaved
	done chan struct{}
	err  error // Wait's result, set before done is closed
}

// exited reports whether the process has ended.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// startProcess starts cmd in its own process group with its output captured,
// and ends the group when the test ends. The output is logged if the test
// fails.
func startProcess(t testing.TB, name string, cmd *exec.Cmd) *process {
	t.Helper()
	if cmd.Path == proxyBin(t) && len(cmd.Args) > 1 {
		awaitDaemonExit(t, cmd.Args[1:])
	}
	p := &process{name: name, cmd: cmd, out: &syncBuffer{}, done: make(chan struct{})}
	if cmd.Stdout == nil {
		cmd.Stdout = p.out
	}
	if cmd.Stderr == nil {
		cmd.Stderr = p.out
	}
	ownProcessGroup(cmd)
	dumpOnFailure(t, name, p.out)
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s (%s): %v", name, cmd.Path, err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		if err := killGroup(cmd); err != nil {
			t.Logf("%s: %v", name, err)
		}
		select {
		case <-p.done:
		case <-time.After(15 * time.Second):
			t.Errorf("%s (pid %d) did not exit 15s after SIGKILL", name, cmd.Process.Pid)
		}
	})
	return p
}

// freePort returns a loopback port that was free a moment ago.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("finding a free loopback port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// waitListening waits until addr accepts TCP connections, failing the test
// if p exits first or ctx ends.
func waitListening(ctx context.Context, t testing.TB, p *process, addr string) {
	t.Helper()
	for {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			conn.Close()
			return
		}
		select {
		case <-p.done:
			t.Fatalf("%s exited before listening on %s: %v", p.name, addr, p.err)
		case <-ctx.Done():
			t.Fatalf("%s did not listen on %s: %v (last dial error: %v)", p.name, addr, ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// writeConfig writes a foldproxy configuration file: a Claude Code
// mcpServers object and, when settings is not nil, foldproxy's own settings
// beside it. It returns the file's path.
func writeConfig(t testing.TB, servers map[string]any, settings map[string]any) string {
	t.Helper()
	doc := map[string]any{"mcpServers": servers}
	// A session's first tools/list waits at most foldproxy.readyWait
	// (500 ms) for upstreams that are starting. Tests that list once, right
	// after starting, wait for every upstream: a generous bound that is
	// never reached unless an upstream hangs (readiness_test.go tests the
	// default).
	if settings == nil {
		settings = map[string]any{}
	}
	if _, ok := settings["readyWait"]; !ok {
		settings = maps.Clone(settings)
		settings["readyWait"] = "60s"
	}
	// scrub.timeout (10 s by default) withholds a result whose scanning
	// and counting take longer: under the race detector on a loaded
	// machine a large result can. Tests that are not about that bound get
	// one that is never reached unless the scrubber hangs (the unit tests
	// of intercept drive the default with synctest).
	scrub, _ := settings["scrub"].(map[string]any)
	if _, ok := scrub["timeout"]; !ok {
		scrub = maps.Clone(scrub)
		if scrub == nil {
			scrub = map[string]any{}
		}
		scrub["timeout"] = "10m"
		settings = maps.Clone(settings)
		settings["scrub"] = scrub
	}
	doc["foldproxy"] = settings
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		t.Fatalf("encoding the config: %v", err)
	}
	return writeFile(t, "mcp.json", b)
}

// writeFile writes data to a new file in a fresh temporary folder.
func writeFile(t testing.TB, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatalf("writing %s: %v", p, err)
	}
	return p
}

// stdioEntry is an mcpServers entry for a stdio upstream.
func stdioEntry(command string, args ...string) map[string]any {
	if args == nil {
		args = []string{}
	}
	return map[string]any{"type": "stdio", "command": command, "args": args}
}

// urlEntry is an mcpServers entry for an "http" or "sse" upstream.
func urlEntry(typ, url string) map[string]any {
	return map[string]any{"type": typ, "url": url}
}

// everythingStdioEntry runs server-everything over stdio.
func everythingStdioEntry(t testing.TB) map[string]any {
	t.Helper()
	return stdioEntry(nodeBin(t), everythingScript(t), "stdio")
}

// startEverythingHTTP starts server-everything in "sse" or "streamableHttp"
// mode on a free loopback port and returns the URL a client connects to:
// http://127.0.0.1:PORT/sse or http://127.0.0.1:PORT/mcp.
func startEverythingHTTP(t testing.TB, mode string) string {
	t.Helper()
	var path string
	switch mode {
	case "sse":
		path = "/sse"
	case "streamableHttp":
		path = "/mcp"
	default:
		t.Fatalf("startEverythingHTTP: unknown mode %q: want sse or streamableHttp", mode)
	}
	port := freePort(t)
	cmd := exec.Command(nodeBin(t), everythingScript(t), mode)
	cmd.Env = append(os.Environ(), fmt.Sprintf("PORT=%d", port))
	p := startProcess(t, "server-everything "+mode, cmd)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	waitListening(testContext(t, 60*time.Second), t, p, addr)
	return "http://" + addr + path
}

// agent plays the user and the model behind the test client: it answers
// sampling, elicitation and roots requests and remembers what it was asked.
// Its methods are safe for concurrent use.
type agent struct {
	mu       sync.Mutex
	roots    []mcp.Root
	sampled  []mcp.CreateMessageRequest
	elicited []mcp.ElicitationRequest
	rootsN   int
}

// samplingReply is what the agent's model answers to every sampling request.
const samplingReply = "e2e-sampled-reply-7f3a"

// elicitedName is the name the agent's user gives in every elicitation.
const elicitedName = "E2E Tester 51c2"

var (
	_ client.SamplingHandler    = (*agent)(nil)
	_ client.ElicitationHandler = (*agent)(nil)
	_ client.RootsHandler       = (*agent)(nil)
)

func newAgent(roots ...mcp.Root) *agent { return &agent{roots: roots} }

func (a *agent) CreateMessage(_ context.Context, req mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
	a.mu.Lock()
	a.sampled = append(a.sampled, req)
	a.mu.Unlock()
	return &mcp.CreateMessageResult{
		SamplingMessage: mcp.SamplingMessage{Role: mcp.RoleAssistant, Content: mcp.NewTextContent(samplingReply)},
		Model:           "e2e-model",
		StopReason:      "endTurn",
	}, nil
}

func (a *agent) Elicit(_ context.Context, req mcp.ElicitationRequest) (*mcp.ElicitationResult, error) {
	a.mu.Lock()
	a.elicited = append(a.elicited, req)
	a.mu.Unlock()
	return &mcp.ElicitationResult{ElicitationResponse: mcp.ElicitationResponse{
		Action:  mcp.ElicitationResponseActionAccept,
		Content: map[string]any{"name": elicitedName, "check": true},
	}}, nil
}

func (a *agent) ListRoots(context.Context, mcp.ListRootsRequest) (*mcp.ListRootsResult, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.rootsN++
	roots := append([]mcp.Root{}, a.roots...)
	return &mcp.ListRootsResult{Roots: roots}, nil
}

// samplingRequests returns the sampling requests seen so far.
func (a *agent) samplingRequests() []mcp.CreateMessageRequest {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]mcp.CreateMessageRequest{}, a.sampled...)
}

// elicitationRequests returns the elicitation requests seen so far.
func (a *agent) elicitationRequests() []mcp.ElicitationRequest {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]mcp.ElicitationRequest{}, a.elicited...)
}

// note is one notification a client received.
type note struct {
	Method string          `json:"method"`
	Params json.RawMessage `json:"params,omitempty"`
}

// recorder keeps every notification a client receives and lets a test wait
// for the ones it expects. Its methods are safe for concurrent use.
type recorder struct {
	mu      sync.Mutex
	notes   []note
	changed chan struct{} // closed and replaced on every add
}

func newRecorder() *recorder { return &recorder{changed: make(chan struct{})} }

func (r *recorder) add(n mcp.JSONRPCNotification) {
	params, err := json.Marshal(n.Params)
	if err != nil {
		params = []byte(fmt.Sprintf("%q", "unencodable params: "+err.Error()))
	}
	r.mu.Lock()
	r.notes = append(r.notes, note{Method: n.Method, Params: params})
	close(r.changed)
	r.changed = make(chan struct{})
	r.mu.Unlock()
}

// all returns the notifications received so far.
func (r *recorder) all() []note {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]note{}, r.notes...)
}

// waitFor waits until at least n received notifications match, and returns
// the matching ones. It returns an error naming what it saw when ctx ends.
func (r *recorder) waitFor(ctx context.Context, n int, match func(note) bool) ([]note, error) {
	for {
		r.mu.Lock()
		var got []note
		for _, x := range r.notes {
			if match(x) {
				got = append(got, x)
			}
		}
		changed := r.changed
		total := len(r.notes)
		r.mu.Unlock()
		if len(got) >= n {
			return got, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return got, fmt.Errorf("waited for %d matching notifications, got %d of %d received (%s): %w", n, len(got), total, summarize(r.all()), ctx.Err())
		}
	}
}

func summarize(notes []note) string {
	var parts []string
	for i, n := range notes {
		if i == 20 {
			parts = append(parts, fmt.Sprintf("... %d more", len(notes)-i))
			break
		}
		parts = append(parts, n.Method+" "+truncate(string(n.Params), 200))
	}
	return strings.Join(parts, "; ")
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// peer is a connected, initialized mcp-go client with the agent behind it
// and a recorder of its notifications.
type peer struct {
	*client.Client
	name   string
	agent  *agent
	notes  *recorder
	rawSeq atomic.Int64
}

// connect starts and initializes an mcp-go client on tr. The client answers
// sampling, elicitation and roots requests through a (nil: a fresh agent
// without roots), and is closed when the test ends.
func connect(t testing.TB, name string, tr transport.Interface, a *agent) *peer {
	t.Helper()
	if a == nil {
		a = newAgent()
	}
	p := &peer{name: name, agent: a, notes: newRecorder()}
	p.Client = client.NewClient(tr,
		client.WithSamplingHandler(a),
		client.WithElicitationHandler(a),
		client.WithRootsHandler(a),
		client.WithProtocolVersion(protocolVersion),
	)
	p.OnNotification(p.notes.add)
	// The life context outlives every request: a stdio transport kills its
	// process when the context given to Start ends.
	life, stop := context.WithCancel(context.Background())
	// Start must come before Initialize, or the client drops notifications
	// and server-to-client requests.
	if err := p.Start(life); err != nil {
		stop()
		t.Fatalf("%s: starting the client: %v", name, err)
	}
	t.Cleanup(func() {
		var exit *exec.ExitError
		if err := p.Close(); err != nil && !errors.As(err, &exit) {
			t.Logf("%s: closing the client: %v", name, err)
		}
		stop()
	})
	ctx := testContext(t, 60*time.Second)
	_, err := p.Initialize(ctx, mcp.InitializeRequest{Params: mcp.InitializeParams{
		ProtocolVersion: protocolVersion,
		ClientInfo:      mcp.Implementation{Name: "foldproxy-e2e", Version: "1.0.0"},
	}})
	if err != nil {
		t.Fatalf("%s: initialize: %v", name, err)
	}
	return p
}

// stdioTransport runs command as a stdio MCP server in its own process
// group, its stderr captured and logged if the test fails.
func stdioTransport(t testing.TB, name, command string, args ...string) *transport.Stdio {
	t.Helper()
	if command == proxyBin(t) {
		awaitDaemonExit(t, args)
	}
	stderr := &syncBuffer{}
	dumpOnFailure(t, name+" stderr", stderr)
	var started *exec.Cmd
	t.Cleanup(func() {
		if started != nil {
			if err := killGroup(started); err != nil {
				t.Logf("%s: %v", name, err)
			}
		}
	})
	return transport.NewStdioWithOptions(command, nil, args, transport.WithCommandFunc(
		func(ctx context.Context, command string, env []string, args []string) (*exec.Cmd, error) {
			cmd := exec.CommandContext(ctx, command, args...)
			cmd.Env = append(os.Environ(), env...)
			cmd.Stderr = stderr
			ownProcessGroup(cmd)
			cmd.Cancel = func() error { return killGroup(cmd) }
			started = cmd
			return cmd, nil
		}))
}

// directStdioClient talks to a stdio MCP server directly, without foldproxy.
func directStdioClient(t testing.TB, a *agent, command string, args ...string) *peer {
	t.Helper()
	name := "direct " + filepath.Base(command)
	if len(args) > 0 {
		name += " " + filepath.Base(args[0])
	}
	return connect(t, name, stdioTransport(t, name, command, args...), a)
}

// directHTTPClient talks streamable HTTP to url directly.
func directHTTPClient(t testing.TB, a *agent, url string) *peer {
	t.Helper()
	tr, err := transport.NewStreamableHTTP(url, transport.WithContinuousListening(), transport.WithHTTPTimeout(2*time.Minute))
	if err != nil {
		t.Fatalf("streamable HTTP client for %s: %v", url, err)
	}
	return connect(t, "http "+url, tr, a)
}

// directSSEClient talks to an SSE server (the 2024-11-05 transport) at url.
// mcp-go's SSE client does not answer server-to-client requests, so use it
// for requests and notifications only.
func directSSEClient(t testing.TB, a *agent, url string) *peer {
	t.Helper()
	tr, err := transport.NewSSE(url)
	if err != nil {
		t.Fatalf("SSE client for %s: %v", url, err)
	}
	return connect(t, "sse "+url, tr, a)
}

// startProxyStdio runs "foldproxy serve --config cfg --state DIR" as a stdio
// MCP server and returns a client connected to it. Its stderr is logged if
// the test fails.
func startProxyStdio(t testing.TB, cfg string, a *agent) *peer {
	t.Helper()
	bin := proxyBin(t)
	return connect(t, "foldproxy stdio", stdioTransport(t, "foldproxy", bin, "serve", "--config", cfg, "--state", t.TempDir()), a)
}

// startProxyHTTP runs "foldproxy serve --listen 127.0.0.1:PORT" on a free
// port, waits until it answers, and returns its MCP URL and a streamable
// HTTP client connected to it.
func startProxyHTTP(t testing.TB, cfg string, a *agent) (string, *peer) {
	t.Helper()
	url, _ := startProxyHTTPProcess(t, cfg)
	return url, directHTTPClient(t, a, url)
}

// startProxyHTTPProcess starts foldproxy's HTTP front and waits until it
// accepts connections; it returns the MCP URL and the process.
func startProxyHTTPProcess(t testing.TB, cfg string) (string, *process) {
	t.Helper()
	port := freePort(t)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	cmd := exec.Command(proxyBin(t), "serve", "--config", cfg, "--listen", addr, "--state", t.TempDir())
	p := startProcess(t, "foldproxy --listen "+addr, cmd)
	waitListening(testContext(t, 60*time.Second), t, p, addr)
	return "http://" + addr + "/mcp", p
}

// raw sends one request through the client's transport and returns the
// result exactly as it arrived, for byte-level comparisons.
func (p *peer) raw(ctx context.Context, method string, params any) (json.RawMessage, error) {
	id := fmt.Sprintf("raw-%d", p.rawSeq.Add(1))
	resp, err := p.GetTransport().SendRequest(ctx, transport.JSONRPCRequest{
		JSONRPC: mcp.JSONRPC_VERSION,
		ID:      mcp.NewRequestId(id),
		Method:  method,
		Params:  params,
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %s: %w", p.name, method, err)
	}
	if resp.Error != nil {
		return nil, fmt.Errorf("%s: %s: json-rpc error %d: %s", p.name, method, resp.Error.Code, resp.Error.Message)
	}
	return resp.Result, nil
}

// rawList pages through a list method (tools/list, prompts/list, ...) and
// returns the raw items under key.
func (p *peer) rawList(ctx context.Context, method, key string) ([]json.RawMessage, error) {
	var all []json.RawMessage
	cursor := ""
	for page := 0; ; page++ {
		if page == 100 {
			return nil, fmt.Errorf("%s: %s: more than 100 pages", p.name, method)
		}
		params := map[string]any{}
		if cursor != "" {
			params["cursor"] = cursor
		}
		res, err := p.raw(ctx, method, params)
		if err != nil {
			return nil, err
		}
		var body map[string]json.RawMessage
		if err := json.Unmarshal(res, &body); err != nil {
			return nil, fmt.Errorf("%s: %s: result is not an object: %w", p.name, method, err)
		}
		var items []json.RawMessage
		if v, ok := body[key]; ok {
			if err := json.Unmarshal(v, &items); err != nil {
				return nil, fmt.Errorf("%s: %s: %q is not an array: %w", p.name, method, key, err)
			}
		}
		all = append(all, items...)
		cursor = ""
		if v, ok := body["nextCursor"]; ok {
			if err := json.Unmarshal(v, &cursor); err != nil {
				return nil, fmt.Errorf("%s: %s: nextCursor: %w", p.name, method, err)
			}
		}
		if cursor == "" {
			return all, nil
		}
	}
}

// callText calls a tool and returns its result's text contents joined by
// newlines, failing the test on a JSON-RPC error.
func (p *peer) callText(ctx context.Context, t testing.TB, name string, args map[string]any) (string, *mcp.CallToolResult) {
	t.Helper()
	if args == nil {
		args = map[string]any{} // servers reject "arguments": null
	}
	res, err := p.CallTool(ctx, mcp.CallToolRequest{Params: mcp.CallToolParams{Name: name, Arguments: args}})
	if err != nil {
		t.Fatalf("%s: calling %s: %v", p.name, name, err)
	}
	return resultText(res), res
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
