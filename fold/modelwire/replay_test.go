package modelwire_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/foldproxy/foldproxy/e2e/replay"
	"github.com/foldproxy/foldproxy/e2e/trajectory"
	"github.com/foldproxy/foldproxy/fold"
	"github.com/foldproxy/foldproxy/fold/modelwire"
	"github.com/foldproxy/foldproxy/intercept/tokens"
	"github.com/foldproxy/foldproxy/policy"
)

// The trajectory replay: real agent tool output (SWE-style tasks), played
// by a scripted folding agent through the context manager with fold's real
// Manager as its state and the o200k_base counter. Exploration (reading,
// listing, searching) runs inside branches that return a short summary;
// everything else runs in the main thread. For every request the model
// would receive, it records the context size as sent (unfolded) and as
// forwarded (folded), and whether guidance fired; the same trajectories
// played by an agent that never branches show how often guidance fires
// where it is needed.

func loadTrajectories(t testing.TB) []trajectory.Trajectory {
	t.Helper()
	trajs, err := trajectory.LoadRepo()
	if err != nil {
		t.Fatalf("trajectory data: %v", err)
	}
	return trajs
}

// memoCounter memoizes a counter: the context manager counts a request
// message by message, so each request recounts only its new messages.
type memoCounter struct {
	c  *tokens.Counter
	mu sync.Mutex
	m  map[string]int
}

func (mc *memoCounter) CountText(s string) int {
	mc.mu.Lock()
	n, ok := mc.m[s]
	mc.mu.Unlock()
	if ok {
		return n
	}
	n = mc.c.CountText(s)
	mc.mu.Lock()
	mc.m[s] = n
	mc.mu.Unlock()
	return n
}

// exploring reports whether a command only looks around.
func exploring(cmd string) bool {
	f := strings.Fields(cmd)
	if len(f) == 0 || strings.Contains(cmd, ">") || strings.Contains(cmd, " -i") {
		return false
	}
	switch f[0] {
	case "cat", "sed", "grep", "nl", "ls", "find", "head", "tail", "git":
		return true
	}
	return false
}

// convo builds an Anthropic request the way Claude Code grows one.
type convo struct {
	msgs []json.RawMessage
	n    int
}

func (c *convo) add(v any) {
	b, _ := json.Marshal(v)
	c.msgs = append(c.msgs, b)
}

func (c *convo) call(name string, input any, result string, isErr bool) string {
	c.n++
	id := fmt.Sprintf("toolu_%04d", c.n)
	c.add(map[string]any{"role": "assistant", "content": []any{map[string]any{"type": "tool_use", "id": id, "name": name, "input": input}}})
	c.add(map[string]any{"role": "user", "content": []any{map[string]any{"type": "tool_result", "tool_use_id": id, "content": result, "is_error": isErr}}})
	return id
}

var replaySystem = json.RawMessage(`[{"type":"text","text":"You are a software engineering agent. Solve the task; use branches for exploration.","cache_control":{"type":"ephemeral"}}]`)
var replayTools = json.RawMessage(`[{"name":"Bash","input_schema":{"type":"object"}},{"name":"mcp__foldproxy__branch_create","input_schema":{"type":"object"}},{"name":"mcp__foldproxy__branch_return","input_schema":{"type":"object"}}]`)

func (c *convo) request() []byte {
	var b strings.Builder
	b.WriteString(`{"model":"replay","max_tokens":4096,"system":`)
	b.Write(replaySystem)
	b.WriteString(`,"tools":`)
	b.Write(replayTools)
	b.WriteString(`,"messages":[`)
	for i, m := range c.msgs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(m)
	}
	b.WriteString(`],"stream":true}`)
	return []byte(b.String())
}

type replayStats struct {
	requests, reminders, cuts, folds, branches int
	before, after                              int64 // summed over requests
	maxBefore, maxAfter                        int
	finalBefore, finalAfter                    int64 // last request of each trajectory
}

func TestTrajectoryReplay(t *testing.T) {
	trs := loadTrajectories(t)
	// The whole replay takes about a minute of CPU (much more under the
	// race detector): by default the first 6 trajectories are replayed,
	// all of them with FOLDPROXY_REPLAY=all (the figures in the README).
	full := os.Getenv("FOLDPROXY_REPLAY") == "all"
	if !full {
		trs = trs[:6]
	}
	base, err := tokens.NewCounter(policy.Tokens{})
	if err != nil {
		t.Fatal(err)
	}
	counter := &memoCounter{c: base, m: map[string]int{}}
	ctx := context.Background()
	opt := modelwire.Options{Count: counter.CountText}

	var folding, plain replayStats
	// The same two agents' requests billed under prompt caching, and the
	// same again with automatic folding on (its defaults).
	var billFolding, billPlain, billFoldingAuto, billPlainAuto replay.Meter
	for _, mt := range []*replay.Meter{&billFolding, &billPlain, &billFoldingAuto, &billPlainAuto} {
		mt.Count = counter
	}
	auto := opt
	auto.AutoFold = modelwire.AutoFold{Mode: modelwire.ModeOn}
	for _, tr := range trs {
		// A clock that moves two minutes per branch, so the creation rate
		// limit (per minute) never refuses the scripted agent.
		m, tool, now := replayManager(t, counter, tr.ID)
		st := m.ModelState()
		for _, mt := range []*replay.Meter{&billFolding, &billPlain, &billFoldingAuto, &billPlainAuto} {
			mt.Restart()
		}
		bill := func(mt *replay.Meter, c *convo, o modelwire.Options) {
			res, err := modelwire.Apply(ctx, modelwire.Anthropic, c.request(), st, o)
			if err != nil {
				t.Fatalf("%s: Apply: %v", tr.ID, err)
			}
			if err := mt.Add(res.Body); err != nil {
				t.Fatal(err)
			}
		}
		apply := func(s *replayStats, c *convo) modelwire.Result {
			res, err := modelwire.Apply(ctx, modelwire.Anthropic, c.request(), st, opt)
			if err != nil {
				t.Fatalf("%s: Apply: %v", tr.ID, err)
			}
			s.requests++
			s.before += int64(res.TokensBefore)
			s.after += int64(res.TokensAfter)
			s.maxBefore = max(s.maxBefore, res.TokensBefore)
			s.maxAfter = max(s.maxAfter, res.TokensAfter)
			if res.Guidance {
				s.reminders++
			}
			s.cuts += res.Cut
			if s == &plain {
				if err := billPlain.Add(res.Body); err != nil {
					t.Fatal(err)
				}
				bill(&billPlainAuto, c, auto)
			} else {
				if err := billFolding.Add(res.Body); err != nil {
					t.Fatal(err)
				}
				bill(&billFoldingAuto, c, auto)
			}
			return res
		}

		var fc, pc convo
		fc.add(map[string]any{"role": "user", "content": tr.Task})
		pc.add(map[string]any{"role": "user", "content": tr.Task})
		inBranch := false
		var explored []string
		var last modelwire.Result
		for i, step := range tr.Steps {
			out := step.Output
			if out == "" {
				out = "(no output)"
			}
			if step.ReturnCode != 0 {
				out += fmt.Sprintf("\nExit code %d", step.ReturnCode)
			}
			// The agent that never branches.
			pc.call("Bash", map[string]any{"command": step.Command}, out, step.ReturnCode != 0)
			apply(&plain, &pc)

			// The folding agent.
			groupStarts := exploring(step.Command) && i+1 < len(tr.Steps) && exploring(tr.Steps[i+1].Command)
			if !inBranch && groupStarts {
				*now = now.Add(2 * time.Minute)
				fc.call("mcp__foldproxy__branch_create", map[string]any{"description": "explore: " + step.Command}, tool(fold.ToolCreate,
					map[string]any{"description": "explore: " + clip(step.Command, 200), "budget": 12000}), false)
				apply(&folding, &fc)
				inBranch, explored = true, nil
				folding.branches++
			}
			fc.call("Bash", map[string]any{"command": step.Command}, out, step.ReturnCode != 0)
			last = apply(&folding, &fc)
			if inBranch {
				explored = append(explored, clip(step.Command, 60))
				if last.Cut > 0 {
					inBranch = false // force-returned: the agent goes on in the main thread
					continue
				}
				if i+1 == len(tr.Steps) || !exploring(tr.Steps[i+1].Command) {
					msg := fmt.Sprintf("Explored with %d commands (%s). Relevant: %s", len(explored), strings.Join(explored, "; "), clip(strings.TrimSpace(out), 160))
					fc.call("mcp__foldproxy__branch_return", map[string]any{"message": msg}, tool(fold.ToolReturn, map[string]any{"message": msg}), false)
					last = apply(&folding, &fc)
					inBranch = false
				}
			}
			if i%16 != 15 && i+1 < len(tr.Steps) {
				continue
			}
			if err := modelwire.Check(modelwire.Anthropic, last.Body); err != nil {
				t.Fatalf("%s step %d: invalid forwarded request: %v", tr.ID, i, err)
			}
		}
		folding.folds += len(last.Folded)
		folding.finalBefore += int64(last.TokensBefore)
		folding.finalAfter += int64(last.TokensAfter)
		plain.finalBefore += int64(plain.maxBefore)
		m.Close()
	}

	t.Logf("trajectories: %d; folding agent: %d requests, %d branches, %d folded at the end, %d cuts", len(trs), folding.requests, folding.branches, folding.folds, folding.cuts)
	t.Logf("context tokens per request, unfolded: mean %d, max %d; folded: mean %d, max %d (%.1f%% of unfolded)",
		folding.before/int64(folding.requests), folding.maxBefore, folding.after/int64(folding.requests), folding.maxAfter, 100*float64(folding.after)/float64(folding.before))
	t.Logf("last request of each trajectory: unfolded %d, folded %d tokens in total (%.1f%%)", folding.finalBefore, folding.finalAfter, 100*float64(folding.finalAfter)/float64(folding.finalBefore))
	t.Logf("guidance fired: folding agent %d of %d requests; agent that never branches %d of %d requests (mean context %d tokens)",
		folding.reminders, folding.requests, plain.reminders, plain.requests, plain.before/int64(plain.requests))
	for _, b := range []struct {
		name string
		mt   *replay.Meter
	}{{"agent that never branches", &billPlain}, {"the same, automatic folding on", &billPlainAuto},
		{"folding agent", &billFolding}, {"the same, automatic folding on", &billFoldingAuto}} {
		t.Logf("billed input (cache reads 0.1, writes 1.25) %-32s %.0f (%.1f%% of the agent that never branches without automatic folding); mean context %d, peak %d; prefix held on %d of %d successive requests",
			b.name+":", b.mt.Billed, 100*b.mt.Billed/billPlain.Billed, b.mt.ContextSum/int64(b.mt.Requests), b.mt.Peak, b.mt.PrefixHeld, b.mt.Successive)
	}
	if billPlainAuto.Billed >= billPlain.Billed || billFoldingAuto.Billed >= billFolding.Billed {
		t.Errorf("automatic folding does not lower the bill: never branching %.0f -> %.0f, folding %.0f -> %.0f",
			billPlain.Billed, billPlainAuto.Billed, billFolding.Billed, billFoldingAuto.Billed)
	}

	// Fixed bounds on the deterministic figures (o200k_base).
	ratio := float64(folding.after) / float64(folding.before)
	if folding.folds < folding.branches-folding.cuts {
		t.Errorf("%d branches, %d cut, but %d folded at the end", folding.branches, folding.cuts, folding.folds)
	}
	b := replayBounds[full]
	if folding.requests != b.requests || ratio < b.lo || ratio > b.hi {
		t.Errorf("folded/unfolded %.4f over %d requests: want %d requests and a ratio in [%.2f, %.2f]", ratio, folding.requests, b.requests, b.lo, b.hi)
	}
	if plain.reminders < b.minPlainReminders || folding.reminders >= plain.reminders {
		t.Errorf("guidance fired %d times for the folding agent and %d for the agent that never branches (want at least %d)", folding.reminders, plain.reminders, b.minPlainReminders)
	}
}

// replayBounds are the bounds of the replay's figures, for the default
// subset and for all trajectories.
var replayBounds = map[bool]struct {
	requests          int
	lo, hi            float64
	minPlainReminders int
}{
	false: {requests: 238, lo: 0.50, hi: 0.60, minPlainReminders: 9},
	true:  {requests: 2380, lo: 0.50, hi: 0.60, minPlainReminders: 110},
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := n
	for i > 0 && s[i]&0xC0 == 0x80 {
		i--
	}
	return s[:i] + "..."
}
