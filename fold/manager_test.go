package fold

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/foldproxy/foldproxy/fold/store"
	"github.com/foldproxy/foldproxy/policy"
)

func TestNewManagerValidates(t *testing.T) {
	tests := []struct {
		name string
		opts Options
		want string
	}{
		{"no store", Options{Counter: wordCounter{}}, "Options.Store is nil"},
		{"no counter", Options{Store: store.NewMemStore()}, "Options.Counter is nil"},
		{"bad thresholds", Options{Store: store.NewMemStore(), Counter: wordCounter{}, Settings: policy.Fold{Thresholds: []float64{0.9, 0.5, 0.95}}}, "fold.thresholds[1]"},
		{"default above max", Options{Store: store.NewMemStore(), Counter: wordCounter{}, Settings: policy.Fold{DefaultBudget: 100, MaxBudget: 50}}, "fold.defaultBudget"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewManager(t.Context(), tt.opts)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("NewManager: got %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestStateMachine(t *testing.T) {
	type step struct {
		tool string
		args map[string]any
		ok   bool
		want string // substring of the refusal, or of the answer's text
	}
	tests := []struct {
		name  string
		steps []step
		check func(t *testing.T, e *testEnv)
	}{
		{
			name: "create then return",
			steps: []step{
				{ToolCreate, map[string]any{"description": "explore"}, true, `"depth":1`},
				{ToolReturn, map[string]any{"message": "found it in a.go"}, true, `"message":"found it in a.go"`},
			},
			check: func(t *testing.T, e *testEnv) {
				root := e.branch(t, RootID("s1"))
				// The answers, as the word counter counts them: the create
				// answer is one word, the return answer four.
				if got, want := root.Used, 5; got != want {
					t.Errorf("root used: got %d, want %d (the answers' words)", got, want)
				}
				kids := e.children(t, root.ID)
				if len(kids) != 1 {
					t.Fatalf("root children: got %v", kids)
				}
				child := e.branch(t, kids[0])
				if child.Status != StatusReturned || child.Message != "found it in a.go" {
					t.Errorf("child: got %s %q", child.Status, child.Message)
				}
			},
		},
		{
			name: "nested, return parent forces child",
			steps: []step{
				{ToolCreate, map[string]any{"description": "outer"}, true, ""},
				{ToolCreate, map[string]any{"description": "inner"}, true, `"depth":2`},
				{ToolReturn, map[string]any{"message": "inner done"}, true, `"tokens_used":0,"message":"inner done"`},
				{ToolCreate, map[string]any{"description": "inner again", "budget": 100}, true, `"depth":2`},
			},
			check: func(t *testing.T, e *testEnv) {
				outer := e.branch(t, e.children(t, RootID("s1"))[0])
				ans := e.mustCall(t, "s1", ToolReturn, map[string]any{"branch_id": outer.ID, "message": "outer done"})
				forced := ans["children_force_returned"].([]any)
				if len(forced) != 1 {
					t.Fatalf("children_force_returned: got %v, want one", forced)
				}
				inner := e.branch(t, forced[0].(string))
				if inner.Status != StatusForced || inner.Reason != ReasonParent || inner.Summary == "" {
					t.Errorf("inner: got %s %q summary %q", inner.Status, inner.Reason, inner.Summary)
				}
			},
		},
		{
			name: "secrets in texts are redacted",
			steps: []step{
				{ToolCreate, map[string]any{"description": "use SECRET", "prompt": "the SECRET is x"}, true, ""},
				{ToolReturn, map[string]any{"message": "key SECRET", "return_value": "SECRET"}, true, `"message":"key [REDACTED:test]","return_value":"[REDACTED:test]"`},
			},
			check: func(t *testing.T, e *testEnv) {
				b := e.branch(t, e.children(t, RootID("s1"))[0])
				if b.Description != "use [REDACTED:test]" || b.Prompt != "the [REDACTED:test] is x" || b.ReturnValue != `"[REDACTED:test]"` {
					t.Errorf("stored: %q %q %q", b.Description, b.Prompt, b.ReturnValue)
				}
			},
		},
		{
			name: "scan failure refuses (fail closed)",
			steps: []step{
				{ToolCreate, map[string]any{"description": "FAILSCAN"}, false, "ErrScanFailed: the description could not be scanned"},
				{ToolCreate, map[string]any{"description": "ok"}, true, ""},
				{ToolReturn, map[string]any{"message": "FAILSCAN"}, false, "ErrScanFailed: the message could not be scanned"},
				{ToolReturn, map[string]any{"message": "fine"}, true, ""},
			},
		},
		{
			name: "root cannot be returned",
			steps: []step{
				{ToolReturn, map[string]any{"message": "x"}, false, "ErrBranchNotFound: there is no active branch to return"},
				{ToolReturn, map[string]any{"message": "x", "branch_id": RootID("s1")}, false, "ErrInvalidArgument: " + RootID("s1") + " is the main thread"},
			},
		},
		{
			name: "returning twice",
			steps: []step{
				{ToolCreate, map[string]any{"description": "a"}, true, ""},
				{ToolReturn, map[string]any{"message": "done"}, true, ""},
				{ToolReturn, map[string]any{"message": "again"}, false, "ErrBranchNotFound"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, nil)
			for i, s := range tt.steps {
				ans, text, ok := e.call(t, "s1", s.tool, s.args)
				if ok != s.ok {
					t.Fatalf("step %d %s: got ok=%v (%s), want ok=%v", i, s.tool, ok, text, s.ok)
				}
				if !strings.Contains(text, s.want) {
					t.Fatalf("step %d %s: got %s, want it to contain %q", i, s.tool, text, s.want)
				}
				_ = ans
			}
			if tt.check != nil {
				tt.check(t, e)
			}
		})
	}
}

func TestLimits(t *testing.T) {
	tests := []struct {
		name  string
		mod   func(*policy.Fold)
		setup func(t *testing.T, e *testEnv) map[string]any // returns the refused create's args
		tool  string
		want  string
	}{
		{
			name: "depth",
			mod:  func(f *policy.Fold) { f.MaxDepth = 2 },
			setup: func(t *testing.T, e *testEnv) map[string]any {
				e.create(t, map[string]any{})
				e.create(t, map[string]any{})
				return map[string]any{"description": "too deep"}
			},
			want: "ErrMaxDepthExceeded: a branch under b-",
		},
		{
			name: "budget above max",
			setup: func(t *testing.T, e *testEnv) map[string]any {
				return map[string]any{"description": "x", "budget": 40000}
			},
			want: "ErrBudgetExceeded: budget 40000 is above the maximum of 32768 tokens; ask for 32768 or less",
		},
		{
			name: "budget above parent's remaining",
			setup: func(t *testing.T, e *testEnv) map[string]any {
				p := e.create(t, map[string]any{"budget": 1000})
				if _, _, err := e.charge(t, "s1", p, 400); err != nil {
					t.Fatal(err)
				}
				return map[string]any{"description": "x", "budget": 700}
			},
			want: "ErrBudgetExceeded: budget 700 is above the 600 tokens left in parent b-",
		},
		{
			name: "budget zero",
			setup: func(t *testing.T, e *testEnv) map[string]any {
				return map[string]any{"description": "x", "budget": 0}
			},
			want: "ErrInvalidArgument: budget 0 must be at least 1 token",
		},
		{
			name: "too many per session",
			mod:  func(f *policy.Fold) { f.MaxActivePerSess = 2; f.MaxDepth = 5 },
			setup: func(t *testing.T, e *testEnv) map[string]any {
				e.create(t, map[string]any{})
				e.create(t, map[string]any{})
				return map[string]any{"description": "third"}
			},
			want: "ErrTooManyBranches: this session has 2 active branches, the maximum",
		},
		{
			name: "too many per instance",
			mod:  func(f *policy.Fold) { f.MaxActivePerSess = 2; f.MaxActiveInstance = 2 },
			setup: func(t *testing.T, e *testEnv) map[string]any {
				e.create(t, map[string]any{})
				if err := e.m.OpenSession(t.Context(), SessionRecord{ID: "s2"}); err != nil {
					t.Fatal(err)
				}
				e.mustCall(t, "s2", ToolCreate, map[string]any{"description": "other"})
				return map[string]any{"description": "third"}
			},
			want: "ErrTooManyBranches: this proxy has 2 active branches across its sessions",
		},
		{
			name: "rate",
			mod:  func(f *policy.Fold) { f.CreatesPerMinute = 2 },
			setup: func(t *testing.T, e *testEnv) map[string]any {
				for range 2 {
					e.create(t, map[string]any{})
					e.mustCall(t, "s1", ToolReturn, map[string]any{"message": "done"})
				}
				return map[string]any{"description": "third"}
			},
			want: "ErrRateLimited: this session created 2 branches in the last minute, the limit; retry in 1m0s",
		},
		{
			name: "description too long",
			setup: func(t *testing.T, e *testEnv) map[string]any {
				return map[string]any{"description": strings.Repeat("é", 501)}
			},
			want: "ErrInvalidArgument: description is 501 characters; the maximum is 500",
		},
		{
			name: "description of control characters only",
			setup: func(t *testing.T, e *testEnv) map[string]any {
				return map[string]any{"description": "\x00\x01\r"}
			},
			want: "ErrInvalidArgument: description is required",
		},
		{
			name: "prompt too long",
			setup: func(t *testing.T, e *testEnv) map[string]any {
				return map[string]any{"description": "x", "prompt": strings.Repeat("a", 10001)}
			},
			want: "ErrInvalidArgument: prompt is 10001 characters; the maximum is 10000",
		},
		{
			name: "timeout too long",
			setup: func(t *testing.T, e *testEnv) map[string]any {
				return map[string]any{"description": "x", "timeout_seconds": 601}
			},
			want: "ErrInvalidArgument: timeout_seconds 601 is above the maximum of 600 seconds",
		},
		{
			name: "negative timeout",
			setup: func(t *testing.T, e *testEnv) map[string]any {
				return map[string]any{"description": "x", "timeout_seconds": -1}
			},
			want: "ErrInvalidArgument: timeout_seconds -1 must be a positive number",
		},
		{
			name: "unknown parent",
			setup: func(t *testing.T, e *testEnv) map[string]any {
				return map[string]any{"description": "x", "parent_branch_id": "b-nope"}
			},
			want: `ErrBranchNotFound: parent_branch_id "b-nope" is not a branch of this session`,
		},
		{
			name: "closed parent",
			setup: func(t *testing.T, e *testEnv) map[string]any {
				p := e.create(t, map[string]any{})
				e.mustCall(t, "s1", ToolReturn, map[string]any{"message": "done"})
				return map[string]any{"description": "x", "parent_branch_id": p}
			},
			want: "ErrBranchClosed: branch b-",
		},
		{
			name: "depends on an ancestor",
			setup: func(t *testing.T, e *testEnv) map[string]any {
				p := e.create(t, map[string]any{})
				return map[string]any{"description": "x", "depends_on": []string{p}}
			},
			want: "is an ancestor of the new branch and cannot return before it",
		},
		{
			name: "message too long",
			tool: ToolReturn,
			setup: func(t *testing.T, e *testEnv) map[string]any {
				e.create(t, map[string]any{})
				return map[string]any{"message": strings.Repeat("a", 50001)}
			},
			want: "ErrInvalidArgument: message is 50001 characters; the maximum is 50000",
		},
		{
			name: "message above the parent's remaining",
			tool: ToolReturn,
			setup: func(t *testing.T, e *testEnv) map[string]any {
				e.create(t, map[string]any{"budget": 10})
				e.create(t, map[string]any{"budget": 10})
				return map[string]any{"message": strings.Repeat("word ", 11)}
			},
			want: "ErrBudgetExceeded: the return answer is 12 tokens but parent b-",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, tt.mod)
			args := tt.setup(t, e)
			tool := tt.tool
			if tool == "" {
				tool = ToolCreate
			}
			_, text, ok := e.call(t, "s1", tool, args)
			if ok {
				t.Fatalf("%s(%v) succeeded: %s", tool, args, text)
			}
			if !strings.Contains(text, tt.want) {
				t.Fatalf("got %q, want it to contain %q", text, tt.want)
			}
			if len(e.events.of("refused")) == 0 {
				t.Errorf("no refused event")
			}
		})
	}
}

func TestAttribute(t *testing.T) {
	e := newEnv(t, func(f *policy.Fold) { f.MaxDepth = 5 })
	ctx := t.Context()
	if err := e.m.OpenSession(ctx, SessionRecord{ID: "s2"}); err != nil {
		t.Fatal(err)
	}
	a := e.create(t, map[string]any{"description": "a"})
	a1 := e.create(t, map[string]any{"description": "a1"})
	b := e.create(t, map[string]any{"description": "b", "parent_branch_id": RootID("s1")})
	other := e.mustCall(t, "s2", ToolCreate, map[string]any{"description": "other"})["branch_id"].(string)
	gone := e.create(t, map[string]any{"description": "gone", "parent_branch_id": b})
	if _, _, err := e.charge(t, "s1", gone, 99999); err != nil {
		t.Fatal(err)
	}
	_ = a

	tests := []struct {
		name, session, explicit string
		want                    string
		wantErr                 error
		wantMsg                 string
	}{
		{"innermost is the deepest", "s1", "", a1, nil, ""},
		{"explicit", "s1", b, b, nil, ""},
		{"root explicit", "s1", RootID("s1"), RootID("s1"), nil, ""},
		{"other session's branch", "s1", other, "", ErrBranchNotFound, `ErrBranchNotFound: branch "` + other + `" is not a branch of this session`},
		{"unknown", "s1", "b-x", "", ErrBranchNotFound, ""},
		{"closed", "s1", gone, "", ErrBranchClosed, "ErrBranchClosed: branch " + gone + " is closed (forced: budget exhausted); its summary is in branch_status; continue in the parent branch or create a new branch with branch_create"},
		{"unknown session", "s9", "", "", ErrSessionNotFound, ""},
		{"s2 innermost", "s2", "", other, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := e.m.Attribute(ctx, tt.session, tt.explicit)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("got %v, want %v", err, tt.wantErr)
				}
				if !strings.HasPrefix(err.Error(), tt.wantMsg) {
					t.Fatalf("message:\n got %s\nwant %s", err, tt.wantMsg)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.ID != tt.want {
				t.Fatalf("got %s, want %s", got.ID, tt.want)
			}
		})
	}

	// Another session can neither return nor read s1's branches.
	if _, text, ok := e.call(t, "s2", ToolReturn, map[string]any{"branch_id": a1, "message": "x"}); ok || !strings.Contains(text, "ErrBranchNotFound") {
		t.Errorf("s2 returned s1's branch: %s", text)
	}
	if _, text, ok := e.call(t, "s2", ToolStatus, map[string]any{"branch_id": a1}); ok || !strings.Contains(text, "ErrBranchNotFound") {
		t.Errorf("s2 read s1's branch: %s", text)
	}
	if _, text, ok := e.call(t, "s2", ToolRecall, map[string]any{"branch_id": a1}); ok || !strings.Contains(text, "ErrBranchNotFound") {
		t.Errorf("s2 recalled s1's branch: %s", text)
	}
}

func TestForcedSummaryDeliveredOnce(t *testing.T) {
	e := newEnv(t, nil)
	parent := e.create(t, map[string]any{"description": "parent", "budget": 1000})
	child := e.create(t, map[string]any{"description": "child", "budget": 100})
	if _, _, err := e.charge(t, "s1", child, 30); err != nil {
		t.Fatal(err)
	}
	res, _, err := e.charge(t, "s1", child, 500)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Forced || res.Handle == "" || res.Used != 100 {
		t.Fatalf("charge: got %+v, want forced with a handle at 100", res)
	}
	cb := e.branch(t, child)
	if cb.Status != StatusForced || cb.Reason != ReasonBudget {
		t.Fatalf("child: got %s %q", cb.Status, cb.Reason)
	}
	for _, want := range []string{"force-returned: budget exhausted", "Calls made: 2; tokens used: 100 of 100", "up/read 100", res.Handle} {
		if !strings.Contains(cb.Summary, want) {
			t.Errorf("summary %q lacks %q", cb.Summary, want)
		}
	}
	rest, err := e.store.GetCut(t.Context(), res.Handle)
	if err != nil || string(rest) != "the rest" {
		t.Errorf("cut: got %q, %v", rest, err)
	}

	// The next result of the parent carries the summary, once.
	var got [][]string
	for range 3 {
		_, seen, err := e.charge(t, "s1", parent, 1)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, seen.Summaries)
	}
	want := [][]string{{cb.Summary}, nil, nil}
	if len(got[0]) != 1 || got[0][0] != want[0][0] || got[1] != nil || got[2] != nil {
		t.Fatalf("summaries by charge: got %q, want %q", got, want)
	}
	if !e.branch(t, child).SummaryDelivered {
		t.Errorf("summary not marked delivered in the store")
	}
	// And branch_status always shows it.
	st := e.mustCall(t, "s1", ToolStatus, map[string]any{"branch_id": child})
	if st["summary"] != cb.Summary || st["status"] != "forced" {
		t.Errorf("status: got %v", st)
	}
	if n := len(e.events.of("cut")); n != 1 {
		t.Errorf("cut events: got %d, want 1", n)
	}
	if n := len(e.events.of("forced")); n != 1 {
		t.Errorf("forced events: got %d, want 1", n)
	}
	// Calls to the closed branch are refused.
	if _, _, err := e.charge(t, "s1", child, 1); !errors.Is(err, ErrBranchClosed) {
		t.Errorf("charge after forced return: got %v, want ErrBranchClosed", err)
	}
}

func TestFailedFitChargesNothing(t *testing.T) {
	e := newEnv(t, nil)
	b := e.create(t, map[string]any{"budget": 100})
	tests := []struct {
		name string
		fit  func(Budget) (Charge, error)
		want error
	}{
		{"fit error", func(Budget) (Charge, error) { return Charge{}, errors.New("scan failed") }, nil},
		{"over remaining", func(Budget) (Charge, error) { return Charge{Tokens: 101}, nil }, ErrBudgetExceeded},
		{"negative", func(Budget) (Charge, error) { return Charge{Tokens: -1}, nil }, ErrInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := e.m.Charge(t.Context(), "s1", b, tt.fit)
			if err == nil || (tt.want != nil && !errors.Is(err, tt.want)) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
			if got := e.branch(t, b); got.Used != 0 || got.Calls != 0 {
				t.Fatalf("charged: used %d calls %d", got.Used, got.Calls)
			}
		})
	}
}

func TestChargeLevelsAndUsage(t *testing.T) {
	e := newEnv(t, nil)
	b := e.create(t, map[string]any{"budget": 100})
	steps := []struct {
		tokens    int
		wantLevel string
	}{{50, "normal"}, {20, "caution"}, {15, "warning"}, {5, "warning"}, {5, "critical"}}
	for i, s := range steps {
		res, _, err := e.charge(t, "s1", b, s.tokens)
		if err != nil {
			t.Fatal(err)
		}
		if res.Level != s.wantLevel {
			t.Errorf("step %d: level got %s, want %s", i, res.Level, s.wantLevel)
		}
	}
	if got, want := len(e.events.of("warning")), 3; got != want {
		t.Errorf("warning events: got %d, want %d", got, want)
	}
	got := e.branch(t, b)
	if got.Used != 95 || got.Calls != 5 || got.ByTool["up/read"] != 95 || got.ByUpstream["up"] != 95 {
		t.Errorf("usage: got used %d calls %d by tool %v by upstream %v", got.Used, got.Calls, got.ByTool, got.ByUpstream)
	}
	// Exactly reaching the budget force-returns the branch.
	res, _, err := e.charge(t, "s1", b, 5)
	if err != nil || !res.Forced || res.Handle != "" {
		t.Fatalf("reaching the budget: got %+v, %v", res, err)
	}
	// The root is counted but never cut or force-returned.
	before := e.branch(t, RootID("s1")).Used // the create answer
	for range 3 {
		if res, _, err := e.charge(t, "s1", RootID("s1"), 1000); err != nil || res.Forced {
			t.Fatalf("root: %+v, %v", res, err)
		}
	}
	if got := e.branch(t, RootID("s1")); got.Used != before+3000 || got.Status != StatusActive {
		t.Errorf("root: used %d status %s", got.Used, got.Status)
	}
}

// Parallel charges to one branch serialize and never overrun its budget.
func TestChargeSerialization(t *testing.T) {
	e := newEnv(t, nil)
	const budget = 1000
	b := e.create(t, map[string]any{"budget": budget})
	other := e.create(t, map[string]any{"budget": budget, "parent_branch_id": RootID("s1")})
	var wg sync.WaitGroup
	var mu sync.Mutex
	total := 0
	for i := range 40 {
		wg.Go(func() {
			target := b
			if i%4 == 0 {
				target = other
			}
			res, err := e.m.Charge(context.Background(), "s1", target, func(bud Budget) (Charge, error) {
				tokens := 37
				c := Charge{Upstream: "up", Name: "read", Tokens: tokens}
				if bud.Remaining >= 0 && tokens > bud.Remaining {
					c.Tokens, c.Cut, c.Rest = bud.Remaining, true, []byte("rest")
				}
				return c, nil
			})
			if err != nil {
				if !errors.Is(err, ErrBranchClosed) {
					t.Errorf("charge: %v", err)
				}
				return
			}
			if target == b {
				mu.Lock()
				total = max(total, res.Used)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	got := e.branch(t, b)
	if got.Used > budget || total > budget {
		t.Fatalf("used %d (max seen %d), over the budget %d", got.Used, total, budget)
	}
	calls, err := e.store.Calls(t.Context(), b, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	sum := 0
	for _, c := range calls {
		sum += c.Tokens
	}
	if sum != got.Used || len(calls) != got.Calls {
		t.Fatalf("archive: %d calls of %d tokens, branch says %d calls of %d", len(calls), sum, got.Calls, got.Used)
	}
}

func TestStatusTree(t *testing.T) {
	e := newEnv(t, nil)
	a := e.create(t, map[string]any{"description": "a", "budget": 200})
	a1 := e.create(t, map[string]any{"description": "a1", "budget": 100})
	if _, _, err := e.charge(t, "s1", a1, 80); err != nil {
		t.Fatal(err)
	}
	ans := e.mustCall(t, "s1", ToolStatus, map[string]any{})
	if ans["innermost_branch"] != a1 || ans["active_branches"] != float64(2) {
		t.Errorf("tree head: got %v", ans)
	}
	tree := ans["tree"].(map[string]any)
	if tree["branch_id"] != RootID("s1") {
		t.Fatalf("tree root: got %v", tree["branch_id"])
	}
	la := tree["branches"].([]any)[0].(map[string]any)
	la1 := la["branches"].([]any)[0].(map[string]any)
	if la["branch_id"] != a || la1["branch_id"] != a1 {
		t.Fatalf("tree: got %v / %v", la["branch_id"], la1["branch_id"])
	}
	want := map[string]any{
		"budget_total": float64(100), "budget_used": float64(80), "budget_remaining": float64(20),
		"budget_percent": float64(80), "warning_level": "caution", "depth": float64(2), "parent": a,
		"calls": float64(1), "status": "active",
	}
	for k, v := range want {
		if la1[k] != v {
			t.Errorf("%s: got %v, want %v", k, la1[k], v)
		}
	}
	if la1["timeout_remaining_seconds"] == nil {
		t.Errorf("no timeout_remaining_seconds")
	}
	detail := e.mustCall(t, "s1", ToolStatus, map[string]any{"branch_id": a1, "detailed": true})
	calls := detail["archived_calls"].([]any)
	// The read, then the tree's answer, which a1 (the innermost) paid for.
	if len(calls) != 2 || calls[0].(map[string]any)["call_handle"] != a1+"#1" || calls[1].(map[string]any)["name"] != ToolStatus {
		t.Errorf("archived calls: got %v", calls)
	}
}

func TestEndSession(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	a := e.create(t, map[string]any{})
	a1 := e.create(t, map[string]any{})
	b := e.create(t, map[string]any{"parent_branch_id": RootID("s1")})
	if err := e.m.EndSession(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{a, a1, b, RootID("s1")} {
		got := e.branch(t, id)
		if got.Status != StatusForced || got.Reason != ReasonSessionEnd {
			t.Errorf("%s: got %s %q, want forced %q", id, got.Status, got.Reason, ReasonSessionEnd)
		}
	}
	// Deepest first: a1 closes before a.
	var order []string
	for _, ev := range e.events.of("forced") {
		order = append(order, ev.Branch)
	}
	if ia, ia1 := slices.Index(order, a), slices.Index(order, a1); ia1 > ia {
		t.Errorf("closing order %v: %s before %s", order, a, a1)
	}
	if _, err := e.store.GetSession(ctx, "s1"); !errors.Is(err, ErrSessionNotFound) {
		t.Errorf("session record: got %v, want deleted", err)
	}
	if _, err := e.m.Attribute(ctx, "s1", ""); !errors.Is(err, ErrSessionNotFound) {
		t.Errorf("attribute after end: got %v", err)
	}
	if err := e.m.EndSession(ctx, "s1"); !errors.Is(err, ErrSessionNotFound) {
		t.Errorf("second end: got %v", err)
	}
	// The branches stay for reports.
	if bs, _ := e.store.Branches(ctx, "s1"); len(bs) != 4 {
		t.Errorf("branches after end: got %d, want 4", len(bs))
	}
	// Reopening the id starts a fresh main thread.
	if err := e.m.OpenSession(ctx, SessionRecord{ID: "s1"}); err != nil {
		t.Fatal(err)
	}
	if got, err := e.m.Attribute(ctx, "s1", ""); err != nil || got.ID != RootID("s1") {
		t.Errorf("after reopen: got %v, %v", got, err)
	}
}

func TestSessions(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	rec, err := e.m.ResumeSession(ctx, "s1")
	if err != nil || rec.ID != "s1" || rec.Transport != "stdio" {
		t.Fatalf("ResumeSession: %+v, %v", rec, err)
	}
	if _, err := e.m.ResumeSession(ctx, "nope"); !errors.Is(err, ErrSessionNotFound) {
		t.Fatalf("ResumeSession(nope): got %v", err)
	}
	e.m.TouchSession(ctx, "s1")
	e.m.TouchSession(ctx, "nope")
	if err := e.m.OpenSession(ctx, SessionRecord{}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("OpenSession without id: got %v", err)
	}
	root := e.branch(t, RootID("s1"))
	if root.Depth != 0 || root.Budget != 0 || root.Status != StatusActive {
		t.Fatalf("root: %+v", root)
	}
}

func TestCleanText(t *testing.T) {
	tests := []struct {
		in, want string
		limit    int
		err      bool
	}{
		{"plain", "plain", 10, false},
		{"a\x00b\x1bc\r\n\td\u0085e\x7f", "abc\n\tde", 10, false},
		{"bad\xffutf8", "bad\uFFFDutf8", 10, false},
		{"ééé", "ééé", 3, false},
		{"éééé", "", 3, true},
	}
	for _, tt := range tests {
		got, err := cleanText("f", tt.in, tt.limit)
		if (err != nil) != tt.err || got != tt.want {
			t.Errorf("cleanText(%q): got %q, %v; want %q (error %v)", tt.in, got, err, tt.want, tt.err)
		}
	}
}

// Issue 14: the root branch id was "root-<session id>" and branch_status
// printed the session id; an HTTP session id is the session's credential.
// Nothing the model sees carries it now; a store written before keeps its
// root.
func TestModelSeesNoSessionID(t *testing.T) {
	const sid = "s-0123456789abcdef01234567"
	if strings.Contains(RootID(sid), sid) || strings.Contains(RootID(sid), "0123456789abcdef") {
		t.Fatalf("RootID(%q) = %q carries the session id", sid, RootID(sid))
	}
	m, err := NewManager(t.Context(), Options{Store: store.NewMemStore(), Scanner: fakeScanner{}, Counter: wordCounter{}, PruneInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.OpenSession(t.Context(), SessionRecord{ID: sid, Transport: "http"}); err != nil {
		t.Fatal(err)
	}
	out, err := m.CallTool(t.Context(), sid, ToolStatus, []byte(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), "0123456789abcdef") {
		t.Errorf("branch_status shows the session id: %s", out)
	}
	// A store whose root was written under the old id keeps it.
	st := store.NewMemStore()
	if err := st.PutBranch(t.Context(), &Branch{ID: legacyRootID("old"), Session: "old", Status: StatusActive, Used: 7}); err != nil {
		t.Fatal(err)
	}
	m2, err := NewManager(t.Context(), Options{Store: st, Scanner: fakeScanner{}, Counter: wordCounter{}, PruneInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	if err := m2.OpenSession(t.Context(), SessionRecord{ID: "old", Transport: "http"}); err != nil {
		t.Fatal(err)
	}
	if b, err := m2.Attribute(t.Context(), "old", ""); err != nil || b.ID != legacyRootID("old") || b.Used != 7 {
		t.Errorf("legacy root: %+v, %v", b, err)
	}
}

// TestCreateAndReturnEventsCarryAnswerTokens: the created and returned
// events carry the tokens of the answers charged to the parent, so that
// reports count what the parent really received.
func TestCreateAndReturnEventsCarryAnswerTokens(t *testing.T) {
	e := newEnv(t, nil)
	root := RootID("s1")
	before := e.branch(t, root).Used
	a := e.create(t, map[string]any{})
	afterCreate := e.branch(t, root).Used
	e.mustCall(t, "s1", ToolReturn, map[string]any{"branch_id": a, "message": "found it"})
	afterReturn := e.branch(t, root).Used
	cr, rt := e.events.of("created"), e.events.of("returned")
	if len(cr) != 1 || len(rt) != 1 {
		t.Fatalf("events: %d created, %d returned; want 1 each", len(cr), len(rt))
	}
	if cr[0].Tokens <= 0 || cr[0].Tokens != afterCreate-before {
		t.Errorf("created event tokens = %d, want the %d charged to the root", cr[0].Tokens, afterCreate-before)
	}
	if rt[0].Tokens <= 0 || rt[0].Tokens != afterReturn-afterCreate {
		t.Errorf("returned event tokens = %d, want the %d charged to the root", rt[0].Tokens, afterReturn-afterCreate)
	}
}

// A parent's record does not hold its children: they are rebuilt from the
// children's records when a session is loaded, in creation order, even
// when the clock gave them all the same creation time.
func TestChildrenRebuiltOnLoad(t *testing.T) {
	ctx := t.Context()
	store := store.NewMemStore()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	open := func() *testEnv {
		m, err := NewManager(ctx, Options{Settings: policy.Fold{CreatesPerMinute: 100}, Store: store, Scanner: fakeScanner{}, Counter: wordCounter{}, PruneInterval: -1,
			Now: func() time.Time { return at }})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		if _, err := m.ResumeSession(ctx, "s1"); err != nil {
			if err := m.OpenSession(ctx, SessionRecord{ID: "s1", Transport: "http"}); err != nil {
				t.Fatal(err)
			}
		}
		return &testEnv{m: m, store: store}
	}
	e := open()
	root := RootID("s1")
	var want []string
	for i := range 5 {
		want = append(want, e.create(t, map[string]any{"description": "top", "parent_branch_id": root}))
		if i == 1 {
			e.mustCall(t, "s1", ToolReturn, map[string]any{"branch_id": want[1], "message": "done"})
		}
	}
	inner := e.create(t, map[string]any{"description": "inner", "parent_branch_id": want[2]})
	if got := e.children(t, root); !slices.Equal(got, want) {
		t.Fatalf("children before the restart: got %v, want %v", got, want)
	}
	data, err := json.Marshal(e.branch(t, root)) // the bytes the store writes
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range want {
		if strings.Contains(string(data), id) {
			t.Fatalf("the root's record names its child %s: %s", id, data)
		}
	}
	e.m.Close()

	e = open()
	if got := e.children(t, root); !slices.Equal(got, want) {
		t.Fatalf("children after the restart: got %v, want %v", got, want)
	}
	if got := e.children(t, want[2]); !slices.Equal(got, []string{inner}) {
		t.Fatalf("children of %s after the restart: got %v, want [%s]", want[2], got, inner)
	}
	// A new child comes after them.
	last := e.create(t, map[string]any{"description": "after", "parent_branch_id": root})
	if got := e.children(t, root); !slices.Equal(got, append(slices.Clone(want), last)) {
		t.Fatalf("children after a new creation: got %v", got)
	}
	e.m.Close()
	e = open()
	if got := e.children(t, root); !slices.Equal(got, append(slices.Clone(want), last)) {
		t.Fatalf("children after a second restart: got %v", got)
	}
}

// Records written before Ord was kept are ordered by creation time, then id.
func TestChildrenOfLegacyRecords(t *testing.T) {
	t0 := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	bs := []*Branch{
		{ID: "root", Session: "s"},
		{ID: "b-z", Session: "s", Parent: "root", Depth: 1, Created: t0},
		{ID: "b-a", Session: "s", Parent: "root", Depth: 1, Created: t0.Add(time.Second)},
		{ID: "b-b", Session: "s", Parent: "root", Depth: 1, Created: t0.Add(time.Second)},
		{ID: "b-n", Session: "s", Parent: "root", Depth: 1, Created: t0, Ord: 1},
		{ID: "b-c", Session: "s", Parent: "b-a", Depth: 2, Created: t0},
	}
	// Their parents' records listed the children: the list is ignored.
	root := new(Branch)
	err := json.Unmarshal([]byte(`{"id":"root","session":"s","depth":0,"status":"active","budget":0,"used":0,"level":"normal","created":"2025-01-02T03:04:05Z","children":["b-z","b-a"],"calls":0}`), root)
	if err != nil {
		t.Fatalf("a record with a list of children: %v", err)
	}
	bs[0] = root
	kids := childrenFromParents(bs)
	if want := []string{"b-z", "b-a", "b-b", "b-n"}; !slices.Equal(kids["root"], want) {
		t.Errorf("root: got %v, want %v", kids["root"], want)
	}
	if want := []string{"b-c"}; !slices.Equal(kids["b-a"], want) {
		t.Errorf("b-a: got %v, want %v", kids["b-a"], want)
	}
	if len(kids) != 2 {
		t.Errorf("children of %d branches, want 2: %v", len(kids), kids)
	}
}
