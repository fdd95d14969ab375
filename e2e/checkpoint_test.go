package e2e

import (
	"bytes"
	"encoding/json"
	"math"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// Issue 26: checkpoints end to end over the real binary. A session saves
// a checkpoint with an open branch; the proxy is killed with -9; a new
// session of a new proxy on the same state resumes it: the open branch is
// there again with the budget and the time it had left, and goes on
// working; a proxy of another principal on the same state is refused.

// foldCheckpoint is what checkpoint_resume answers, as far as the test
// reads it.
type foldCheckpoint struct {
	Summary  string `json:"summary"`
	Context  string `json:"context"`
	Branches []struct {
		BranchID       string  `json:"branch_id"`
		Was            string  `json:"was"`
		Budget         int     `json:"budget"`
		TimeoutSeconds float64 `json:"timeout_seconds"`
	} `json:"branches"`
}

func TestCheckpointAcrossKill9(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	servers := map[string]any{"replay": replayEntry(t)}
	fold := map[string]any{"createsPerMinute": 100, "defaultTimeout": "600s", "maxTimeout": "600s"}
	cfg := writeConfig(t, servers, map[string]any{"fold": fold, "memory": map[string]any{"principal": "alice"}})
	state := t.TempDir()

	// Two steps of real output, small enough for the branch's budget.
	tr := loadTrajectories(t)[0]
	var steps []int
	for i, st := range tr.Steps {
		if n := len(st.Output); n > 200 && n < 4000 && len(steps) < 2 {
			steps = append(steps, i)
		}
	}
	if len(steps) < 2 {
		t.Fatalf("trajectory %s has no two small steps", tr.ID)
	}
	p, k := startKillableProxy(t, "foldproxy (saving)", cfg, state)
	foldWaitTools(ctx, t, p, "replay__run", "checkpoint_save", "checkpoint_list", "checkpoint_resume")
	var cr foldCreated
	foldMust(ctx, t, p, "branch_create", map[string]any{"description": "explore the astropy units code", "budget": 6000, "timeout_seconds": 500, "inject_memories": false}, &cr)
	if r := foldCall(ctx, t, p, "replay__run", map[string]any{"trajectory": tr.ID, "step": steps[0], "branch_id": cr.BranchID}); r.isError {
		t.Fatalf("a call in the branch: %s", r.text())
	}
	before := foldStatus(ctx, t, p, cr.BranchID)
	var saved struct {
		CheckpointID string `json:"checkpoint_id"`
		OpenBranches int    `json:"open_branches"`
	}
	foldMust(ctx, t, p, "checkpoint_save", map[string]any{
		"name": "units investigation", "summary": "Reading astropy/units; the conversion bug is in core.py.", "context": "Next: check Quantity.to().",
	}, &saved)
	if saved.OpenBranches != 1 || saved.CheckpointID == "" {
		t.Fatalf("checkpoint_save: %+v", saved)
	}
	kill9(ctx, t, k.cmd, k.done)

	// The person's view of the store a killed proxy left: the checkpoint,
	// with what the branch had left when it was saved.
	var stored struct {
		Principal string `json:"principal"`
		Branches  []struct {
			ID       string `json:"id"`
			Budget   int    `json:"budget"`
			Used     int    `json:"used"`
			Status   string `json:"status"`
			TimeLeft string `json:"timeLeft"`
		} `json:"branches"`
	}
	out := runFoldproxy(t, "checkpoint", "show", saved.CheckpointID, "--state", state)
	if err := json.Unmarshal(out, &stored); err != nil {
		t.Fatalf("checkpoint show: %v\n%s", err, out)
	}
	var left time.Duration
	for _, b := range stored.Branches {
		if b.ID == cr.BranchID {
			if b.Status != "active" || b.Budget != 6000 || b.Used < before.BudgetUsed {
				t.Fatalf("the saved branch: %+v; before the save it had used %d", b, before.BudgetUsed)
			}
			d, err := time.ParseDuration(b.TimeLeft)
			if err != nil || d <= 0 || d > 500*time.Second {
				t.Fatalf("the saved branch's time left %q: %v", b.TimeLeft, err)
			}
			left = d
			before.BudgetUsed = b.Used
		}
	}
	if left == 0 || stored.Principal != "alice" {
		t.Fatalf("the checkpoint does not hold the open branch or its principal: %s", out)
	}

	// A new proxy, a new session: resume.
	p2, k2 := startKillableProxy(t, "foldproxy (resuming)", cfg, state)
	foldWaitTools(ctx, t, p2, "replay__run", "checkpoint_resume")
	var list struct {
		Checkpoints []struct {
			CheckpointID string `json:"checkpoint_id"`
			Name         string `json:"name"`
		} `json:"checkpoints"`
	}
	foldMust(ctx, t, p2, "checkpoint_list", nil, &list)
	if len(list.Checkpoints) != 1 || list.Checkpoints[0].CheckpointID != saved.CheckpointID || list.Checkpoints[0].Name != "units investigation" {
		t.Fatalf("checkpoint_list after the restart: %+v", list)
	}
	var res foldCheckpoint
	foldMust(ctx, t, p2, "checkpoint_resume", map[string]any{"checkpoint_id": saved.CheckpointID, "level": "context"}, &res)
	if !strings.Contains(res.Summary, "core.py") || res.Context != "Next: check Quantity.to()." || len(res.Branches) != 1 || res.Branches[0].Was != cr.BranchID {
		t.Fatalf("checkpoint_resume: %+v", res)
	}
	nb := res.Branches[0]
	if nb.Budget != 6000-before.BudgetUsed || math.Abs(nb.TimeoutSeconds-left.Seconds()) > 1e-6 {
		t.Fatalf("the re-created branch has budget %d and %v s; want the %d tokens and %v it had left", nb.Budget, nb.TimeoutSeconds, 6000-before.BudgetUsed, left)
	}
	st := foldStatus(ctx, t, p2, nb.BranchID)
	if st.Status != "active" || st.BudgetTotal != nb.Budget || st.BudgetUsed != 0 || st.Depth != 1 {
		t.Fatalf("the re-created branch: %+v", st)
	}
	if dl, err := time.Parse(time.RFC3339, st.Deadline); err != nil || dl.Before(time.Now().Add(-time.Minute)) {
		t.Fatalf("the re-created branch's deadline %q: %v", st.Deadline, err)
	}
	// The branch goes on: its calls are charged to it, and it returns.
	if r := foldCall(ctx, t, p2, "replay__run", map[string]any{"trajectory": tr.ID, "step": steps[1], "branch_id": nb.BranchID}); r.isError {
		t.Fatalf("a call in the resumed branch: %s", r.text())
	}
	if st2 := foldStatus(ctx, t, p2, nb.BranchID); st2.BudgetUsed == 0 || st2.UsageByTool["replay/run"] == 0 {
		t.Fatalf("the resumed branch was not charged: %+v", st2)
	}
	foldMust(ctx, t, p2, "branch_return", map[string]any{"branch_id": nb.BranchID, "message": "core.py converts twice"}, nil)
	stopStdioProxy(ctx, t, p2, k2)

	// Another principal on the same state sees no checkpoint and is
	// refused.
	other := writeConfig(t, servers, map[string]any{"fold": fold, "memory": map[string]any{"principal": "mallory"}})
	p3, k3 := startKillableProxy(t, "foldproxy (another principal)", other, state)
	foldWaitTools(ctx, t, p3, "checkpoint_resume")
	foldMust(ctx, t, p3, "checkpoint_list", nil, &list)
	if len(list.Checkpoints) != 0 {
		t.Fatalf("another principal lists %+v", list)
	}
	r := foldCall(ctx, t, p3, "checkpoint_resume", map[string]any{"checkpoint_id": saved.CheckpointID})
	if !r.isError || !strings.HasPrefix(r.text(), "ErrCheckpointNotFound") {
		t.Fatalf("another principal's resume: isError %v, %s", r.isError, r.text())
	}
	stopStdioProxy(ctx, t, p3, k3)
}

// runFoldproxy runs the binary with args and returns its stdout.
func runFoldproxy(t testing.TB, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(proxyBin(t), args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("foldproxy %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.Bytes()
}
