package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"golang.org/x/sys/unix"
)

// Many sessions, one project: every "foldproxy serve" over stdio on the same
// state folder is a relay to one daemon that owns the store and the
// upstreams; each relay is its own session.

// attachedProcess is one stdio foldproxy process (a relay) and its client.
type attachedProcess struct {
	*peer
	k      *killableStdio
	stderr *syncBuffer
}

// newAttached prepares a stdio foldproxy process on cfg and state, its
// client not started yet; env is added to its environment.
func newAttached(t *testing.T, name, cfg, state string, extra ...string) *attachedProcess {
	t.Helper()
	stderr := &syncBuffer{}
	dumpOnFailure(t, name+" stderr", stderr)
	k := &killableStdio{done: make(chan struct{})}
	k.Stdio = transport.NewStdioWithOptions(proxyBin(t), nil, []string{"serve", "--config", cfg, "--state", state}, transport.WithCommandFunc(
		func(ctx context.Context, command string, env []string, args []string) (*exec.Cmd, error) {
			cmd := exec.CommandContext(ctx, command, args...)
			cmd.Env = append(append(os.Environ(), env...), extra...)
			cmd.Stderr = stderr
			ownProcessGroup(cmd)
			cmd.Cancel = func() error { return killGroup(cmd) }
			k.cmd = cmd
			return cmd, nil
		}))
	p := &peer{name: name, agent: newAgent(), notes: newRecorder()}
	p.Client = client.NewClient(k, client.WithProtocolVersion(protocolVersion))
	p.OnNotification(p.notes.add)
	a := &attachedProcess{peer: p, k: k, stderr: stderr}
	t.Cleanup(func() {
		_ = p.Close()
		if k.cmd != nil {
			_ = killGroup(k.cmd)
		}
	})
	return a
}

// start starts the process and initializes the session. It may run in any
// goroutine.
func (a *attachedProcess) start(ctx context.Context) error {
	if err := a.Start(context.Background()); err != nil {
		return fmt.Errorf("%s: start: %w", a.name, err)
	}
	_, err := a.Initialize(ctx, mcp.InitializeRequest{Params: mcp.InitializeParams{
		ProtocolVersion: protocolVersion,
		ClientInfo:      mcp.Implementation{Name: a.name, Version: "1"},
	}})
	if err != nil {
		return fmt.Errorf("%s: initialize: %w", a.name, err)
	}
	pid := a.k.cmd.Process.Pid
	go watchExit(pid, a.k.done)
	return nil
}

// watchExit closes done when pid is gone, or a zombie whose threads have all
// exited (so its files, and the store's lock, are closed).
func watchExit(pid int, done chan struct{}) {
	for {
		if !processAlive(pid) {
			close(done)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// processAlive reports whether pid still runs. A killed Go process's main
// thread turns zombie before its other threads have exited, and the files
// they share (Badger's lock among them) stay open until the last one has:
// a zombie counts as gone only once /proc lists no thread but its own.
func processAlive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	if !(i > 0 && i+2 < len(b) && b[i+2] == 'Z') {
		return true
	}
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	return err == nil && len(tasks) > 1
}

// daemonsOf lists the pids of the foldproxy daemons serving state.
func daemonsOf(t testing.TB, state string) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatalf("reading /proc: %v", err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || !processAlive(pid) {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		hasDaemon, hasState := false, false
		for i, a := range args {
			hasDaemon = hasDaemon || a == "--daemon"
			hasState = hasState || (a == "--state" && i+1 < len(args) && args[i+1] == state)
		}
		if hasDaemon && hasState {
			pids = append(pids, pid)
		}
	}
	return pids
}

// awaitDaemonExit registers a cleanup that waits for the daemon a stdio
// "foldproxy serve" with args starts (its default mode: a relay attached to
// a daemon in a session of its own, outside the process group the test
// kills) to exit, before the state folder (a t.TempDir made before the
// call, so removed after this cleanup) goes. A daemon whose folder is
// removed while it closes its store never exits: Badger retries its last
// flush forever.
func awaitDaemonExit(t testing.TB, args []string) {
	t.Helper()
	if len(args) == 0 || args[0] != "serve" {
		return
	}
	state := ""
	for i, a := range args {
		switch a {
		case "--standalone", "--listen", "--daemon":
			return
		case "--state":
			if i+1 < len(args) {
				state = args[i+1]
			}
		}
	}
	if state == "" {
		return
	}
	// Once per folder, at its first process: cleanups run last first, so
	// the wait comes after every later process on the folder has been
	// closed or killed (a relay still attached keeps the daemon serving).
	awaitedMu.Lock()
	seen := awaited[state]
	awaited[state] = true
	awaitedMu.Unlock()
	if !seen {
		t.Cleanup(func() { waitNoDaemon(testContext(t, 60*time.Second), t, state) })
	}
}

var (
	awaitedMu sync.Mutex
	awaited   = map[string]bool{}
)

// waitNoDaemon waits until no daemon serves state any more.
func waitNoDaemon(ctx context.Context, t testing.TB, state string) {
	t.Helper()
	for len(daemonsOf(t, state)) > 0 {
		select {
		case <-ctx.Done():
			t.Errorf("a foldproxy daemon still serves %s after its sessions ended: %v", state, daemonsOf(t, state))
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// attachModes are the two ways a stdio process attaches to the daemon: it
// passes the agent's pipes to the daemon and waits (the default, on
// Linux), or it relays every line (FOLDPROXY_ATTACH=relay, the fallback
// where descriptors cannot be passed).
var attachModes = []struct {
	name string
	env  []string
	fds  bool
}{{"fds", nil, true}, {"relay", []string{"FOLDPROXY_ATTACH=relay"}, false}}

// holdsPipe reports whether process holder has the stdin of process pid
// open (the same pipe or socket).
func holdsPipe(t testing.TB, holder, pid int) bool {
	t.Helper()
	target, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/0", pid))
	if err != nil {
		t.Fatalf("the stdin of %d: %v", pid, err)
	}
	entries, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", holder))
	if err != nil {
		t.Fatalf("the files of %d: %v", holder, err)
	}
	for _, e := range entries {
		if l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", holder, e.Name())); err == nil && l == target {
			return true
		}
	}
	return false
}

// TestDaemonThreeSessionsOneProject: three stdio processes started at once
// on one state folder share one daemon (one store, one replay upstream);
// they create branches and call tools at the same time, each sees only its
// own tree; kill -9 of one relay leaves the others untouched, and kill -9 of
// the daemon loses nothing acknowledged: the relays start a new daemon and
// resume their sessions with the same branches, budgets and calls. Both
// ways of attaching: the daemon serving the agents' pipes itself (it holds
// them, and the new daemon does too), and the stdio processes relaying.
func TestDaemonThreeSessionsOneProject(t *testing.T) {
	for _, mode := range attachModes {
		t.Run(mode.name, func(t *testing.T) { daemonThreeSessions(t, mode.env, mode.fds) })
	}
}

func daemonThreeSessions(t *testing.T, env []string, fds bool) {
	ctx := testContext(t, 2*time.Minute)
	cfg := foldProxyConfig(t, map[string]any{"replay": replayEntry(t)}, map[string]any{"defaultTimeout": "300s"}, false)
	state := t.TempDir()
	// Runs before the state folder is removed (cleanups run last first).
	t.Cleanup(func() { waitNoDaemon(testContext(t, 60*time.Second), t, state) })

	procs := make([]*attachedProcess, 3)
	for i := range procs {
		procs[i] = newAttached(t, fmt.Sprintf("session %d", i), cfg, state, env...)
	}
	errs := make([]error, len(procs))
	var wg sync.WaitGroup
	for i, a := range procs {
		wg.Go(func() { errs[i] = a.start(ctx) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	daemons := daemonsOf(t, state)
	if len(daemons) != 1 {
		t.Fatalf("three sessions on one state folder run %d daemons (%v), want 1", len(daemons), daemons)
	}
	if fi, err := os.Stat(filepath.Join(state, "foldproxy.sock")); err != nil || fi.Mode().Perm() != 0o600 || fi.Mode()&os.ModeSocket == 0 {
		t.Errorf("the daemon's socket: %v, %v; want a socket of mode 0600", fi, err)
	}
	for i, a := range procs {
		if got := holdsPipe(t, daemons[0], a.k.cmd.Process.Pid); got != fds {
			t.Errorf("session %d: the daemon holds the agent's stdin: %v, want %v", i, got, fds)
		}
	}
	for _, a := range procs {
		foldWaitTools(ctx, t, a.peer, "replay__emit")
	}

	// At the same time, each session opens a branch and calls inside it.
	type work struct {
		session string
		branch  string
		view    foldView
	}
	done := make([]work, len(procs))
	failures := make([]string, len(procs))
	for i, a := range procs {
		wg.Go(func() {
			var cr foldCreated
			r, err := foldCallRaw(ctx, a.peer, "branch_create", map[string]any{"description": fmt.Sprintf("work of session %d", i), "budget": 6000})
			if err != nil || r.isError {
				failures[i] = fmt.Sprintf("branch_create: %v %s", err, r.text())
				return
			}
			r.decode(t, &cr)
			for j := range 3 {
				r, err := foldCallRaw(ctx, a.peer, "replay__emit", map[string]any{"bytes": 200 + 100*i + j, "kind": "log"})
				if err != nil || r.isError {
					failures[i] = fmt.Sprintf("emit %d: %v %s", j, err, r.text())
					return
				}
			}
			done[i].branch = cr.BranchID
		})
	}
	wg.Wait()
	for i, f := range failures {
		if f != "" {
			t.Fatalf("session %d: %s", i, f)
		}
	}
	for i, a := range procs {
		tree := foldSessionTree(ctx, t, a.peer)
		done[i].session = tree.Tree.BranchID // the root: the session id itself is never shown
		done[i].view = foldStatus(ctx, t, a.peer, done[i].branch)
		if tree.Innermost != done[i].branch || len(tree.Tree.Branches) != 1 || tree.Tree.Branches[0].BranchID != done[i].branch {
			t.Errorf("session %d's tree: innermost %s, branches %v; want only its own branch %s", i, tree.Innermost, tree.Tree.Branches, done[i].branch)
		}
		// Three emits, and the session-tree answer just above: a
		// branch_status answer is charged to the innermost active branch
		// (issue 10: every token the agent receives is charged).
		if done[i].view.Calls != 4 || done[i].view.Status != "active" {
			t.Errorf("session %d's branch: %+v, want active with 4 calls (3 emits, 1 status answer)", i, done[i].view)
		}
	}
	for i, a := range procs {
		other := done[(i+1)%len(procs)].branch
		if r := foldCall(ctx, t, a.peer, "branch_status", map[string]any{"branch_id": other}); !r.isError || !strings.Contains(r.text(), "ErrBranchNotFound") {
			t.Errorf("session %d saw another session's branch %s: %s", i, other, r.text())
		}
	}
	if done[0].session == done[1].session || done[1].session == done[2].session || done[0].session == done[2].session {
		t.Fatalf("the sessions share a root: %s %s %s", done[0].session, done[1].session, done[2].session)
	}

	// kill -9 of one relay: the others go on, untouched.
	kill9(ctx, t, procs[0].k.cmd, procs[0].k.done)
	for i := 1; i < 3; i++ {
		if r := foldCall(ctx, t, procs[i].peer, "replay__emit", map[string]any{"bytes": 50, "kind": "log"}); r.isError {
			t.Errorf("session %d after another relay was killed: %s", i, r.text())
		}
		done[i].view = foldStatus(ctx, t, procs[i].peer, done[i].branch)
	}

	// kill -9 of the daemon: the relays start another and resume.
	if err := syscall.Kill(daemons[0], syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 the daemon %d: %v", daemons[0], err)
	}
	for processAlive(daemons[0]) {
		select {
		case <-ctx.Done():
			t.Fatalf("the daemon %d survived kill -9", daemons[0])
		case <-time.After(20 * time.Millisecond):
		}
	}
	for i := 1; i < 3; i++ {
		a := procs[i]
		// ping changes nothing: a relay sends it again to the new daemon
		// if the old one took it with it.
		if err := a.Ping(ctx); err != nil {
			t.Fatalf("session %d: ping after the daemon was killed: %v", i, err)
		}
		after := foldStatus(ctx, t, a.peer, done[i].branch)
		before := done[i].view
		// The only call between the two views is the status answer that
		// made "before", charged to the branch it is about.
		if after.Status != "active" || after.Calls != before.Calls+1 || after.UsageByUpstream["replay"] != before.UsageByUpstream["replay"] || after.Deadline != before.Deadline {
			t.Errorf("session %d's branch after the daemon was killed:\n before %+v\n after  %+v", i, before, after)
		}
		if tree := foldSessionTree(ctx, t, a.peer); tree.Tree.BranchID != done[i].session || tree.Innermost != done[i].branch {
			t.Errorf("session %d resumed as %s (innermost %s), want %s (innermost %s)", i, tree.Tree.BranchID, tree.Innermost, done[i].session, done[i].branch)
		}
		if r := foldCall(ctx, t, a.peer, "replay__emit", map[string]any{"bytes": 80, "kind": "log"}); r.isError {
			t.Errorf("session %d: a call after the daemon restarted: %s", i, r.text())
		}
		// Since "before": its own status answer, the one of "after", the
		// session tree's and the emit.
		if st := foldStatus(ctx, t, a.peer, done[i].branch); st.Calls != before.Calls+4 || st.UsageByUpstream["replay"] <= before.UsageByUpstream["replay"] {
			t.Errorf("session %d: the call after the restart was not charged to its branch: %d calls (want %d), replay usage %d (before %d)", i, st.Calls, before.Calls+4, st.UsageByUpstream["replay"], before.UsageByUpstream["replay"])
		}
	}
	d := daemonsOf(t, state)
	if len(d) != 1 || d[0] == daemons[0] {
		t.Fatalf("after the daemon was killed: daemons %v, want one new one", d)
	}
	for i := 1; i < 3; i++ {
		if got := holdsPipe(t, d[0], procs[i].k.cmd.Process.Pid); got != fds {
			t.Errorf("session %d after the restart: the new daemon holds the agent's stdin: %v, want %v", i, got, fds)
		}
	}
}

// pipeAgent is an agent on raw pipes to a stdio foldproxy process: it
// writes what it is told, byte for byte, and sees how much of it the other
// end has read.
type pipeAgent struct {
	w   *os.File // the write end of the process's stdin
	got chan string
}

// startPipeAgent runs "foldproxy serve" (the default mode) on state with
// raw pipes, does the handshake and waits until tools/list names tool.
func startPipeAgent(ctx context.Context, t *testing.T, cfg, state, tool string) (*pipeAgent, *process) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(proxyBin(t), "serve", "--config", cfg, "--state", state)
	cmd.Stdin = r
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := startProcess(t, "foldproxy stdio", cmd)
	r.Close()
	t.Cleanup(func() { w.Close() })
	a := &pipeAgent{w: w, got: make(chan string, 64)}
	go func() {
		br := bufio.NewReaderSize(stdout, 1<<20)
		for {
			line, err := br.ReadString('\n')
			if l := strings.TrimRight(line, "\n"); l != "" {
				a.got <- l
			}
			if err != nil {
				close(a.got)
				return
			}
		}
	}()
	a.send(t, `{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"`+protocolVersion+`","capabilities":{},"clientInfo":{"name":"half","version":"1"}}}`+"\n")
	a.answer(ctx, t, `"init"`)
	a.send(t, `{"jsonrpc":"2.0","method":"notifications/initialized"}`+"\n")
	for i := 0; ; i++ {
		id := fmt.Sprintf(`"list%d"`, i)
		a.send(t, `{"jsonrpc":"2.0","id":`+id+`,"method":"tools/list"}`+"\n")
		if strings.Contains(a.answer(ctx, t, id), `"`+tool+`"`) {
			return a, p
		}
		select {
		case <-ctx.Done():
			t.Fatalf("tools/list does not name %s", tool)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (a *pipeAgent) send(t *testing.T, s string) {
	t.Helper()
	if _, err := io.WriteString(a.w, s); err != nil {
		t.Fatalf("writing to foldproxy's stdin: %v", err)
	}
}

// answer returns the message that answers id, skipping the others.
func (a *pipeAgent) answer(ctx context.Context, t *testing.T, id string) string {
	t.Helper()
	for {
		select {
		case l, ok := <-a.got:
			if !ok {
				t.Fatalf("foldproxy's stdout ended before the answer to %s", id)
			}
			if strings.Contains(l, `"id":`+id) && !strings.Contains(l, `"method"`) {
				return l
			}
		case <-ctx.Done():
			t.Fatalf("no answer to %s: %v", id, ctx.Err())
		}
	}
}

// waitTaken waits until every byte written to stdin has been read by the
// other end (the pipe holds none).
func (a *pipeAgent) waitTaken(ctx context.Context, t *testing.T) {
	t.Helper()
	for {
		n, err := unix.IoctlGetInt(int(a.w.Fd()), unix.TIOCINQ) // FIONREAD
		if err != nil {
			t.Fatalf("FIONREAD on the stdin pipe: %v", err)
		}
		if n == 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%d bytes written to stdin were never read", n)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// TestDaemonDiesWhileARequestIsHalfRead: the daemon serving an agent's
// pipes itself is killed (kill -9) when it has read half of a request, and
// when it has taken a request and not answered it. The half is read again
// by the next daemon with the rest, and the request answered; the one in
// flight is answered with an error that says it may have run. Nothing is
// left without an answer.
func TestDaemonDiesWhileARequestIsHalfRead(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	cfg := writeConfig(t, map[string]any{
		"replay": replayEntry(t),
		"flaky":  stdioEntry(helperBin(t, "flaky"), "-crash-every", "0"),
	}, nil)
	state := t.TempDir()
	t.Cleanup(func() { waitNoDaemon(testContext(t, 60*time.Second), t, state) })
	a, p := startPipeAgent(ctx, t, cfg, state, "flaky__slow")
	daemons := daemonsOf(t, state)
	if len(daemons) != 1 || !holdsPipe(t, daemons[0], p.cmd.Process.Pid) {
		t.Fatalf("daemons %v; want one, holding the agent's stdin", daemons)
	}
	killDaemon := func() {
		t.Helper()
		d := daemonsOf(t, state)
		if len(d) != 1 {
			t.Fatalf("daemons %v, want one", d)
		}
		if err := syscall.Kill(d[0], syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		for processAlive(d[0]) {
			select {
			case <-ctx.Done():
				t.Fatalf("the daemon %d survived kill -9", d[0])
			case <-time.After(20 * time.Millisecond):
			}
		}
	}

	// Half a request, read by the daemon: then it dies, and the agent
	// sends the rest.
	req := `{"jsonrpc":"2.0","id":"half","method":"tools/call","params":{"name":"replay__emit","arguments":{"bytes":123,"kind":"log"}}}` + "\n"
	a.send(t, req[:61])
	a.waitTaken(ctx, t)
	killDaemon()
	a.send(t, req[61:])
	if got := a.answer(ctx, t, `"half"`); !strings.Contains(got, `"result"`) || strings.Contains(got, `"isError":true`) {
		t.Errorf("the request read in half when the daemon died was answered with %.300s, want its result", got)
	}

	// A request the daemon took and is serving (its upstream said it
	// started): the next daemon cannot know whether it ran.
	a.send(t, `{"jsonrpc":"2.0","id":"slow","method":"tools/call","params":{"name":"flaky__slow","arguments":{"ms":60000},"_meta":{"progressToken":"p1"}}}`+"\n")
	for started := false; !started; {
		select {
		case l := <-a.got:
			started = strings.Contains(l, `"notifications/progress"`)
		case <-ctx.Done():
			t.Fatal("the slow call never started")
		}
	}
	killDaemon()
	if got := a.answer(ctx, t, `"slow"`); !strings.Contains(got, `"error"`) || !strings.Contains(got, "may or may not have been carried out") {
		t.Errorf("the request in flight when the daemon died was answered with %.300s, want an error saying it may have run", got)
	}
	// The session goes on with the next daemon, which holds the pipes.
	a.send(t, `{"jsonrpc":"2.0","id":"after","method":"tools/call","params":{"name":"replay__emit","arguments":{"bytes":10}}}`+"\n")
	if got := a.answer(ctx, t, `"after"`); !strings.Contains(got, `"result"`) {
		t.Errorf("a call after the second restart: %.300s", got)
	}
	if d := daemonsOf(t, state); len(d) != 1 || !holdsPipe(t, d[0], p.cmd.Process.Pid) {
		t.Errorf("after the restarts: daemons %v; want one, holding the agent's stdin", d)
	}
}
