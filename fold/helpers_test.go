package fold

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/foldproxy/foldproxy/fold/store"
	"github.com/foldproxy/foldproxy/policy"
)

// wordCounter counts whitespace-separated words as tokens.
type wordCounter struct{}

func (wordCounter) CountText(s string) int { return len(strings.Fields(s)) }

// fakeScanner redacts the word SECRET and fails on texts holding FAILSCAN.
type fakeScanner struct{}

func (fakeScanner) ScrubText(_ context.Context, s string) (string, map[string]int, error) {
	if strings.Contains(s, "FAILSCAN") {
		return "", nil, errors.New("scanner overran its deadline")
	}
	n := strings.Count(s, "SECRET")
	if n == 0 {
		return s, nil, nil
	}
	return strings.ReplaceAll(s, "SECRET", "[REDACTED:test]"), map[string]int{"test": n}, nil
}

// events records branch events.
type events struct {
	mu   sync.Mutex
	list []Event
}

func (e *events) BranchEvent(_ context.Context, ev Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.list = append(e.list, ev)
}

// kinds returns "kind:branch" of every event of the given kinds, in order.
func (e *events) of(kind string) []Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []Event
	for _, ev := range e.list {
		if ev.Kind == kind {
			out = append(out, ev)
		}
	}
	return out
}

type testEnv struct {
	m      *Manager
	store  Store
	events *events
}

// newEnv returns a Manager on a MemStore with one open session "s1". mod
// adjusts the settings.
func newEnv(t testing.TB, mod func(*policy.Fold)) *testEnv {
	t.Helper()
	return newEnvStore(t, store.NewMemStore(), mod)
}

func newEnvStore(t testing.TB, st Store, mod func(*policy.Fold)) *testEnv {
	t.Helper()
	set := policy.Default().Fold
	if mod != nil {
		mod(&set)
	}
	ev := &events{}
	m, err := NewManager(t.Context(), Options{
		Settings: set, Store: st, Scanner: fakeScanner{}, Counter: wordCounter{},
		Events: ev, PruneInterval: -1,
	})
	if err != nil {
		t.Fatalf("NewManager: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	if err := m.OpenSession(t.Context(), SessionRecord{ID: "s1", Transport: "stdio"}); err != nil {
		t.Fatalf("OpenSession: %v", err)
	}
	return &testEnv{m: m, store: st, events: ev}
}

// call runs a fold tool and returns its structured answer, or the text of
// its tool error (with ok false).
func (e *testEnv) call(t testing.TB, session, tool string, args any) (map[string]any, string, bool) {
	t.Helper()
	raw, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	out, err := e.m.CallTool(t.Context(), session, tool, raw)
	if err != nil {
		t.Fatalf("CallTool(%s): Go error %v", tool, err)
	}
	var res struct {
		IsError    bool `json:"isError"`
		Content    []struct{ Type, Text string }
		Structured map[string]any `json:"structuredContent"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("CallTool(%s): bad result %s: %v", tool, out, err)
	}
	if len(res.Content) != 1 || res.Content[0].Type != "text" {
		t.Fatalf("CallTool(%s): content %s", tool, out)
	}
	if res.IsError {
		return nil, res.Content[0].Text, false
	}
	if res.Structured != nil {
		t.Fatalf("CallTool(%s): a structuredContent copy of the answer: %s", tool, out)
	}
	var ans map[string]any
	if err := json.Unmarshal([]byte(res.Content[0].Text), &ans); err != nil {
		t.Fatalf("CallTool(%s): the answer is not JSON: %s", tool, out)
	}
	return ans, res.Content[0].Text, true
}

// mustCall runs a fold tool that must succeed.
func (e *testEnv) mustCall(t testing.TB, session, tool string, args any) map[string]any {
	t.Helper()
	ans, text, ok := e.call(t, session, tool, args)
	if !ok {
		t.Fatalf("%s(%v): refused: %s", tool, args, text)
	}
	return ans
}

// create makes a branch and returns its id.
func (e *testEnv) create(t testing.TB, args map[string]any) string {
	t.Helper()
	if _, ok := args["description"]; !ok {
		args["description"] = "a task"
	}
	return e.mustCall(t, "s1", ToolCreate, args)["branch_id"].(string)
}

// branch returns the stored record of id.
func (e *testEnv) branch(t testing.TB, id string) *Branch {
	t.Helper()
	b, err := e.store.GetBranch(context.Background(), id)
	if err != nil {
		t.Fatalf("GetBranch(%s): %v", id, err)
	}
	return b
}

// children returns the children of id as the Manager holds them (they are
// not in the stored record).
func (e *testEnv) children(t testing.TB, id string) []string {
	t.Helper()
	n := e.m.lookup(id)
	if n == nil {
		t.Fatalf("branch %s is not loaded", id)
	}
	return e.m.children(n)
}

// charge charges tokens to a branch through Charge, as the budget
// interceptor would, cutting to fit when the result does not.
func (e *testEnv) charge(t testing.TB, session, branch string, tokens int) (*ChargeResult, Budget, error) {
	t.Helper()
	var seen Budget
	res, err := e.m.Charge(t.Context(), session, branch, func(b Budget) (Charge, error) {
		seen = b
		c := Charge{Upstream: "up", Method: "tools/call", Name: "read", Result: []byte(`{"n":1}`), Tokens: tokens, Level: ""}
		if b.Remaining >= 0 && tokens > b.Remaining {
			c.Tokens, c.Cut, c.Rest = b.Remaining, true, []byte("the rest")
		}
		return c, nil
	})
	return res, seen, err
}

func waitClosed(t testing.TB, e *testEnv, id string) *Branch {
	t.Helper()
	n := e.m.lookup(id)
	if n == nil {
		t.Fatalf("branch %s is not loaded", id)
	}
	select {
	case <-n.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("branch %s did not close", id)
	}
	return n.cur.Load()
}
