package fold

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/foldproxy/foldproxy/fold/store"
	"github.com/foldproxy/foldproxy/policy"
)

func TestDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, nil)
		outer := e.create(t, map[string]any{"timeout_seconds": 10})
		inner := e.create(t, map[string]any{"timeout_seconds": 100})
		other := e.create(t, map[string]any{"parent_branch_id": RootID("s1")}) // default 300 s

		time.Sleep(9 * time.Second)
		synctest.Wait()
		st := e.mustCall(t, "s1", ToolStatus, map[string]any{"branch_id": outer})
		if st["status"] != "active" || st["timeout_remaining_seconds"] != float64(1) {
			t.Fatalf("at 9 s: got %v, %v", st["status"], st["timeout_remaining_seconds"])
		}

		time.Sleep(time.Second)
		synctest.Wait()
		tests := []struct {
			id     string
			status Status
			reason string
		}{
			{outer, StatusForced, ReasonDeadline},
			{inner, StatusForced, ReasonParent},
			{other, StatusActive, ""},
		}
		for _, tt := range tests {
			got := e.branch(t, tt.id)
			if got.Status != tt.status || got.Reason != tt.reason {
				t.Errorf("%s: got %s %q, want %s %q", tt.id, got.Status, got.Reason, tt.status, tt.reason)
			}
		}
		if s := e.branch(t, outer).Summary; !strings.Contains(s, "deadline passed") || !strings.Contains(s, inner) {
			t.Errorf("summary: %q", s)
		}
		if _, err := e.m.Attribute(t.Context(), "s1", outer); !errors.Is(err, ErrBranchClosed) {
			t.Errorf("attribute: got %v", err)
		}

		time.Sleep(290 * time.Second)
		synctest.Wait()
		if got := e.branch(t, other); got.Status != StatusForced || got.Reason != ReasonDeadline {
			t.Errorf("default timeout: got %s %q", got.Status, got.Reason)
		}
	})
}

func TestRecoverNotResumable(t *testing.T) {
	store := store.NewMemStore()
	e := newEnvStore(t, store, nil)
	a := e.create(t, map[string]any{})
	a1 := e.create(t, map[string]any{})
	done := e.create(t, map[string]any{"parent_branch_id": RootID("s1")})
	e.mustCall(t, "s1", ToolReturn, map[string]any{"branch_id": done, "message": "ok"})
	e.m.Close() // the proxy stops; the store stays

	ev := &events{}
	m, err := NewManager(t.Context(), Options{Store: store, Counter: wordCounter{}, Events: ev, PruneInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.Recover(t.Context(), func(string) bool { return false }); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		id     string
		status Status
		reason string
	}{
		{a, StatusFailed, ReasonProxyRestarted},
		{a1, StatusFailed, ReasonProxyRestarted},
		{RootID("s1"), StatusFailed, ReasonProxyRestarted},
		{done, StatusReturned, ""},
	}
	for _, tt := range tests {
		got, err := store.GetBranch(t.Context(), tt.id)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status != tt.status || got.Reason != tt.reason {
			t.Errorf("%s: got %s %q, want %s %q", tt.id, got.Status, got.Reason, tt.status, tt.reason)
		}
	}
	var order []string
	for _, e := range ev.of("failed") {
		order = append(order, e.Branch)
	}
	if want := []string{a1, a, RootID("s1")}; strings.Join(order, ",") != strings.Join(want, ",") {
		t.Errorf("failed events: got %v, want deepest first %v", order, want)
	}
	if _, err := store.GetSession(t.Context(), "s1"); !errors.Is(err, ErrSessionNotFound) {
		t.Errorf("session record: got %v, want deleted", err)
	}
	if _, err := m.ResumeSession(t.Context(), "s1"); !errors.Is(err, ErrSessionNotFound) {
		t.Errorf("resume: got %v", err)
	}
	// A new session with the same id (stdio) starts afresh.
	if err := m.OpenSession(t.Context(), SessionRecord{ID: "s1"}); err != nil {
		t.Fatal(err)
	}
	if b, err := m.Attribute(t.Context(), "s1", ""); err != nil || b.ID != RootID("s1") {
		t.Errorf("after reopen: %v, %v", b, err)
	}
}

func TestRecoverResumable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := store.NewMemStore()
		e := newEnvStore(t, store, nil)
		late := e.create(t, map[string]any{"timeout_seconds": 60})
		past := e.create(t, map[string]any{"timeout_seconds": 5, "parent_branch_id": RootID("s1")})
		e.m.Close()
		// The proxy is down for 10 s: past's deadline passes meanwhile.
		time.Sleep(10 * time.Second)

		m, err := NewManager(t.Context(), Options{Store: store, Counter: wordCounter{}, PruneInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		if err := m.Recover(t.Context(), func(s string) bool { return s == "s1" }); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if got, _ := store.GetBranch(t.Context(), past); got.Status != StatusForced || got.Reason != ReasonDeadline {
			t.Errorf("past deadline: got %s %q, want forced at once", got.Status, got.Reason)
		}
		if got, err := m.Attribute(t.Context(), "s1", ""); err != nil || got.ID != late {
			t.Fatalf("attribute after recover: %v, %v", got, err)
		}
		if rec, err := m.ResumeSession(t.Context(), "s1"); err != nil || rec.ID != "s1" {
			t.Fatalf("resume: %v, %v", rec, err)
		}
		time.Sleep(49 * time.Second)
		synctest.Wait()
		if got, _ := store.GetBranch(t.Context(), late); got.Status != StatusActive {
			t.Fatalf("at 59 s: got %s", got.Status)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if got, _ := store.GetBranch(t.Context(), late); got.Status != StatusForced || got.Reason != ReasonDeadline {
			t.Errorf("re-armed deadline: got %s %q", got.Status, got.Reason)
		}
	})
}

func TestDependsOn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, nil)
		a := e.create(t, map[string]any{"description": "a", "parent_branch_id": RootID("s1")})
		b := e.create(t, map[string]any{"description": "b", "budget": 10, "parent_branch_id": RootID("s1")})

		got := make(chan json.RawMessage, 1)
		go func() {
			// Not e.call: t.Fatal must stay on the test's goroutine.
			out, err := e.m.CallTool(context.Background(), "s1", ToolCreate,
				json.RawMessage(`{"description":"c","parent_branch_id":"`+RootID("s1")+`","depends_on":["`+a+`","`+b+`"]}`))
			if err != nil {
				t.Errorf("create: %v", err)
			}
			got <- out
		}()
		time.Sleep(30 * time.Second)
		synctest.Wait()
		select {
		case out := <-got:
			t.Fatalf("created before its dependencies closed: %s", out)
		default:
		}
		e.mustCall(t, "s1", ToolReturn, map[string]any{"branch_id": a, "message": "a found x", "return_value": `{"x":1}`})
		if _, _, err := e.charge(t, "s1", b, 50); err != nil { // cut: b is force-returned
			t.Fatal(err)
		}
		var r struct {
			IsError bool `json:"isError"`
			Content []struct{ Text string }
		}
		var ans map[string]any
		if out := <-got; json.Unmarshal(out, &r) != nil || r.IsError || json.Unmarshal([]byte(r.Content[0].Text), &ans) != nil {
			t.Fatalf("create: %s", out)
		}
		deps := ans["dependencies"].([]any)
		if len(deps) != 2 {
			t.Fatalf("dependencies: %v", deps)
		}
		da, db := deps[0].(map[string]any), deps[1].(map[string]any)
		if da["branch_id"] != a || da["status"] != "returned" || da["message"] != "a found x" || da["return_value"] != `{"x":1}` {
			t.Errorf("dependency a: %v", da)
		}
		if db["branch_id"] != b || db["status"] != "forced" || db["reason"] != ReasonBudget || !strings.Contains(db["summary"].(string), "budget exhausted") {
			t.Errorf("dependency b: %v", db)
		}

		// A dependency that does not finish in time.
		slow := e.create(t, map[string]any{"description": "slow", "parent_branch_id": RootID("s1")})
		start := time.Now()
		_, text, ok := e.call(t, "s1", ToolCreate, map[string]any{"description": "d", "parent_branch_id": RootID("s1"), "depends_on": []string{slow}})
		if ok || !strings.HasPrefix(text, "ErrDependencyFailed: depends_on: branch "+slow+" is still active after 2m0s") {
			t.Fatalf("waiting too long: got %s", text)
		}
		if waited := time.Since(start); waited != 120*time.Second {
			t.Errorf("waited %s, want the configured 2m0s", waited)
		}
	})
}

// TestEndSessionGrace: branches still active after the session-end grace,
// because work in flight holds them, are marked failed (FR-010) once that
// work lets go, and the session is forgotten.
func TestEndSessionGrace(t *testing.T) {
	for _, hold := range []string{"root", "branch"} {
		t.Run(hold, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newEnv(t, func(f *policy.Fold) { f.SessionEndGrace = policy.Duration(5 * time.Second) })
				a := e.create(t, map[string]any{})
				b := e.create(t, map[string]any{"parent_branch_id": a})
				target := RootID("s1")
				if hold == "branch" {
					target = b
				}
				// A charge holds the target's lock until released.
				release := make(chan struct{})
				held := make(chan struct{})
				go func() {
					_, err := e.m.Charge(context.Background(), "s1", target, func(Budget) (Charge, error) {
						close(held)
						<-release
						return Charge{Tokens: 1}, nil
					})
					if err != nil {
						t.Errorf("charge: %v", err)
					}
				}()
				<-held
				start := time.Now()
				err := e.m.EndSession(t.Context(), "s1")
				if err == nil || !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("EndSession with the %s held: got %v, want the grace to run out", hold, err)
				}
				if waited := time.Since(start); waited != 5*time.Second {
					t.Errorf("EndSession waited %s, want the grace of 5s", waited)
				}
				if got := e.branch(t, b); got.Status != StatusActive {
					t.Fatalf("while the charge holds it: got %s", got.Status)
				}
				close(release)
				synctest.Wait()
				for _, id := range []string{a, b} {
					if got := e.branch(t, id); got.Status != StatusFailed || got.Reason != ReasonSessionEnd {
						t.Errorf("branch %s after the grace: got %s %q, want failed %q", id, got.Status, got.Reason, ReasonSessionEnd)
					}
				}
				if _, err := e.store.GetSession(t.Context(), "s1"); !errors.Is(err, ErrSessionNotFound) {
					t.Errorf("the session record after the grace: got %v, want it deleted", err)
				}
			})
		})
	}
}

// TestLateResultIsArchived: a result that arrives after its branch's
// deadline closed it cannot be charged, but is archived in the closed
// branch and recallable from the main thread with the handle returned.
func TestLateResultIsArchived(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, nil)
		a := e.create(t, map[string]any{"timeout_seconds": 10})
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if got := e.branch(t, a); got.Status != StatusForced || got.Reason != ReasonDeadline {
			t.Fatalf("branch at its deadline: got %s %q", got.Status, got.Reason)
		}
		result := json.RawMessage(`{"content":[{"type":"text","text":"the late result"}]}`)
		_, err := e.m.Charge(t.Context(), "s1", a, func(Budget) (Charge, error) {
			t.Error("fit called for a closed branch")
			return Charge{}, nil
		})
		if !errors.Is(err, ErrBranchClosed) {
			t.Fatalf("charge after the deadline: got %v, want ErrBranchClosed", err)
		}
		handle, err := e.m.ArchiveLate(t.Context(), "s1", a, Charge{Upstream: "up", Method: "tools/call", Name: "slow", Result: result})
		if err != nil {
			t.Fatalf("ArchiveLate: %v", err)
		}
		p := e.mustCall(t, "s1", ToolRecall, map[string]any{"handle": handle, "max_tokens": 1000})
		if p["text"] != string(result) {
			t.Errorf("recall %s: got %v, want the whole result", handle, p["text"])
		}
		if _, err := e.m.ArchiveLate(t.Context(), "s1", RootID("s1"), Charge{Result: result}); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("ArchiveLate on an active branch: got %v, want ErrInvalidArgument", err)
		}
	})
}
