package fold_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/foldproxy/foldproxy/e2e/trajectory"
	"github.com/foldproxy/foldproxy/fold"
	"github.com/foldproxy/foldproxy/fold/memory"
	membadger "github.com/foldproxy/foldproxy/fold/memory/badger"
	"github.com/foldproxy/foldproxy/fold/store"
	"github.com/foldproxy/foldproxy/intercept/tokens"
	"github.com/foldproxy/foldproxy/policy"
)

// The trajectory replay of issue 26: every exploration phase of the
// recorded trajectories (a run of read-only commands) is a branch of the
// real Manager, over the real Badger store and the real memory service,
// counted with the real tokenizer. A branch's description names its task
// and first command, its prompt is the task's text, its results are the
// phase's real tool output, and it returns (when not force-returned) with
// the commands it ran as its message. Every trajectory is one session.

// exploring reports whether a recorded command only reads, as the cost
// package's replay decides (e2e/cost.Exploring): a copy, since fold's
// tests do not import e2e's measuring package.
func exploring(cmd string) bool {
	cmd = strings.TrimSpace(cmd)
	for strings.HasPrefix(cmd, "cd ") {
		i := strings.Index(cmd, "&&")
		if i < 0 {
			return false
		}
		cmd = strings.TrimSpace(cmd[i+2:])
	}
	if cmd == "" || strings.Contains(cmd, "<<") || strings.Contains(cmd, ">") {
		return false
	}
	for _, seg := range strings.FieldsFunc(strings.NewReplacer("&&", "|", "||", "|", ";", "|").Replace(cmd), func(r rune) bool { return r == '|' }) {
		f := strings.Fields(seg)
		if len(f) == 0 {
			return false
		}
		switch f[0] {
		case "ls", "cat", "grep", "egrep", "rg", "find", "head", "tail", "wc", "nl", "tree", "file", "stat", "pwd", "sort", "uniq", "cut", "awk", "true":
		case "sed":
			if strings.Contains(seg, " -i") {
				return false
			}
		case "git":
			if len(f) < 2 || !strings.Contains(" diff log show status grep blame ls-files ", " "+f[1]+" ") {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// phase is one exploration phase of a trajectory: a branch of the replay.
type phase struct {
	traj, repo string
	desc       string
	prompt     string
	steps      []trajectory.Step
}

func firstLine(s string, n int) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	if len(s) > n {
		s = s[:n]
	}
	return s
}

// replayPhases cuts the trajectories into their exploration phases.
func replayPhases(t testing.TB) [][]phase {
	t.Helper()
	trajs, err := trajectory.LoadRepo()
	if err != nil {
		t.Fatal(err)
	}
	var out [][]phase
	for _, tr := range trajs {
		body := strings.TrimPrefix(tr.Task, "Consider the following PR description:\n")
		title := firstLine(body, 160)
		repo := strings.SplitN(tr.ID, "__", 2)[0]
		var ps []phase
		var cur *phase
		for _, st := range tr.Steps {
			if !exploring(st.Command) {
				cur = nil
				continue
			}
			if cur == nil {
				ps = append(ps, phase{traj: tr.ID, repo: repo, desc: title + ": " + firstLine(st.Command, 100), prompt: body[:min(len(body), 1000)]})
				cur = &ps[len(ps)-1]
			}
			cur.steps = append(cur.steps, st)
		}
		out = append(out, ps)
	}
	return out
}

// replayEnv is a Manager with memories over a Badger store in a folder
// that outlives it, so that a second pass runs on the first's history.
type replayEnv struct {
	dir     string
	counter *tokens.Counter
	clock   time.Time
	// repoOf maps every branch of every pass to its trajectory's repository.
	repoOf map[string]string
}

func newReplayEnv(t testing.TB) *replayEnv {
	t.Helper()
	c, err := tokens.NewCounter(policy.Tokens{Encoding: "o200k_base"})
	if err != nil {
		t.Fatal(err)
	}
	return &replayEnv{dir: t.TempDir(), counter: c, clock: time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC), repoOf: map[string]string{}}
}

// replayOpts say how a pass creates its branches.
type replayOpts struct {
	budget   int  // 0: branch_create gives none (the default, or a learned one)
	memories bool // memories on (the default configuration) or disabled
	mem      func(*policy.Memory)
}

// replayStats are one pass's figures.
type replayStats struct {
	branches, returned, forced int
	createTokens               int // the create answers as the agent receives them
	injectedItems, sameRepo    int
	injectedTokens             int
	candidates                 int // memories extracted from returned branches (new or merged)
	withinBudget               int // branches that returned within their budget
	budgetTotal, budgetUnused  int // of the branches that returned
	learned                    int // branches whose budget was learned
}

func (s replayStats) String() string {
	return fmt.Sprintf("%d branches (%d returned, %d forced): create answer %.1f tokens a branch on average; %d items injected (%.1f%% from the same repository, %.1f tokens a branch); %d memory candidates from %d returned branches (%.0f%%); %d learned budgets",
		s.branches, s.returned, s.forced, float64(s.createTokens)/float64(s.branches), s.injectedItems,
		100*float64(s.sameRepo)/float64(max(s.injectedItems, 1)), float64(s.injectedTokens)/float64(s.branches),
		s.candidates, s.returned, 100*float64(s.candidates)/float64(max(s.returned, 1)), s.learned)
}

// open opens the Manager over the env's state with memories on (the
// default settings but mod's), closed when the test ends.
func (e *replayEnv) open(t testing.TB, mod ...func(*policy.Memory)) (*fold.Manager, *memory.Service) {
	t.Helper()
	mgr, mem, closeAll := e.openWith(t, true, mod...)
	t.Cleanup(closeAll)
	return mgr, mem
}

func (e *replayEnv) openWith(t testing.TB, memories bool, mod ...func(*policy.Memory)) (*fold.Manager, *memory.Service, func()) {
	t.Helper()
	ctx := context.Background()
	store, err := store.OpenBadger(e.dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := func() time.Time { return e.clock }
	var mem *memory.Service
	if memories {
		ms, err := membadger.OpenWith(ctx, store.DB(), store.WriteKeys)
		if err != nil {
			t.Fatal(err)
		}
		set := policy.Memory{Project: "replay", Principal: "alice"}
		for _, f := range mod {
			if f != nil {
				f(&set)
			}
		}
		if mem, err = memory.New(memory.Options{Settings: set, Store: ms, Count: e.counter.CountText, Now: now}); err != nil {
			t.Fatal(err)
		}
	}
	mgr, err := fold.NewManager(ctx, fold.Options{
		Settings: policy.Fold{CreatesPerMinute: 1 << 20}, Store: store, Counter: e.counter, Memory: mem,
		Now: now, PruneInterval: -1, Principal: "alice",
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := mgr.Recover(ctx, nil); err != nil {
		t.Fatal(err)
	}
	return mgr, mem, func() { mgr.Close(); store.Close() }
}

// pass plays every phase once, in a session per trajectory.
func (e *replayEnv) pass(t testing.TB, name string, o replayOpts) replayStats {
	t.Helper()
	ctx := context.Background()
	mgr, mem, closeAll := e.openWith(t, o.memories, o.mem)
	defer closeAll()
	lessonsBefore := e.lessons(t, mem)
	var st replayStats
	newBranches := map[string]bool{}
	for _, ps := range replayPhases(t) {
		if len(ps) == 0 {
			continue
		}
		sess := name + "-" + ps[0].traj
		if err := mgr.OpenSession(ctx, fold.SessionRecord{ID: sess, Transport: "stdio"}); err != nil {
			t.Fatal(err)
		}
		for _, p := range ps {
			e.clock = e.clock.Add(time.Second)
			args := map[string]any{"description": p.desc, "prompt": p.prompt}
			if o.budget > 0 {
				args["budget"] = o.budget
			}
			var cr struct {
				BranchID        string         `json:"branch_id"`
				Budget          int            `json:"budget"`
				BudgetFrom      string         `json:"budget_from"`
				InjectedContext []memory.Brief `json:"injected_context"`
			}
			text := callFold(t, mgr, sess, fold.ToolCreate, args, &cr)
			st.branches++
			st.createTokens += e.counter.CountText(text)
			if cr.BudgetFrom != "" {
				st.learned++
			}
			e.repoOf[cr.BranchID] = p.repo
			newBranches[cr.BranchID] = true
			for _, it := range cr.InjectedContext {
				raw, _ := json.Marshal(it)
				st.injectedTokens += e.counter.CountText(string(raw))
				st.injectedItems++
				m, err := mem.Store().Get(ctx, it.ID)
				if err != nil {
					t.Fatal(err)
				}
				if e.repoOf[m.Provenance.Branch] == p.repo {
					st.sameRepo++
				}
			}
			used := 0
			forced := false
			var cmds []string
			for _, step := range p.steps {
				cmds = append(cmds, firstLine(step.Command, 120))
				out := step.Output
				res, err := mgr.Charge(ctx, sess, cr.BranchID, func(b fold.Budget) (fold.Charge, error) {
					n := e.counter.CountText(out)
					ch := fold.Charge{Upstream: "replay", Method: "tools/call", Name: "run", Result: []byte(out), Tokens: n}
					if b.Remaining >= 0 && n > b.Remaining-b.Reserve {
						ch.Tokens, ch.Cut, ch.Rest = b.Remaining, true, []byte(out)
					}
					return ch, nil
				})
				if err != nil {
					t.Fatalf("%s: charge: %v", p.traj, err)
				}
				e.clock = e.clock.Add(2 * time.Second)
				used = res.Used
				if res.Forced {
					forced = true
					break
				}
			}
			if forced {
				st.forced++
				continue
			}
			callFold(t, mgr, sess, fold.ToolReturn, map[string]any{"branch_id": cr.BranchID, "message": "Explored with: " + strings.Join(cmds, "; ")}, nil)
			st.returned++
			st.withinBudget++
			st.budgetTotal += cr.Budget
			st.budgetUnused += cr.Budget - used
		}
		if err := mgr.EndSession(ctx, sess); err != nil {
			t.Fatal(err)
		}
	}
	if mem != nil {
		after := e.lessons(t, mem)
		for id, merged := range after {
			if was, ok := lessonsBefore[id]; ok {
				st.candidates += merged.merged - was.merged
			} else if newBranches[merged.branch] {
				st.candidates += 1 + merged.merged
			}
		}
	}
	return st
}

type lessonInfo struct {
	branch string
	merged int
}

// lessons lists the lesson memories by id.
func (e *replayEnv) lessons(t testing.TB, mem *memory.Service) map[string]lessonInfo {
	t.Helper()
	out := map[string]lessonInfo{}
	if mem == nil {
		return out
	}
	ms, err := mem.Store().List(context.Background(), "", true)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.Kind == memory.KindLesson {
			out[m.ID] = lessonInfo{m.Provenance.Branch, m.Merged}
		}
	}
	return out
}

// callFold calls a fold tool and decodes its answer into v; it returns
// the answer's text as the agent receives it.
func callFold(t testing.TB, mgr *fold.Manager, sess, tool string, args map[string]any, v any) string {
	t.Helper()
	raw, _ := json.Marshal(args)
	res, err := mgr.CallTool(context.Background(), sess, tool, raw)
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	var r struct {
		IsError bool `json:"isError"`
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
	}
	if err := json.Unmarshal(res, &r); err != nil || len(r.Content) != 1 {
		t.Fatalf("%s: %s: %v", tool, res, err)
	}
	if r.IsError {
		t.Fatalf("%s %s: %s", tool, raw, r.Content[0].Text)
	}
	if v != nil {
		if err := json.Unmarshal([]byte(r.Content[0].Text), v); err != nil {
			t.Fatalf("%s: %v", tool, err)
		}
	}
	return r.Content[0].Text
}
