package upstreams

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/server"

	"github.com/foldproxy/foldproxy/policy/jsonrpc"
)

// waitTimeout bounds every wait in these tests; nothing here should take
// more than a fraction of it.
const waitTimeout = 20 * time.Second

// selfEntry runs the test binary itself as an MCP server in mode ("mcp" or
// "raw").
func selfEntry(t testing.TB, name, mode string) Entry {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return Entry{Name: name, Type: TypeStdio, Command: exe, Env: map[string]string{envServer: mode}}
}

// recorder collects what an upstream reports through its callbacks.
type recorder struct {
	mu     sync.Mutex
	notes  []recordedNote
	states []State
	lines  []string
}

type recordedNote struct {
	method string
	params json.RawMessage
}

func (r *recorder) options(t testing.TB) Options {
	return Options{
		Logger: testLogger(t),
		OnNotification: func(u *Upstream, method string, params json.RawMessage) {
			r.mu.Lock()
			r.notes = append(r.notes, recordedNote{method, params})
			r.mu.Unlock()
		},
		OnState: func(u *Upstream, s State) {
			r.mu.Lock()
			r.states = append(r.states, s)
			r.mu.Unlock()
		},
		Stderr: func(u *Upstream, line string) {
			r.mu.Lock()
			r.lines = append(r.lines, line)
			r.mu.Unlock()
		},
	}
}

func (r *recorder) methods() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, n := range r.notes {
		out = append(out, n.method)
	}
	return out
}

func (r *recorder) stateList() []State {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.states)
}

// testLogger sends logs to t.Log, never to stdout.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// waitFor polls cond until it holds, failing the test after waitTimeout.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// checkNoLeaks fails the test if, once it has cleaned up, goroutines of this
// package or of mcp-go's client transports are still running.
func checkNoLeaks(t testing.TB) {
	t.Helper()
	t.Cleanup(func() {
		var stacks string
		deadline := time.Now().Add(waitTimeout)
		for {
			buf := make([]byte, 1<<20)
			stacks = string(buf[:runtime.Stack(buf, true)])
			leaked := false
			for _, g := range strings.Split(stacks, "\n\n") {
				if strings.Contains(g, "upstreams.(*") || strings.Contains(g, "mcp-go/client/transport.") {
					leaked = true
				}
			}
			if !leaked {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("goroutines left running:\n%s", stacks)
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}

// startUpstream starts u, waits for it to be up and closes it at cleanup.
func startUpstream(t testing.TB, u *Upstream) {
	t.Helper()
	t.Cleanup(func() {
		if err := u.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	u.Start(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := u.WaitReady(ctx); err != nil {
		t.Fatalf("WaitReady: %v", err)
	}
}

func names(t testing.TB, items []json.RawMessage) []string {
	t.Helper()
	var out []string
	for _, it := range items {
		var v struct {
			Name string `json:"name"`
		}
		if err := json.Unmarshal(it, &v); err != nil {
			t.Fatalf("item %s: %v", it, err)
		}
		out = append(out, v.Name)
	}
	slices.Sort(out)
	return out
}

// toolText returns the text of a tools/call result's first content block.
func toolText(t testing.TB, res json.RawMessage) string {
	t.Helper()
	var v struct {
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
	}
	if err := json.Unmarshal(res, &v); err != nil || len(v.Content) == 0 {
		t.Fatalf("result %s: no text content (%v)", res, err)
	}
	return v.Content[0].Text
}

func callTool(ctx context.Context, u *Upstream, name, args string) (json.RawMessage, error) {
	if args == "" {
		args = "{}"
	}
	return u.Call(ctx, "tools/call", json.RawMessage(fmt.Sprintf(`{"name":%q,"arguments":%s}`, name, args)))
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	t.Cleanup(cancel)
	return ctx
}

func TestStdioCatalogAndCall(t *testing.T) {
	checkNoLeaks(t)
	var rec recorder
	u := New(selfEntry(t, "srv", "mcp"), rec.options(t))
	if got, want := u.State(), StateDown; got != want {
		t.Errorf("state before Start = %v, want %v", got, want)
	}
	startUpstream(t, u)

	cat := u.Catalog()
	wantTools := slices.Sorted(slices.Values(testToolNames))
	if got := names(t, cat.Tools); !slices.Equal(got, wantTools) {
		t.Errorf("tools = %v, want %v (all pages)", got, wantTools)
	}
	if got, want := names(t, cat.Resources), []string{"r0", "r1", "r2"}; !slices.Equal(got, want) {
		t.Errorf("resources = %v, want %v", got, want)
	}
	if got, want := names(t, cat.ResourceTemplates), []string{"t"}; !slices.Equal(got, want) {
		t.Errorf("resource templates = %v, want %v", got, want)
	}
	if got, want := names(t, cat.Prompts), []string{"p0", "p1", "p2"}; !slices.Equal(got, want) {
		t.Errorf("prompts = %v, want %v", got, want)
	}
	if cat.Instructions != "test instructions" || cat.ProtocolVersion != DefaultProtocolVersion {
		t.Errorf("instructions %q, protocol version %q", cat.Instructions, cat.ProtocolVersion)
	}
	if !bytes.Contains(cat.ServerInfo, []byte(`"testsrv"`)) || !bytes.Contains(cat.ServerCapabilities, []byte(`"tools"`)) {
		t.Errorf("server info %s, capabilities %s", cat.ServerInfo, cat.ServerCapabilities)
	}
	if got := u.State(); got != StateUp {
		t.Errorf("state = %v, want up", got)
	}
	// OnState runs on the supervisor's goroutine, possibly after WaitReady
	// has returned.
	waitFor(t, "OnState(up)", func() bool { return len(rec.stateList()) == 2 })
	if got := rec.stateList(); !slices.Equal(got, []State{StateStarting, StateUp}) {
		t.Errorf("states reported = %v, want [starting up]", got)
	}

	res, err := callTool(testCtx(t), u, "echo", `{"text":"hello"}`)
	if err != nil {
		t.Fatalf("echo: %v", err)
	}
	if got := toolText(t, res); got != "hello" {
		t.Errorf("echo = %q, want hello", got)
	}

	// Many calls at once: each gets its own answer, so ids are unique.
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			want := fmt.Sprintf("call-%d", i)
			res, err := callTool(testCtx(t), u, "echo", fmt.Sprintf(`{"text":%q}`, want))
			if err != nil {
				t.Errorf("echo %d: %v", i, err)
				return
			}
			if got := toolText(t, res); got != want {
				t.Errorf("echo %d = %q, want %q", i, got, want)
			}
		})
	}
	wg.Wait()

	var rpcErr *jsonrpc.Error
	_, err = u.Call(testCtx(t), "no/such/method", nil)
	if !errors.As(err, &rpcErr) || rpcErr.Code != -32601 {
		t.Errorf("unknown method: got %v, want *jsonrpc.Error -32601", err)
	}
	if _, err := u.Call(testCtx(t), "tools/call", json.RawMessage(`{"name":`)); err == nil || errors.Is(err, ErrUnavailable) {
		t.Errorf("invalid params: got %v, want a plain error", err)
	}
	if u.State() != StateUp {
		t.Errorf("invalid params took the upstream down")
	}
}

func TestRawBytesPassThrough(t *testing.T) {
	checkNoLeaks(t)
	var rec recorder
	u := New(selfEntry(t, "raw", "raw"), rec.options(t))
	startUpstream(t, u)
	ctx := testCtx(t)

	cat := u.Catalog()
	if len(cat.Tools) != 2 || string(cat.Tools[0]) != rawTool1 || string(cat.Tools[1]) != rawTool2 {
		t.Errorf("tools = %q, want exactly [%s %s]", cat.Tools, rawTool1, rawTool2)
	}
	if cat.ProtocolVersion != "2025-06-18" {
		t.Errorf("protocol version = %q, want the server's 2025-06-18", cat.ProtocolVersion)
	}
	if string(cat.ServerCapabilities) != `{"tools":{"listChanged":false}}` || cat.Instructions != "raw server" {
		t.Errorf("capabilities %s, instructions %q", cat.ServerCapabilities, cat.Instructions)
	}
	if cat.Resources != nil || cat.ResourceTemplates != nil || cat.Prompts != nil {
		t.Errorf("lists fetched for undeclared capabilities: %v %v %v", cat.Resources, cat.ResourceTemplates, cat.Prompts)
	}

	res, err := u.Call(ctx, "tools/call", json.RawMessage(`{"name":"a"}`))
	if err != nil {
		t.Fatal(err)
	}
	if string(res) != rawCallResult {
		t.Errorf("result\n got  %s\n want %s", res, rawCallResult)
	}

	_, err = u.Call(ctx, "fail", nil)
	var rpcErr *jsonrpc.Error
	if !errors.As(err, &rpcErr) {
		t.Fatalf("fail: got %v, want *jsonrpc.Error", err)
	}
	var data, wantData any
	_ = json.Unmarshal(rpcErr.Data, &data)
	_ = json.Unmarshal([]byte(rawErrorData), &wantData)
	if rpcErr.Code != -32001 || rpcErr.Message != "nope" || fmt.Sprint(data) != fmt.Sprint(wantData) {
		t.Errorf("RPCError = %d %q %s", rpcErr.Code, rpcErr.Message, rpcErr.Data)
	}

	// The server pings us in the middle of a request; we answer it.
	res, err = u.Call(ctx, "pingme", nil)
	if err != nil {
		t.Fatalf("pingme: %v", err)
	}
	var pong struct {
		Pong string `json:"pong"`
	}
	if err := json.Unmarshal(res, &pong); err != nil {
		t.Fatal(err)
	}
	var answer struct {
		ID     string          `json:"id"`
		Result json.RawMessage `json:"result"`
	}
	if err := json.Unmarshal([]byte(pong.Pong), &answer); err != nil || answer.ID != "srv-1" || string(answer.Result) != "{}" {
		t.Errorf("our answer to the server's ping = %s (%v)", pong.Pong, err)
	}

	res, err = u.Call(ctx, "seen", nil)
	if err != nil {
		t.Fatal(err)
	}
	var seen struct {
		Seen []string `json:"seen"`
	}
	if err := json.Unmarshal(res, &seen); err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	var methods []string
	for _, s := range seen.Seen {
		method, id, _ := strings.Cut(s, " ")
		methods = append(methods, method)
		if id == "" {
			continue
		}
		if ids[id] {
			t.Errorf("request id %s used twice: %v", id, seen.Seen)
		}
		ids[id] = true
	}
	want := []string{"initialize", "notifications/initialized", "tools/list", "tools/list", "tools/call", "fail", "pingme", "seen"}
	if !slices.Equal(methods, want) {
		t.Errorf("server saw %v, want %v", methods, want)
	}
}

func TestNotificationsComeBeforeTheResult(t *testing.T) {
	checkNoLeaks(t)
	var rec recorder
	// The raw server writes the notifications before the response; mcp-go's
	// server does not promise that order. A slow consumer makes sure Call
	// really waits for them.
	opts := rec.options(t)
	record := opts.OnNotification
	opts.OnNotification = func(u *Upstream, method string, params json.RawMessage) {
		time.Sleep(10 * time.Millisecond)
		record(u, method, params)
	}
	u := New(selfEntry(t, "raw", "raw"), opts)
	startUpstream(t, u)

	res, err := u.Call(testCtx(t), "notify", json.RawMessage(`{"_meta":{"progressToken":"tok-1"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := toolText(t, res); got != "notified" {
		t.Errorf("notify = %q", got)
	}
	// No waiting: everything sent before the result has been passed on.
	rec.mu.Lock()
	notes := slices.Clone(rec.notes)
	rec.mu.Unlock()
	var progress []string
	var messages int
	for _, n := range notes {
		switch n.method {
		case "notifications/progress":
			var p struct {
				Token    string  `json:"progressToken"`
				Progress float64 `json:"progress"`
			}
			if err := json.Unmarshal(n.params, &p); err != nil {
				t.Fatalf("progress params %s: %v", n.params, err)
			}
			progress = append(progress, fmt.Sprintf("%s:%v", p.Token, p.Progress))
		case "notifications/message":
			messages++
		}
	}
	if want := []string{"tok-1:1", "tok-1:2", "tok-1:3"}; !slices.Equal(progress, want) || messages != 1 {
		t.Errorf("before the result: progress %v (want %v), %d messages (want 1)", progress, want, messages)
	}
}

func TestListChangedRefreshesTheCatalogueFirst(t *testing.T) {
	checkNoLeaks(t)
	var rec recorder
	opts := rec.options(t)
	var sawAdded atomic.Int32 // 1: catalogue had "added" when notified, 2: it did not
	opts.OnNotification = func(u *Upstream, method string, params json.RawMessage) {
		if method == "notifications/tools/list_changed" {
			if slices.Contains(names(t, u.Catalog().Tools), "added") {
				sawAdded.Store(1)
			} else {
				sawAdded.Store(2)
			}
		}
	}
	u := New(selfEntry(t, "srv", "mcp"), opts)
	startUpstream(t, u)
	waitFor(t, "OnState(up)", func() bool { return len(rec.stateList()) == 2 })
	ups := len(rec.stateList())

	if _, err := callTool(testCtx(t), u, "addtool", ""); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "tools/list_changed", func() bool { return sawAdded.Load() != 0 })
	if sawAdded.Load() != 1 {
		t.Errorf("OnNotification ran before the catalogue had the new tool")
	}
	waitFor(t, "OnState after the refresh", func() bool { return len(rec.stateList()) > ups })
	if got := rec.stateList()[ups]; got != StateUp {
		t.Errorf("state reported after the refresh = %v, want up", got)
	}
}

func TestServerToClientRequests(t *testing.T) {
	checkNoLeaks(t)
	tests := []struct {
		name   string
		answer func() (json.RawMessage, error)
		want   string
	}{
		{
			"result",
			func() (json.RawMessage, error) {
				return json.RawMessage(`{"role":"assistant","content":{"type":"text","text":"hi there"},"model":"test-model"}`), nil
			},
			`sampled test-model {"type":"text","text":"hi there"}`,
		},
		{
			"json-rpc error",
			func() (json.RawMessage, error) { return nil, &jsonrpc.Error{Code: -1, Message: "user rejected"} },
			"user rejected",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var rec recorder
			opts := rec.options(t)
			opts.Capabilities = json.RawMessage(`{"sampling":{}}`)
			var gotMethod string
			var gotParams json.RawMessage
			var mu sync.Mutex
			opts.OnRequest = func(ctx context.Context, u *Upstream, method string, params json.RawMessage) (json.RawMessage, error) {
				mu.Lock()
				gotMethod, gotParams = method, params
				mu.Unlock()
				return tt.answer()
			}
			u := New(selfEntry(t, "srv", "mcp"), opts)
			startUpstream(t, u)
			res, err := callTool(testCtx(t), u, "sample", "")
			if err != nil {
				t.Fatal(err)
			}
			if got := toolText(t, res); !strings.Contains(got, tt.want) {
				t.Errorf("sample = %q, want it to contain %q", got, tt.want)
			}
			mu.Lock()
			defer mu.Unlock()
			if gotMethod != "sampling/createMessage" || !bytes.Contains(gotParams, []byte("say hi")) {
				t.Errorf("OnRequest got %s %s", gotMethod, gotParams)
			}
		})
	}
}

func TestCancelSendsCancelledUpstream(t *testing.T) {
	checkNoLeaks(t)
	marker := filepath.Join(t.TempDir(), "cancelled")
	e := selfEntry(t, "srv", "mcp")
	e.Env[envMarker] = marker
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var rec recorder
	opts := rec.options(t)
	opts.OnNotification = func(u *Upstream, method string, params json.RawMessage) {
		if method == "notifications/message" && bytes.Contains(params, []byte("slow started")) {
			cancel()
		}
	}
	u := New(e, opts)
	startUpstream(t, u)

	_, err := callTool(ctx, u, "slow", "")
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("slow: got %v, want context.Canceled", err)
	}
	waitFor(t, "the server to see notifications/cancelled", func() bool {
		b, _ := os.ReadFile(marker)
		return string(b) == "cancelled"
	})
	if res, err := callTool(testCtx(t), u, "echo", `{"text":"still here"}`); err != nil || toolText(t, res) != "still here" {
		t.Errorf("echo after cancel: %v", err)
	}
}

func TestCrashFailsCallsAndNextCallRestarts(t *testing.T) {
	checkNoLeaks(t)
	var rec recorder
	u := New(selfEntry(t, "everything", "mcp"), rec.options(t))
	startUpstream(t, u)

	slowErr := make(chan error, 1)
	slowCtx, cancelSlow := context.WithCancel(context.Background())
	defer cancelSlow()
	go func() {
		_, err := callTool(slowCtx, u, "slow", "")
		slowErr <- err
	}()
	waitFor(t, "slow to start", func() bool { return slices.Contains(rec.methods(), "notifications/message") })

	_, err := callTool(testCtx(t), u, "crash", "")
	want := `upstream "everything" exited while handling tools/call (exit status 3); it will be restarted on the next call`
	if !errors.Is(err, ErrUnavailable) || err.Error() != want {
		t.Fatalf("crash: got %v, want %q wrapping ErrUnavailable", err, want)
	}
	if err := <-slowErr; !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "exited") {
		t.Errorf("call in flight during the crash: got %v, want ErrUnavailable", err)
	}
	if got := u.State(); got != StateDown {
		t.Errorf("state after crash = %v, want down", got)
	}

	res, err := callTool(testCtx(t), u, "echo", `{"text":"back"}`)
	if err != nil {
		t.Fatalf("call after crash: %v", err)
	}
	if got := toolText(t, res); got != "back" {
		t.Errorf("echo = %q", got)
	}
	if got := u.Restarts(); got != 1 {
		t.Errorf("Restarts() = %d, want 1", got)
	}
	want2 := []State{StateStarting, StateUp, StateDown, StateStarting, StateUp}
	waitFor(t, "OnState(up) after the restart", func() bool { return len(rec.stateList()) == len(want2) })
	if got := rec.stateList(); !slices.Equal(got, want2) {
		t.Errorf("states = %v, want %v", got, want2)
	}
}

func TestIdleExitIsNoticed(t *testing.T) {
	checkNoLeaks(t)
	var rec recorder
	u := New(selfEntry(t, "srv", "mcp"), rec.options(t))
	startUpstream(t, u)
	if _, err := callTool(testCtx(t), u, "diesoon", ""); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "state down after the process exited", func() bool { return u.State() == StateDown })
	if _, err := callTool(testCtx(t), u, "echo", `{"text":"x"}`); err != nil {
		t.Fatalf("call after exit: %v", err)
	}
}

func TestEnvCwdAndStderr(t *testing.T) {
	checkNoLeaks(t)
	dir := t.TempDir()
	e := selfEntry(t, "srv", "mcp")
	e.Env["FOLDPROXY_TEST_VAR"] = "value-1"
	e.Cwd = dir
	var rec recorder
	u := New(e, rec.options(t))
	startUpstream(t, u)

	res, err := callTool(testCtx(t), u, "env", "")
	if err != nil {
		t.Fatal(err)
	}
	gotVar, gotDir, _ := strings.Cut(toolText(t, res), "|")
	wantDir, _ := filepath.EvalSymlinks(dir)
	gotDir, _ = filepath.EvalSymlinks(gotDir)
	if gotVar != "value-1" || gotDir != wantDir {
		t.Errorf("env, cwd = %q, %q; want value-1, %q", gotVar, gotDir, wantDir)
	}

	if _, err := callTool(testCtx(t), u, "stderr", ""); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the stderr line", func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return slices.Contains(rec.lines, "hello stderr")
	})
}

func TestStartFailureIsRetriedAndCallsFailFast(t *testing.T) {
	tests := []struct {
		name   string
		entry  Entry
		want   string // in the error of a call
		stderr string // a line the command wrote to stderr
	}{
		{
			"command not found",
			Entry{Name: "ghost", Type: TypeStdio, Command: "foldproxy-no-such-command"},
			`upstream "ghost" is down and could not be started for tools/call: command "foldproxy-no-such-command" not found: it is not on PATH; give its absolute path or install it (executable file not found in $PATH)`,
			"",
		},
		{
			"command path missing",
			Entry{Name: "gone", Type: TypeStdio, Command: "/nonexistent/foldproxy-server"},
			`upstream "gone" is down and could not be started for tools/call: command "/nonexistent/foldproxy-server" not found: /nonexistent/foldproxy-server does not exist (file does not exist)`,
			"",
		},
		{
			"command exits at once",
			Entry{Name: "quitter", Type: TypeStdio, Command: "sh", Args: []string{"-c", "echo oops >&2; exit 7"}},
			`upstream "quitter" is down and could not be started for tools/call: command "sh" exited while initializing (exit status 7)`,
			"oops",
		},
		{
			"nothing listening",
			Entry{Name: "web", Type: TypeHTTP, URL: "http://127.0.0.1:1/mcp"},
			`upstream "web" is down and could not be started for tools/call: initialize http://127.0.0.1:1/mcp: `,
			"",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkNoLeaks(t)
			var rec recorder
			opts := rec.options(t)
			opts.MinBackoff = 5 * time.Millisecond
			opts.MaxBackoff = 20 * time.Millisecond
			u := New(tt.entry, opts)
			defer u.Close()
			u.Start(context.Background())

			waitFor(t, "several attempts", func() bool {
				u.mu.Lock()
				defer u.mu.Unlock()
				return u.failures >= 3
			})
			waitFor(t, "OnState(down)", func() bool { return slices.Contains(rec.stateList(), StateDown) })
			_, err := callTool(testCtx(t), u, "echo", "")
			if !errors.Is(err, ErrUnavailable) || !strings.HasPrefix(err.Error(), tt.want) {
				t.Errorf("call: got %v\nwant ErrUnavailable starting with %s", err, tt.want)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			if err := u.WaitReady(ctx); !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("WaitReady: got %v, want ErrUnavailable and DeadlineExceeded", err)
			}
			if err := u.Notify(context.Background(), "notifications/roots/list_changed", nil); !errors.Is(err, ErrUnavailable) {
				t.Errorf("Notify while down: got %v, want ErrUnavailable", err)
			}
			if tt.stderr != "" {
				waitFor(t, "the stderr line", func() bool {
					rec.mu.Lock()
					defer rec.mu.Unlock()
					return slices.Contains(rec.lines, tt.stderr)
				})
			}
		})
	}
}

func TestNotStartedAndClosed(t *testing.T) {
	checkNoLeaks(t)
	u := New(selfEntry(t, "srv", "mcp"), Options{})
	if _, err := u.Call(context.Background(), "ping", nil); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "not started") {
		t.Errorf("before Start: got %v", err)
	}
	startUpstream(t, u)
	if _, err := u.Call(testCtx(t), "ping", nil); err != nil {
		t.Errorf("ping: %v", err)
	}
	if err := u.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if _, err := u.Call(context.Background(), "ping", nil); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "closed") {
		t.Errorf("after Close: got %v", err)
	}
	if u.State() != StateDown {
		t.Errorf("state after Close = %v", u.State())
	}
}

// forgetfulSessions is a stateful session manager that can forget every
// session, as a restarted server would.
type forgetfulSessions struct {
	server.InsecureStatefulSessionIdManager
	mu  sync.Mutex
	ids []string
}

func (m *forgetfulSessions) Generate() string {
	id := m.InsecureStatefulSessionIdManager.Generate()
	m.mu.Lock()
	m.ids = append(m.ids, id)
	m.mu.Unlock()
	return id
}

func (m *forgetfulSessions) forgetAll() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, id := range m.ids {
		_, _ = m.Terminate(id)
	}
}

func (m *forgetfulSessions) generated() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.ids)
}

func TestHTTPUpstream(t *testing.T) {
	checkNoLeaks(t)
	mgr := &forgetfulSessions{}
	h := server.NewStreamableHTTPServer(newTestServer(), server.WithSessionIdManager(mgr))
	var sawHeader atomic.Bool
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Test") == "yes" {
			sawHeader.Store(true)
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)

	var rec recorder
	u := New(Entry{Name: "web", Type: TypeHTTP, URL: ts.URL + "/mcp", Headers: map[string]string{"X-Test": "yes"}}, rec.options(t))
	startUpstream(t, u)
	if got := names(t, u.Catalog().Tools); len(got) != len(testToolNames) {
		t.Errorf("tools = %v", got)
	}
	if !sawHeader.Load() {
		t.Errorf("the configured header was not sent")
	}
	res, err := callTool(testCtx(t), u, "echo", `{"text":"one"}`)
	if err != nil || toolText(t, res) != "one" {
		t.Fatalf("echo: %s, %v", res, err)
	}

	// The server forgets the session: the call starts a new one and succeeds.
	mgr.forgetAll()
	res, err = callTool(testCtx(t), u, "echo", `{"text":"two"}`)
	if err != nil {
		t.Fatalf("echo after the session was lost: %v", err)
	}
	if got := toolText(t, res); got != "two" {
		t.Errorf("echo = %q", got)
	}
	if got := mgr.generated(); got != 2 {
		t.Errorf("sessions initialized = %d, want 2", got)
	}
	if got := names(t, u.Catalog().Tools); len(got) != len(testToolNames) {
		t.Errorf("tools after the new session = %v", got)
	}
	if u.State() != StateUp || u.Restarts() != 0 {
		t.Errorf("state %v, restarts %d; want up, 0", u.State(), u.Restarts())
	}

	// Progress arrives on the request's event stream, before the result.
	if _, err := u.Call(testCtx(t), "tools/call", json.RawMessage(`{"name":"notify","_meta":{"progressToken":7}}`)); err != nil {
		t.Fatal(err)
	}
	if got := rec.methods(); !slices.Contains(got, "notifications/progress") {
		t.Errorf("notifications before the result: %v", got)
	}
}

func TestSSEUpstream(t *testing.T) {
	checkNoLeaks(t)
	var h http.Handler
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h.ServeHTTP(w, r) }))
	t.Cleanup(ts.Close)
	sse := server.NewSSEServer(newTestServer(), server.WithBaseURL(ts.URL))
	h = sse
	t.Cleanup(func() { _ = sse.Shutdown(context.Background()) })

	var rec recorder
	u := New(Entry{Name: "old", Type: TypeSSE, URL: ts.URL + "/sse"}, rec.options(t))
	startUpstream(t, u)
	if got := names(t, u.Catalog().Prompts); !slices.Equal(got, []string{"p0", "p1", "p2"}) {
		t.Errorf("prompts = %v", got)
	}
	res, err := callTool(testCtx(t), u, "echo", `{"text":"sse"}`)
	if err != nil || toolText(t, res) != "sse" {
		t.Fatalf("echo: %s, %v", res, err)
	}
}

func TestSet(t *testing.T) {
	checkNoLeaks(t)
	var rec recorder
	opts := rec.options(t)
	opts.MinBackoff = 5 * time.Millisecond
	entries := []Entry{
		{Name: "zz-broken", Type: TypeStdio, Command: "foldproxy-no-such-command"},
		selfEntry(t, "good", "mcp"),
		{Name: "good", Type: TypeStdio, Command: "duplicate-ignored"},
	}
	s := NewSet(entries, opts)
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	s.Start(context.Background())
	var got []string
	for _, u := range s.All() {
		got = append(got, u.Name())
	}
	if want := []string{"good", "zz-broken"}; !slices.Equal(got, want) {
		t.Errorf("All() = %v, want %v", got, want)
	}
	good, ok := s.Get("good")
	if !ok || good.Entry().Command == "duplicate-ignored" {
		t.Fatalf("Get(good) = %v, %v", good, ok)
	}
	if err := good.WaitReady(testCtx(t)); err != nil {
		t.Fatalf("the good upstream was held back: %v", err)
	}
	if _, ok := s.Get("missing"); ok {
		t.Errorf("Get(missing) found something")
	}
}

func TestStateString(t *testing.T) {
	tests := []struct {
		s    State
		want string
	}{{StateStarting, "starting"}, {StateUp, "up"}, {StateDown, "down"}, {State(9), "State(9)"}}
	for _, tt := range tests {
		if got := tt.s.String(); got != tt.want {
			t.Errorf("%d.String() = %q, want %q", int(tt.s), got, tt.want)
		}
	}
}

func TestBackoffDelay(t *testing.T) {
	const ms = time.Millisecond
	tests := []struct {
		failures int
		want     time.Duration
	}{{0, 250 * ms}, {1, 250 * ms}, {2, 500 * ms}, {3, time.Second}, {4, 2 * time.Second}, {8, 30 * time.Second}, {1000, 30 * time.Second}}
	for _, tt := range tests {
		if got := backoffDelay(tt.failures, 250*ms, 30*time.Second); got != tt.want {
			t.Errorf("backoffDelay(%d) = %v, want %v", tt.failures, got, tt.want)
		}
	}
}

func TestRPCErrorAndUnavailableMessages(t *testing.T) {
	e := &jsonrpc.Error{Code: -32602, Message: "bad"}
	if got, want := e.Error(), "json-rpc error -32602: bad"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	cause := errors.New("boom")
	err := unavailable(cause, "upstream %q is down", "x")
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, cause) || err.Error() != `upstream "x" is down` {
		t.Errorf("unavailable: %v", err)
	}
}

func TestHTTPServerGoneIsUnavailable(t *testing.T) {
	checkNoLeaks(t)
	ts := httptest.NewServer(server.NewStreamableHTTPServer(newTestServer()))
	var rec recorder
	opts := rec.options(t)
	opts.MinBackoff = 5 * time.Millisecond
	u := New(Entry{Name: "web", Type: TypeHTTP, URL: ts.URL + "/mcp"}, opts)
	startUpstream(t, u)
	ts.CloseClientConnections()
	ts.Close()

	_, err := callTool(testCtx(t), u, "echo", `{"text":"x"}`)
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), `upstream "web" lost its connection while handling tools/call`) {
		t.Fatalf("call to a server that is gone: got %v", err)
	}
	if u.State() != StateDown {
		t.Errorf("state = %v, want down", u.State())
	}
	_, err = callTool(testCtx(t), u, "echo", `{"text":"x"}`)
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "could not be started") {
		t.Errorf("next call: got %v, want ErrUnavailable after a failed reconnect", err)
	}
}

// processGone reports whether pid has exited (a zombie counts as exited).
func processGone(pid int) bool {
	p, err := os.FindProcess(pid)
	if err != nil || p.Signal(syscall.Signal(0)) != nil {
		return true
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	_, after, _ := strings.Cut(string(stat), ") ")
	return strings.HasPrefix(after, "Z") || strings.HasPrefix(after, "X")
}

func TestCloseKillsTheServerAndItsChildren(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("checks processes through /proc")
	}
	checkNoLeaks(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	pidFile := filepath.Join(t.TempDir(), "pid")
	// The server starts a grandchild that would outlive it, then becomes
	// the MCP server itself.
	e := Entry{Name: "srv", Type: TypeStdio, Command: "sh",
		Args: []string{"-c", `sleep 300 & echo $! > "$1"; exec "$0"`, exe, pidFile},
		Env:  map[string]string{envServer: "mcp"}}
	u := New(e, Options{Logger: testLogger(t)})
	startUpstream(t, u)
	u.mu.Lock()
	serverPid := u.conn.w.(*stdioWire).cmd.Process.Pid
	u.mu.Unlock()
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	var sleepPid int
	if _, err := fmt.Sscan(string(b), &sleepPid); err != nil {
		t.Fatalf("pid file %q: %v", b, err)
	}
	if processGone(serverPid) || processGone(sleepPid) {
		t.Fatalf("processes gone before Close")
	}
	if err := u.Close(); err != nil {
		t.Fatal(err)
	}
	if !processGone(serverPid) {
		t.Errorf("the server (pid %d) is still running after Close", serverPid)
	}
	waitFor(t, "the grandchild to be killed", func() bool { return processGone(sleepPid) })
}

// TestAdvertiseWidensAndReconnects: an upstream starts advertising the
// capabilities of Options; Advertise adds the new ones and the upstream is
// initialized again with them; advertising nothing new changes nothing.
func TestAdvertiseWidensAndReconnects(t *testing.T) {
	checkNoLeaks(t)
	h := server.NewStreamableHTTPServer(newTestServer())
	var mu sync.Mutex
	var inits []string // the capabilities of each initialize, compacted
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			body, _ := io.ReadAll(r.Body)
			var msg struct {
				Method string `json:"method"`
				Params struct {
					Capabilities json.RawMessage `json:"capabilities"`
				} `json:"params"`
			}
			if json.Unmarshal(body, &msg) == nil && msg.Method == "initialize" {
				var b bytes.Buffer
				_ = json.Compact(&b, msg.Params.Capabilities)
				mu.Lock()
				inits = append(inits, b.String())
				mu.Unlock()
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	seen := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(inits)
	}

	var rec recorder
	u := New(Entry{Name: "web", Type: TypeHTTP, URL: ts.URL + "/mcp"}, rec.options(t))
	startUpstream(t, u)
	if got := seen(); !slices.Equal(got, []string{`{}`}) {
		t.Fatalf("initialize capabilities = %v, want [{}]", got)
	}
	if u.Advertise(map[string]json.RawMessage{}) {
		t.Errorf("advertising nothing widened the set")
	}
	if !u.Advertise(map[string]json.RawMessage{"roots": json.RawMessage(`{"listChanged":true}`)}) {
		t.Fatalf("advertising roots did not widen the set")
	}
	if err := u.WaitAdvertised(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if got := seen(); !slices.Equal(got, []string{`{}`, `{"roots":{"listChanged":true}}`}) {
		t.Errorf("initialize capabilities = %v, want {} then roots", got)
	}
	if u.Advertise(map[string]json.RawMessage{"roots": json.RawMessage(`{}`)}) {
		t.Errorf("advertising roots again widened the set")
	}
	if !u.Advertise(map[string]json.RawMessage{"roots": json.RawMessage(`{}`), "sampling": json.RawMessage(`{}`)}) {
		t.Fatalf("advertising sampling did not widen the set")
	}
	if err := u.WaitAdvertised(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if got := seen(); len(got) != 3 || got[2] != `{"roots":{"listChanged":true},"sampling":{}}` {
		t.Errorf("initialize capabilities = %v, want a third with roots (as first given) and sampling", got)
	}
	res, err := callTool(testCtx(t), u, "echo", `{"text":"after"}`)
	if err != nil || toolText(t, res) != "after" {
		t.Fatalf("echo after reconnecting: %s, %v", res, err)
	}
}

// TestExactBytesBothWays checks that what encoders change comes through
// untouched: a notification's params, a server-to-client request's params,
// the client's answer on its way back, and an error object with its data.
func TestExactBytesBothWays(t *testing.T) {
	checkNoLeaks(t)
	var rec recorder
	opts := rec.options(t)
	answer := `{"role":"assistant", "n":9007199254740993,"content":{"type":"text","text":"<&>\u00e9"}}`
	var gotParams json.RawMessage
	var mu sync.Mutex
	opts.OnRequest = func(ctx context.Context, u *Upstream, method string, params json.RawMessage) (json.RawMessage, error) {
		mu.Lock()
		gotParams = params
		mu.Unlock()
		return json.RawMessage(answer), nil
	}
	u := New(selfEntry(t, "raw", "raw"), opts)
	startUpstream(t, u)
	_, err := u.Call(testCtx(t), "exact", nil)
	var re *jsonrpc.Error
	if !errors.As(err, &re) {
		t.Fatalf("exact: %v, want an RPCError", err)
	}
	line, _ := json.Marshal(`{"jsonrpc":"2.0","id":"srv-exact","result":` + answer + `}`)
	wantErr := `{"message":"m <&>\u00e9", "code":-32002,"data":{"line":` + string(line) + `,"x":` + rawExact + `}}`
	if string(re.Raw()) != wantErr {
		t.Errorf("error object\n got %s\nwant %s", re.Raw(), wantErr)
	}
	if re.Code != -32002 || re.Message != "m <&>é" {
		t.Errorf("error code %d message %q", re.Code, re.Message)
	}
	if want := `{"line":` + string(line) + `,"x":` + rawExact + `}`; string(re.Data) != want {
		t.Errorf("error data\n got %s\nwant %s", re.Data, want)
	}
	mu.Lock()
	if string(gotParams) != rawExact {
		t.Errorf("request params\n got %s\nwant %s", gotParams, rawExact)
	}
	mu.Unlock()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.notes) != 1 || string(rec.notes[0].params) != rawExact {
		t.Errorf("notifications %v, want one with params %s", rec.notes, rawExact)
	}
}

// TestStdioReadingHandOver drives the hand-overs of a stdio wire's reading
// (stdioWire.read, readFor): thousands of calls one at a time, so that each
// next call takes the reading lent out after the last answer and reads its
// own; bursts of calls at once, so that one reads for the others and the
// reading goes back to the wire's reader; calls whose server sends
// notifications first (read by whoever holds the reading); calls cancelled
// while they read; and pauses that let the lend run out. Every call must
// get its own answer and none may hang (testCtx bounds each one).
func TestStdioReadingHandOver(t *testing.T) {
	checkNoLeaks(t)
	var rec recorder
	var notes atomic.Int64
	opts := rec.options(t)
	opts.OnNotification = func(u *Upstream, method string, params json.RawMessage) {
		if method == "notifications/message" && bytes.Contains(params, []byte("notified")) {
			notes.Add(1)
		}
	}
	u := New(selfEntry(t, "srv", "mcp"), opts)
	startUpstream(t, u)
	echo := func(ctx context.Context, want string) error {
		res, err := callTool(ctx, u, "echo", fmt.Sprintf(`{"text":%q}`, want))
		if err != nil {
			return err
		}
		if got := toolText(t, res); got != want {
			return fmt.Errorf("echo %q answered %q", want, got)
		}
		return nil
	}
	notified := 0
	for i := range 3000 {
		switch {
		case i%97 == 0:
			var wg sync.WaitGroup
			for j := range 6 {
				wg.Go(func() {
					if err := echo(testCtx(t), fmt.Sprintf("burst-%d-%d", i, j)); err != nil {
						t.Error(err)
					}
				})
			}
			wg.Wait()
		case i%89 == 0:
			// Cancelled while it waits or reads: it ends with the
			// cancellation or with its answer, and the next call works.
			ctx, cancel := context.WithCancel(testCtx(t))
			go cancel()
			if err := echo(ctx, fmt.Sprint("cancelled-", i)); err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("cancelled call %d: %v", i, err)
			}
		case i%53 == 0:
			res, err := callTool(testCtx(t), u, "notify", "")
			if err != nil || toolText(t, res) != "notified" {
				t.Fatalf("notify %d: %v", i, err)
			}
			notified++
		case i%41 == 0:
			// Longer than the lend: the wire's reader takes the reading
			// back before the next call.
			time.Sleep(2 * stdioLendFor)
			fallthrough
		default:
			if err := echo(testCtx(t), fmt.Sprint("call-", i)); err != nil {
				t.Fatalf("call %d: %v", i, err)
			}
		}
	}
	waitFor(t, "every notify call's notification", func() bool { return notes.Load() == int64(notified) })
	if u.State() != StateUp {
		t.Errorf("state %v after the calls, want up", u.State())
	}
}
