package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/foldproxy/foldproxy/fold/store"
)

// TestReportAfterKill9: foldproxy report --state reads a store that a
// kill -9 left open, without the proxy ever starting again; while the proxy
// runs it says the store is busy and names the process.
func TestReportAfterKill9(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	cfg := foldProxyConfig(t, map[string]any{"replay": replayEntry(t)}, map[string]any{"defaultTimeout": "120s"}, false)
	state := t.TempDir()

	p, k := startKillableProxy(t, "foldproxy stdio (killed)", cfg, state)
	foldWaitTools(ctx, t, p, "replay__emit")
	var br foldCreated
	foldMust(ctx, t, p, "branch_create", map[string]any{"description": "work before the kill", "budget": 6000}, &br)
	if r := foldCall(ctx, t, p, "replay__emit", map[string]any{"bytes": 1500, "kind": "code"}); r.isError {
		t.Fatalf("emit in the branch: %s", r.text())
	}
	before := foldStatus(ctx, t, p, br.BranchID)
	if before.Status != "active" || before.BudgetUsed == 0 {
		t.Fatalf("the branch before the kill: %+v", before)
	}

	report := func() (reportJSON, bool, string, error) {
		cmd := exec.CommandContext(ctx, proxyBin(t), "report", "--state", state, "--json")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var rep reportJSON
		var rec struct {
			Store struct {
				Recovered bool `json:"recovered"`
			} `json:"store"`
		}
		if err == nil {
			if jerr := json.Unmarshal(stdout.Bytes(), &rep); jerr != nil || rep.Store == nil {
				t.Fatalf("report --json: %v\n%s", jerr, stdout.String())
			}
			if jerr := json.Unmarshal(stdout.Bytes(), &rec); jerr != nil {
				t.Fatal(jerr)
			}
		}
		return rep, rec.Store.Recovered, stderr.String(), err
	}

	// The proxy is alive: the report refuses and names it.
	if _, _, stderr, err := report(); err == nil || !strings.Contains(stderr, "ErrStoreBusy") || !strings.Contains(stderr, fmt.Sprintf("process %d", k.cmd.Process.Pid)) {
		t.Errorf("report --state while the proxy runs: %v, %q; want ErrStoreBusy naming process %d", err, stderr, k.cmd.Process.Pid)
	}

	kill9(ctx, t, k.cmd, k.done)

	rep, recovered, stderr, err := report()
	if err != nil {
		t.Fatalf("report --state after kill -9: %v\n%s", err, stderr)
	}
	if !recovered {
		t.Errorf("report --state after kill -9 did not say it recovered the store")
	}
	found := false
	for _, b := range rep.Store.Branches {
		if b.Branch != br.BranchID {
			continue
		}
		found = true
		// The store holds the status answer the branch paid for as well.
		if b.Status != "active" || b.BudgetUsed <= before.BudgetUsed || b.BudgetTotal != before.BudgetTotal || b.Calls != before.Calls+1 || b.Archived != b.Calls || b.Depth != 1 {
			t.Errorf("branch %s in the store after kill -9: %+v; before the kill it was %+v", b.Branch, b, before)
		}
	}
	if !found {
		t.Fatalf("the report does not list branch %s: %+v", br.BranchID, rep.Store.Branches)
	}

	// Recovered once, the store is clean: the next report reads it
	// read-only with the same figures.
	again, recovered, stderr, err := report()
	if err != nil || recovered || len(again.Store.Branches) != len(rep.Store.Branches) {
		t.Errorf("the second report: %v (recovered %v), %d branches, want %d read-only\n%s", err, recovered, len(again.Store.Branches), len(rep.Store.Branches), stderr)
	}
}

// TestKill9BetweenReplyAndCommit: the store's write-ahead log is what makes
// a result durable before the agent hears of it (issue 13's write-behind).
// With the store's background committer held (FOLDPROXY_TEST_HOLD_STORE_COMMITS,
// read only by the binary the e2e tests build, with the tag foldproxy_e2e),
// foldproxy answers calls whose
// records are in the write-ahead log only, and is killed there: every
// answered call is archived when foldproxy report --state, which replays
// the log, reads the store.
func TestKill9BetweenReplyAndCommit(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	cfg := foldProxyConfig(t, map[string]any{"replay": replayEntry(t)}, map[string]any{"defaultTimeout": "120s"}, false)
	state := t.TempDir()

	p, k := startKillableProxyEnv(t, "foldproxy stdio (committer held, killed)", cfg, state, []string{"FOLDPROXY_TEST_HOLD_STORE_COMMITS=1"})
	foldWaitTools(ctx, t, p, "replay__emit")
	var br foldCreated
	foldMust(ctx, t, p, "branch_create", map[string]any{"description": "work the store has not committed", "budget": 20000}, &br)
	const calls = 6
	for i := range calls {
		if r := foldCall(ctx, t, p, "replay__emit", map[string]any{"bytes": 700 + 1000*i, "kind": "log"}); r.isError {
			t.Fatalf("emit %d in the branch: %s", i, r.text())
		}
	}
	kill9(ctx, t, k.cmd, k.done)

	files, _ := filepath.Glob(filepath.Join(state, "badger", "wal", "*.wal"))
	for _, f := range files {
		if fi, err := os.Stat(f); err == nil && fi.Mode().Perm() != 0o600 {
			t.Errorf("write-ahead log %s has mode %v, want 0600", f, fi.Mode().Perm())
		}
	}
	walBytes, err := store.WALBytes(filepath.Join(state, "badger"))
	if err != nil {
		t.Fatal(err)
	}
	if walBytes == 0 {
		t.Fatalf("the store's write-ahead log is empty after the kill: the window between reply and commit was not hit")
	}

	rep := reportState(ctx, t, state, "after kill -9")
	found := false
	for _, b := range rep.Store.Branches {
		if b.Branch != br.BranchID {
			continue
		}
		found = true
		if b.Calls != calls || b.Archived != calls || b.BudgetUsed == 0 || b.Status != "active" {
			t.Errorf("branch %s in the store after kill -9: %+v; want %d calls, all archived", b.Branch, b, calls)
		}
	}
	if !found {
		t.Fatalf("the report does not list branch %s (its creation was answered): %+v", br.BranchID, rep.Store.Branches)
	}
	if left, err := store.WALBytes(filepath.Join(state, "badger")); err != nil || left > 0 {
		t.Errorf("the write-ahead log still holds %d bytes (%v) after the report replayed and closed the store", left, err)
	}
	if !t.Failed() {
		t.Logf("killed with %d bytes in the store's write-ahead log; report --state found branch %s with its %d answered calls archived", walBytes, br.BranchID, calls)
	}
}
