package fold

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/foldproxy/foldproxy/fold/store"
	"github.com/foldproxy/foldproxy/policy"
)

// The Manager on the stores of fold/store: its writes, batches and
// restarts (the stores' own contract is fold/store/storetest's).

// openBadger opens a Badger store in dir, closing it at the end of the test.
func openBadgerT(t testing.TB, dir string) *store.BadgerStore {
	t.Helper()
	s, err := store.OpenBadger(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// openBadgerNoFsyncT opens a store as serve does by default (fold.fsync
// false).
func openBadgerNoFsyncT(t testing.TB, dir string) *store.BadgerStore {
	t.Helper()
	s, err := store.OpenBadgerFsync(dir, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A Manager on Badger: state survives a restart of the proxy.
func TestManagerOnBadger(t *testing.T) {
	dir := t.TempDir()
	s := openBadgerT(t, dir)
	e := newEnvStore(t, s, nil)
	a := e.create(t, map[string]any{"description": "explore", "budget": 100})
	res, _, err := e.charge(t, "s1", a, 500)
	if err != nil || !res.Forced {
		t.Fatalf("charge: %+v, %v", res, err)
	}
	b := e.create(t, map[string]any{"description": "open"})
	e.m.Close()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = openBadgerT(t, dir)
	defer s.Close()
	m, err := NewManager(t.Context(), Options{Store: s, Counter: wordCounter{}, PruneInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.Recover(t.Context(), func(string) bool { return true }); err != nil {
		t.Fatal(err)
	}
	e2 := &testEnv{m: m, store: s, events: &events{}}
	if got, err := m.Attribute(t.Context(), "s1", ""); err != nil || got.ID != b {
		t.Fatalf("attribute after restart: %v, %v", got, err)
	}
	page := e2.mustCall(t, "s1", ToolRecall, map[string]any{"handle": res.Handle})
	if page["text"] != "the rest" || page["done"] != true {
		t.Errorf("recall after restart: %v", page)
	}
	if st := e2.mustCall(t, "s1", ToolStatus, map[string]any{"branch_id": a}); st["status"] != "forced" || st["summary"] == "" {
		t.Errorf("status after restart: %v", st)
	}
	// The summary, still undelivered, reaches the parent's next result.
	_, seen, err := e2.charge(t, "s1", RootID("s1"), 1)
	if err != nil || len(seen.Summaries) != 1 {
		t.Errorf("summaries after restart: %v, %v", seen.Summaries, err)
	}
}

func BenchmarkCreateReturn(b *testing.B) {
	for _, tt := range []struct {
		name  string
		store func(b *testing.B) Store
	}{
		{"mem", func(*testing.B) Store { return store.NewMemStore() }},
		{"badger", func(b *testing.B) Store { return openBadgerT(b, b.TempDir()) }},
		{"badger-nofsync", func(b *testing.B) Store { return openBadgerNoFsyncT(b, b.TempDir()) }},
	} {
		b.Run(tt.name, func(b *testing.B) {
			s := tt.store(b)
			defer s.Close()
			e := newEnvStore(b, s, nil)
			e.m.set.CreatesPerMinute = 1 << 30
			b.ResetTimer()
			for b.Loop() {
				if _, err := e.m.create(b.Context(), "s1", createArgs{Description: "bench"}); err != nil {
					b.Fatal(err)
				}
				if _, err := e.m.ret(b.Context(), "s1", returnArgs{Message: "done"}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkFirstCharge is a branch's life with one call: create, the
// first charge to the new branch, return.
func BenchmarkFirstCharge(b *testing.B) {
	s := openBadgerNoFsyncT(b, b.TempDir())
	defer s.Close()
	e := newEnvStore(b, s, nil)
	e.m.set.CreatesPerMinute = 1 << 30
	result := []byte(`{"content":[{"type":"text","text":"some file content"}]}`)
	for b.Loop() {
		ans, err := e.m.create(b.Context(), "s1", createArgs{Description: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := e.m.Charge(b.Context(), "s1", ans.BranchID, func(Budget) (Charge, error) {
			return Charge{Upstream: "fs", Method: "tools/call", Name: "read_file", Result: result, Tokens: 1}, nil
		}); err != nil {
			b.Fatal(err)
		}
		if _, err := e.m.ret(b.Context(), "s1", returnArgs{Message: "done"}); err != nil {
			b.Fatal(err)
		}
	}
}

// plainStore hides a store's Batch method, to test the Manager's fallback.
type plainStore struct{ Store }

func TestBatch(t *testing.T) {
	for _, tt := range []struct {
		name  string
		store func(t *testing.T) Store
	}{
		{"mem", func(*testing.T) Store { return store.NewMemStore() }},
		{"badger", func(t *testing.T) Store { return openBadgerT(t, t.TempDir()) }},
		{"fallback", func(*testing.T) Store { return plainStore{store.NewMemStore()} }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := tt.store(t)
			defer s.Close()
			ctx := t.Context()
			m := &Manager{store: s}
			if _, err := s.AppendCall(ctx, "b-1", &CallRecord{Result: "first"}); err != nil {
				t.Fatal(err)
			}
			r1, r2 := &CallRecord{Result: "second"}, &CallRecord{Result: "other"}
			err := m.commit(ctx, &Batch{
				Cuts:     []BatchCut{{Handle: "b-1~01", Rest: []byte("rest")}},
				Calls:    []BatchCall{{Branch: "b-1", Rec: r1}, {Branch: "b-2", Rec: r2}},
				Branches: []*Branch{{ID: "b-1", Session: "s", Used: 3}, {ID: "b-2", Session: "s"}},
			})
			if err != nil {
				t.Fatal(err)
			}
			if r1.Seq != 2 || r2.Seq != 1 {
				t.Errorf("sequence numbers: got %d, %d; want 2, 1", r1.Seq, r2.Seq)
			}
			if calls, _ := s.Calls(ctx, "b-1", 0, 0); len(calls) != 2 || calls[1].Result != "second" {
				t.Errorf("calls: %v", calls)
			}
			if rest, err := s.GetCut(ctx, "b-1~01"); err != nil || string(rest) != "rest" {
				t.Errorf("cut: %q, %v", rest, err)
			}
			if bs, _ := s.Branches(ctx, "s"); len(bs) != 2 {
				t.Errorf("branches: %d", len(bs))
			}
			if err := m.commit(ctx, &Batch{Branches: []*Branch{nil}}); err == nil {
				t.Errorf("a batch with a nil branch was accepted")
			}
		})
	}
}

func BenchmarkCharge(b *testing.B) {
	for _, tt := range []struct {
		name  string
		store func(b *testing.B) Store
	}{
		{"mem", func(*testing.B) Store { return store.NewMemStore() }},
		{"badger", func(b *testing.B) Store { return openBadgerT(b, b.TempDir()) }},
		{"badger-nofsync", func(b *testing.B) Store { return openBadgerNoFsyncT(b, b.TempDir()) }},
	} {
		b.Run(tt.name, func(b *testing.B) {
			s := tt.store(b)
			defer s.Close()
			e := newEnvStore(b, s, nil)
			br := e.create(b, map[string]any{"budget": 32768})
			result := []byte(`{"content":[{"type":"text","text":"some file content"}]}`)
			for b.Loop() {
				if _, err := e.m.Charge(b.Context(), "s1", br, func(Budget) (Charge, error) {
					return Charge{Upstream: "fs", Method: "tools/call", Name: "read_file", Result: result, Tokens: 0}, nil
				}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// writeCounter counts the writes a Manager makes through its store, and
// fails them while fail is set.
type writeCounter struct {
	*store.MemStore
	writes int
	fail   bool
}

func (w *writeCounter) PutBranch(ctx context.Context, b *Branch) error {
	w.writes++
	if w.fail {
		return errors.New("the disk went away")
	}
	return w.MemStore.PutBranch(ctx, b)
}

func (w *writeCounter) Batch(ctx context.Context, b *Batch) error {
	w.writes++
	if w.fail {
		return errors.New("the disk went away")
	}
	return w.MemStore.Batch(ctx, b)
}

// A branch's return, and a charge that force-returns a branch, are one
// write each, all or nothing: the closed record with the parent's (or the
// branch's) charge.
func TestCloseIsOneWrite(t *testing.T) {
	st := &writeCounter{MemStore: store.NewMemStore()}
	e := newEnvStore(t, st, nil)
	root := RootID("s1")
	id := e.create(t, map[string]any{"budget": 1000})
	rootCalls := e.branch(t, root).Calls

	st.fail = true
	if _, err := e.m.ret(t.Context(), "s1", returnArgs{BranchID: id, Message: "done"}); err == nil {
		t.Fatal("a return whose write failed succeeded")
	}
	if b := e.branch(t, id); b.Status != StatusActive {
		t.Errorf("after a failed return the branch is %s in the store", b.Status)
	}
	if r := e.branch(t, root); r.Calls != rootCalls {
		t.Errorf("after a failed return the parent was charged: %d calls, was %d", r.Calls, rootCalls)
	}
	st.fail = false

	st.writes = 0
	e.mustCall(t, "s1", ToolReturn, map[string]any{"branch_id": id, "message": "done"})
	if st.writes != 1 {
		t.Errorf("a return made %d writes; want 1", st.writes)
	}
	if b, r := e.branch(t, id), e.branch(t, root); b.Status != StatusReturned || r.Calls != rootCalls+1 {
		t.Errorf("after the return: branch %s, parent calls %d (was %d)", b.Status, r.Calls, rootCalls)
	}

	id = e.create(t, map[string]any{"budget": 1000})
	st.writes = 0
	res, _, err := e.charge(t, "s1", id, 5000) // cut: the branch is force-returned
	if err != nil || !res.Forced {
		t.Fatalf("an over-budget charge: %+v, %v", res, err)
	}
	if st.writes != 1 {
		t.Errorf("a charge that force-returned its branch made %d writes; want 1", st.writes)
	}
	if b := e.branch(t, id); b.Status != StatusForced || b.Calls != 1 || len(b.Cuts) != 1 {
		t.Errorf("after the forced return: %s, %d calls, cuts %v", b.Status, b.Calls, b.Cuts)
	}
}

// Charges to different branches run concurrently, each one's records in
// order with no sequence number lost or doubled, through the background
// committer, and all of it is there after a restart.
func TestWALConcurrentCharges(t *testing.T) {
	const branches, charges = 6, 25
	dir := t.TempDir()
	ctx := t.Context()
	s := openBadgerNoFsyncT(t, dir)
	e := newEnvStore(t, s, func(f *policy.Fold) { f.CreatesPerMinute = 100 })
	ids := make([]string, branches)
	for i := range ids {
		ids[i] = e.create(t, map[string]any{"budget": 30000, "parent_branch_id": RootID("s1")})
	}
	var wg sync.WaitGroup
	errs := make(chan error, branches*charges)
	for _, id := range ids {
		wg.Go(func() {
			for range charges {
				if _, err := e.m.Charge(ctx, "s1", id, func(Budget) (Charge, error) {
					return Charge{Upstream: "up", Method: "tools/call", Name: "read", Result: []byte("r"), Tokens: 2}, nil
				}); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	check := func(st Store, when string) {
		for _, id := range ids {
			calls, err := st.Calls(ctx, id, 0, 0)
			if err != nil || len(calls) != charges {
				t.Fatalf("%s: %s has %d calls (%v), want %d", when, id, len(calls), err, charges)
			}
			for i, c := range calls {
				if c.Seq != i+1 {
					t.Fatalf("%s: %s call %d has seq %d", when, id, i, c.Seq)
				}
			}
			b, err := st.GetBranch(ctx, id)
			if err != nil || b.Used != 2*charges || b.Calls != charges {
				t.Fatalf("%s: branch %s: %+v, %v", when, id, b, err)
			}
		}
	}
	check(s, "before the restart")
	e.m.Close()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := openBadgerNoFsyncT(t, dir)
	defer s2.Close()
	check(s2, "after the restart")
}
