package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"
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
