package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"

	"github.com/foldproxy/foldproxy/fold"
	"github.com/foldproxy/foldproxy/fold/store"
	"github.com/foldproxy/foldproxy/intercept"
)

// Issue 3: kill -9 in the middle of a branch, then a restart on the same
// state folder.

// kill9 sends SIGKILL to the proxy process alone (its upstreams see their
// stdin close) and waits until it is gone.
func kill9(ctx context.Context, t testing.TB, cmd *exec.Cmd, done <-chan struct{}) {
	t.Helper()
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 %d: %v", cmd.Process.Pid, err)
	}
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatalf("foldproxy (pid %d) did not die after SIGKILL", cmd.Process.Pid)
	}
}

// startFoldHTTP runs "foldproxy serve --listen addr --state dir" and waits
// until it listens.
func startFoldHTTP(ctx context.Context, t testing.TB, cfg, addr, state string) *process {
	t.Helper()
	cmd := exec.Command(proxyBin(t), "serve", "--config", cfg, "--listen", addr, "--state", state)
	p := startProcess(t, "foldproxy --listen "+addr, cmd)
	waitListening(ctx, t, p, addr)
	return p
}

// resumedHTTPClient joins an existing HTTP session by its Mcp-Session-Id,
// without a new initialize, as a client does after the server restarted.
func resumedHTTPClient(t testing.TB, url, session string) *peer {
	t.Helper()
	tr, err := transport.NewStreamableHTTP(url, transport.WithSession(session), transport.WithHTTPTimeout(time.Minute))
	if err != nil {
		t.Fatalf("streamable HTTP client for %s: %v", url, err)
	}
	p := &peer{name: "resumed " + session, agent: newAgent(), notes: newRecorder()}
	p.Client = client.NewClient(tr, client.WithSession())
	life, stop := context.WithCancel(context.Background())
	if err := p.Start(life); err != nil {
		stop()
		t.Fatalf("starting the resumed client: %v", err)
	}
	t.Cleanup(func() { _ = p.Close(); stop() })
	return p
}

// TestFoldRestartHTTPResumes: over HTTP, a branch survives kill -9 of the
// proxy; the client's session resumes on the restarted proxy with the same
// branch, and the branch's deadline still fires.
func TestFoldRestartHTTPResumes(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	c := foldCounter(t)
	cfg := foldProxyConfig(t, map[string]any{"replay": replayEntry(t)}, map[string]any{"defaultTimeout": "60s"}, false)
	state := t.TempDir()
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	url := "http://" + addr + "/mcp"

	first := startFoldHTTP(ctx, t, cfg, addr, state)
	p := directHTTPClient(t, nil, url)
	foldWaitTools(ctx, t, p, "replay__emit")
	session := p.GetTransport().(*transport.StreamableHTTP).GetSessionId()
	if session == "" {
		t.Fatal("the HTTP client has no Mcp-Session-Id")
	}
	// The model never sees the session id; the session's root stands for it.
	root := foldSessionTree(ctx, t, p).Tree.BranchID

	// The deadline must outlive the kill and the restart, and still come
	// during the test.
	const timeout = 8
	var cr foldCreated
	foldMust(ctx, t, p, "branch_create", map[string]any{"description": "survive a crash", "budget": 5000, "timeout_seconds": timeout}, &cr)
	r := foldCall(ctx, t, p, "replay__emit", map[string]any{"bytes": 1500, "kind": "log", "branch_id": cr.BranchID})
	if r.isError {
		t.Fatalf("emit in the branch: %s", r.text())
	}
	tokens := resultTokens(t, c, r.raw)
	before := foldStatus(ctx, t, p, cr.BranchID)
	if before.Status != "active" || before.UsageByTool["replay/emit"] != tokens || before.BudgetUsed != tokens {
		t.Fatalf("before the kill: %+v, want active with 1 call and %d tokens", before, tokens)
	}

	kill9(ctx, t, first.cmd, first.done)
	startFoldHTTP(ctx, t, cfg, addr, state)
	q := resumedHTTPClient(t, url, session)

	// On a loaded machine the deadline may pass while the proxy restarts:
	// then recovery force-returns the branch from the store, which is the
	// same re-armed deadline firing early. Both orders are checked; the
	// test waits on the branch's state, never on a margin of time.
	after := foldStatus(ctx, t, q, cr.BranchID)
	// The branch paid for the status answer before the kill: that answer,
	// not this one, is in its figures now.
	if (after.Status != "active" && (after.Status != "forced" || after.Reason != "deadline passed")) ||
		after.BudgetUsed <= before.BudgetUsed || after.BudgetTotal != before.BudgetTotal ||
		after.Calls != before.Calls+1 || after.Deadline != before.Deadline || after.UsageByTool["replay/emit"] != tokens {
		t.Errorf("branch_status after the restart differs:\n before %+v\n after  %+v", before, after)
	}
	if tree := foldSessionTree(ctx, t, q); tree.Tree.BranchID != root || (after.Status == "active" && tree.Innermost != cr.BranchID) {
		t.Errorf("resumed session tree: root %s, innermost %s; want %s, %s", tree.Tree.BranchID, tree.Innermost, root, cr.BranchID)
	}

	// The deadline was re-armed from the store.
	dctx, cancel := context.WithTimeout(ctx, (timeout+30)*time.Second)
	defer cancel()
	for {
		st := foldStatus(ctx, t, q, cr.BranchID)
		if st.Status != "active" {
			if st.Status != "forced" || st.Reason != "deadline passed" || st.UsageByTool["replay/emit"] != tokens {
				t.Errorf("after the deadline: %s (%s) with %v; want forced (deadline passed) with %d tokens of replay/emit", st.Status, st.Reason, st.UsageByTool, tokens)
			}
			break
		}
		select {
		case <-dctx.Done():
			t.Fatalf("the branch's deadline (%s) did not fire after the restart: %v", before.Deadline, dctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
	r = foldCall(ctx, t, q, "replay__emit", map[string]any{"bytes": 10, "branch_id": cr.BranchID})
	if !r.isError || !strings.Contains(r.text(), "ErrBranchClosed") || !strings.Contains(r.text(), "deadline passed") {
		t.Errorf("a call to the branch after its deadline: %q (isError %v), want an ErrBranchClosed refusal naming the deadline", r.text(), r.isError)
	}
}

func mapsEqual(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// killableStdio is a stdio transport to foldproxy whose process the test
// can kill -9.
type killableStdio struct {
	*transport.Stdio
	cmd    *exec.Cmd
	done   chan struct{}
	stderr *syncBuffer
}

// startKillableProxy runs "foldproxy serve --standalone --config cfg --state
// state" over stdio (the process that holds the store, not a relay to the
// project's daemon: daemon_test.go kills those) and connects an mcp-go
// client to it.
func startKillableProxy(t testing.TB, name, cfg, state string) (*peer, *killableStdio) {
	t.Helper()
	return startKillableProxyEnv(t, name, cfg, state, nil)
}

// startKillableProxyEnv is startKillableProxy with env added to the
// proxy's environment.
func startKillableProxyEnv(t testing.TB, name, cfg, state string, env []string) (*peer, *killableStdio) {
	t.Helper()
	stderr := &syncBuffer{}
	dumpOnFailure(t, name+" stderr", stderr)
	k := &killableStdio{done: make(chan struct{}), stderr: stderr}
	k.Stdio = transport.NewStdioWithOptions(proxyBin(t), env, []string{"serve", "--standalone", "--config", cfg, "--state", state}, transport.WithCommandFunc(
		func(ctx context.Context, command string, env []string, args []string) (*exec.Cmd, error) {
			cmd := exec.CommandContext(ctx, command, args...)
			cmd.Env = append(os.Environ(), env...)
			cmd.Stderr = stderr
			ownProcessGroup(cmd)
			cmd.Cancel = func() error { return killGroup(cmd) }
			k.cmd = cmd
			return cmd, nil
		}))
	t.Cleanup(func() {
		if k.cmd != nil {
			if err := killGroup(k.cmd); err != nil {
				t.Logf("%s: %v", name, err)
			}
		}
	})
	p := connect(t, name, k, nil)
	if k.cmd == nil || k.cmd.Process == nil {
		t.Fatalf("%s: no process", name)
	}
	// The transport waits for the process: watch for its death in /proc
	// rather than with a second Wait.
	go watchExit(k.cmd.Process.Pid, k.done)
	return p, k
}

// reportJSON is what "foldproxy report --state DIR --audit FILE --json"
// prints, as far as the test reads it.
type reportJSON struct {
	Records  int `json:"records"`
	Branches []struct {
		Session string `json:"session"`
		Branch  string `json:"branch"`
		Status  string `json:"status"`
		Reason  string `json:"reason"`
		Calls   int    `json:"calls"`
	} `json:"branches"`
	Store *struct {
		Branches []struct {
			Session     string   `json:"session"`
			Branch      string   `json:"branch"`
			Parent      string   `json:"parent"`
			Depth       int      `json:"depth"`
			Status      string   `json:"status"`
			Reason      string   `json:"reason"`
			BudgetUsed  int      `json:"budget_used"`
			BudgetTotal int      `json:"budget_total"`
			Calls       int      `json:"calls"`
			Archived    int      `json:"archived_calls"`
			CutHandles  []string `json:"cut_handles"`
		} `json:"branches"`
	} `json:"store"`
}

// reportState runs "foldproxy report --state state --json" and returns
// its store report; what names the moment in a failure.
func reportState(ctx context.Context, t *testing.T, state, what string) reportJSON {
	t.Helper()
	cmd := exec.CommandContext(ctx, proxyBin(t), "report", "--state", state, "--json")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("foldproxy report --state %s: %v\n%s", what, err, stderr.String())
	}
	var rep reportJSON
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil || rep.Store == nil {
		t.Fatalf("foldproxy report --state --json %s: %v\n%s", what, err, truncate(stdout.String(), 500))
	}
	return rep
}

// TestFoldRestartStdioFailsOrphans: over stdio, kill -9 in the middle of a
// branch; the restarted proxy closes the orphaned branches as failed
// ("proxy restarted"), and their records, archives and audit entries
// survive: foldproxy report --state reads them back once the proxy stopped.
func TestFoldRestartStdioFailsOrphans(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	cfg := foldProxyConfig(t, map[string]any{"replay": replayEntry(t)}, map[string]any{"defaultTimeout": "120s"}, false)
	state := t.TempDir()

	p, k := startKillableProxy(t, "foldproxy stdio (first)", cfg, state)
	foldWaitTools(ctx, t, p, "replay__emit")
	root := foldSessionTree(ctx, t, p).Tree.BranchID // the model never sees the session id
	var outer, inner foldCreated
	foldMust(ctx, t, p, "branch_create", map[string]any{"description": "outer work", "budget": 6000}, &outer)
	const emitted = 2000
	if r := foldCall(ctx, t, p, "replay__emit", map[string]any{"bytes": emitted, "kind": "code"}); r.isError {
		t.Fatalf("emit in the outer branch: %s", r.text())
	}
	foldMust(ctx, t, p, "branch_create", map[string]any{"description": "inner work", "budget": 1000}, &inner)
	if r := foldCall(ctx, t, p, "replay__emit", map[string]any{"bytes": 300, "kind": "text"}); r.isError {
		t.Fatalf("emit in the inner branch: %s", r.text())
	}
	before := map[string]foldView{
		outer.BranchID: foldStatus(ctx, t, p, outer.BranchID),
		inner.BranchID: foldStatus(ctx, t, p, inner.BranchID),
	}
	for id, st := range before {
		if st.Status != "active" || st.UsageByTool["replay/emit"] == 0 {
			t.Fatalf("branch %s before the kill: %+v, want active with one call", id, st)
		}
	}

	kill9(ctx, t, k.cmd, k.done)

	// The restart fails the orphans before it serves; then it is stopped
	// cleanly, which releases the store.
	p2, k2 := startKillableProxy(t, "foldproxy stdio (restarted)", cfg, state)
	foldWaitTools(ctx, t, p2, "replay__emit")
	if r2 := foldSessionTree(ctx, t, p2).Tree.BranchID; r2 == root {
		t.Fatalf("the restarted stdio proxy reused the session of root %s", root)
	}
	r := foldCall(ctx, t, p2, "branch_status", map[string]any{"branch_id": outer.BranchID})
	if !r.isError || !strings.Contains(r.text(), "ErrBranchNotFound") {
		t.Errorf("a new session saw the old session's branch: %q", r.text())
	}
	if err := p2.Close(); err != nil {
		t.Logf("closing the restarted proxy's client: %v", err)
	}
	select {
	case <-k2.done:
	case <-ctx.Done():
		t.Fatal("the restarted proxy did not exit when its stdin closed")
	}

	// Read the store and the audit log back with the real binary. The
	// operator's report names sessions: find the first one's by its branch.
	audit := filepath.Join(state, "audit.jsonl")
	session := ""
	{
		all := reportState(ctx, t, state, "after the restart")
		for _, b := range all.Store.Branches {
			if b.Branch == outer.BranchID {
				session = b.Session
			}
		}
		if session == "" {
			t.Fatalf("the store does not list branch %s: %+v", outer.BranchID, all.Store.Branches)
		}
	}
	cmd := exec.CommandContext(ctx, proxyBin(t), "report", "--state", state, "--audit", audit, "--session", session, "--json")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("foldproxy report --state: %v\n%s", err, stderr.String())
	}
	var rep reportJSON
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("report --json: %v\n%s", err, stdout.String())
	}
	if rep.Store == nil {
		t.Fatalf("report --state printed no store section:\n%s", stdout.String())
	}
	seen := map[string]bool{}
	for _, b := range rep.Store.Branches {
		if b.Session != session {
			t.Errorf("report --session %s listed a branch of session %s", session, b.Session)
		}
		want, ok := before[b.Branch]
		if !ok {
			continue
		}
		seen[b.Branch] = true
		if b.Status != "failed" || b.Reason != "proxy restarted" {
			t.Errorf("branch %s in the store: %s (%s), want failed (proxy restarted)", b.Branch, b.Status, b.Reason)
		}
		// The store holds the status answer the branch paid for as well.
		if b.BudgetUsed <= want.BudgetUsed || b.BudgetTotal != want.BudgetTotal || b.Calls != want.Calls+1 || b.Archived != b.Calls || b.Depth != want.Depth || b.Parent != want.Parent {
			t.Errorf("branch %s in the store: %+v; before the kill it was %+v", b.Branch, b, want)
		}
	}
	if len(seen) != 2 {
		t.Errorf("the store lists %v of the two branches:\n%s", seen, stdout.String())
	}
	for _, b := range rep.Branches { // the audit side of the report
		if _, ok := before[b.Branch]; ok && (b.Status != "failed" || b.Reason != "proxy restarted" || b.Calls != 1) {
			t.Errorf("audit report of %s: %s (%s), %d calls; want failed (proxy restarted), 1 call", b.Branch, b.Status, b.Reason, b.Calls)
		}
	}

	// The audit log holds the calls made before the kill, and the events.
	files, err := intercept.AuditFiles(audit)
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]int{}
	var events []string
	err = intercept.ReadAudit(files, func(rec intercept.Record) error {
		if rec.Session != session {
			return nil
		}
		switch rec.Kind {
		case intercept.KindCall:
			if rec.Tool == "emit" && rec.Outcome == intercept.OutcomeOK {
				calls[rec.Branch]++
			}
		case intercept.KindBranch:
			events = append(events, rec.Event+" "+rec.Branch+" "+rec.Reason)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for id := range before {
		if calls[id] != 1 {
			t.Errorf("the audit log holds %d emit calls of %s, want the one made before the kill", calls[id], id)
		}
		for _, ev := range []string{"created " + id + " ", "failed " + id + " proxy restarted"} {
			if !slices.Contains(events, ev) {
				t.Errorf("the audit log lacks the event %q; it has %q", ev, events)
			}
		}
	}

	// The archive is readable: the outer branch's call holds what it got.
	st, err := store.OpenBadgerReadOnly(filepath.Join(state, "badger"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	all, err := st.Calls(ctx, outer.BranchID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Beside the emit, the outer branch archived the answers it paid for
	// (the inner branch's create, the status answer about it).
	var recs []*fold.CallRecord
	for _, r := range all {
		if r.Upstream != "foldproxy" {
			recs = append(recs, r)
		}
	}
	if len(recs) != 1 {
		t.Fatalf("archive of %s: %d upstream calls of %d; want 1", outer.BranchID, len(recs), len(all))
	}
	var res struct {
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
	}
	if err := json.Unmarshal([]byte(recs[0].Result), &res); err != nil || len(res.Content) == 0 || len(res.Content[0].Text) != emitted {
		t.Errorf("the archived result of emit(%d) is %s (%v)", emitted, truncate(recs[0].Result, 200), err)
	}
}
