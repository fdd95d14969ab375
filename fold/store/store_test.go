package fold

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

// openBadger opens a Badger store in dir, closing it at the end of the test.
func openBadgerT(t testing.TB, dir string) *BadgerStore {
	t.Helper()
	s, err := OpenBadger(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// openBadgerNoFsyncT opens a store as serve does by default (fold.fsync
// false).
func openBadgerNoFsyncT(t testing.TB, dir string) *BadgerStore {
	t.Helper()
	s, err := OpenBadgerFsync(dir, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// storeConformance checks the Store contract on a fresh store.
func storeConformance(t *testing.T, s Store) {
	ctx := t.Context()
	created := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	branches := []*Branch{
		{ID: "root-a/b", Session: "a/b", Status: StatusActive, Created: created, Level: "normal"},
		{ID: "b-1", Session: "a/b", Parent: "root-a/b", Depth: 1, Status: StatusForced, Reason: ReasonBudget, Budget: 100, Used: 100,
			Created: created.Add(time.Second), Closed: created.Add(time.Minute), Deadline: created.Add(time.Hour),
			ByTool: map[string]int{"up/x": 100}, ByUpstream: map[string]int{"up": 100}, Cuts: []string{"b-1~aa"}, CutCount: 1, Summary: "s", Ord: 3},
		{ID: "b-2", Session: "a/b", Parent: "b-1", Depth: 2, Ord: 1, Status: StatusActive, Created: created.Add(2 * time.Second)},
		{ID: "root-c", Session: "c", Status: StatusActive, Created: created.Add(3 * time.Second)},
	}
	for _, b := range branches {
		if err := s.PutBranch(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.GetBranch(ctx, "b-1")
	if err != nil || !reflect.DeepEqual(got, branches[1]) {
		t.Fatalf("GetBranch: got %+v, %v; want %+v", got, err, branches[1])
	}
	if _, err := s.GetBranch(ctx, "b-9"); !errors.Is(err, ErrBranchNotFound) {
		t.Fatalf("GetBranch(missing): got %v", err)
	}
	listIDs := func(session string) string {
		bs, err := s.Branches(ctx, session)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, b := range bs {
			ids = append(ids, b.ID)
		}
		return strings.Join(ids, ",")
	}
	for _, tt := range []struct{ session, want string }{
		{"a/b", "root-a/b,b-1,b-2"}, {"a", ""}, {"c", "root-c"}, {"", "root-a/b,b-1,b-2,root-c"},
	} {
		if got := listIDs(tt.session); got != tt.want {
			t.Errorf("Branches(%q): got %s, want %s", tt.session, got, tt.want)
		}
	}
	// Overwriting keeps one record.
	b2 := *branches[2]
	b2.Used = 7
	if err := s.PutBranch(ctx, &b2); err != nil {
		t.Fatal(err)
	}
	if got := listIDs("a/b"); got != "root-a/b,b-1,b-2" {
		t.Errorf("after overwrite: %s", got)
	}

	// Calls: sequence numbers per branch, paging.
	for i := range 5 {
		for _, br := range []string{"b-1", "b-1/x"} {
			seq, err := s.AppendCall(ctx, br, &CallRecord{Time: created.Add(time.Duration(i) * time.Second), Name: fmt.Sprint(br, i), Result: `{"i":` + fmt.Sprint(i) + `}`})
			if err != nil || seq != i+1 {
				t.Fatalf("AppendCall(%s) %d: got %d, %v", br, i, seq, err)
			}
		}
	}
	for _, tt := range []struct {
		from, limit int
		want        string
	}{{0, 0, "1,2,3,4,5"}, {1, 2, "1,2"}, {4, 0, "4,5"}, {6, 0, ""}, {3, 1, "3"}} {
		calls, err := s.Calls(ctx, "b-1", tt.from, tt.limit)
		if err != nil {
			t.Fatal(err)
		}
		var seqs []string
		for _, c := range calls {
			seqs = append(seqs, fmt.Sprint(c.Seq))
			if c.Name != fmt.Sprint("b-1", c.Seq-1) {
				t.Errorf("call %d: name %s", c.Seq, c.Name)
			}
		}
		if got := strings.Join(seqs, ","); got != tt.want {
			t.Errorf("Calls(b-1, %d, %d): got %s, want %s", tt.from, tt.limit, got, tt.want)
		}
	}

	// Cuts, byte for byte.
	rest := []byte("rest \x00\xff of it")
	if err := s.PutCut(ctx, "b-1~aa", rest); err != nil {
		t.Fatal(err)
	}
	rest[0] = 'X' // the store keeps its own copy
	if got, err := s.GetCut(ctx, "b-1~aa"); err != nil || string(got) != "rest \x00\xff of it" {
		t.Fatalf("GetCut: %q, %v", got, err)
	}
	if err := s.PutCut(ctx, "empty", nil); err != nil {
		t.Fatal(err)
	}
	if got, err := s.GetCut(ctx, "empty"); err != nil || len(got) != 0 {
		t.Fatalf("GetCut(empty): %q, %v", got, err)
	}
	if _, err := s.GetCut(ctx, "nope"); !errors.Is(err, ErrCutNotFound) {
		t.Fatalf("GetCut(missing): %v", err)
	}

	// Sessions.
	rec := &SessionRecord{ID: "a/b", Transport: "http", ClientInfo: json.RawMessage(`{"name":"x"}`), Created: created, LastSeen: created}
	if err := s.PutSession(ctx, rec); err != nil {
		t.Fatal(err)
	}
	if err := s.PutSession(ctx, &SessionRecord{ID: "c"}); err != nil {
		t.Fatal(err)
	}
	if got, err := s.GetSession(ctx, "a/b"); err != nil || !reflect.DeepEqual(got, rec) {
		t.Fatalf("GetSession: %+v, %v", got, err)
	}
	if all, err := s.Sessions(ctx); err != nil || len(all) != 2 || all[0].ID != "a/b" {
		t.Fatalf("Sessions: %v, %v", all, err)
	}
	if err := s.DeleteSession(ctx, "a/b"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteSession(ctx, "a/b"); err != nil {
		t.Fatalf("deleting twice: %v", err)
	}
	if _, err := s.GetSession(ctx, "a/b"); !errors.Is(err, ErrSessionNotFound) {
		t.Fatalf("GetSession after delete: %v", err)
	}

	// Bad input is refused, not a panic.
	if err := s.PutBranch(ctx, nil); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("PutBranch(nil): %v", err)
	}
	if _, err := s.AppendCall(ctx, "b", nil); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("AppendCall(nil): %v", err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := s.PutSession(cancelled, &SessionRecord{ID: "z"}); !errors.Is(err, context.Canceled) {
		t.Errorf("PutSession with a cancelled context: %v", err)
	}

	// Concurrent appends to one branch get distinct sequence numbers.
	var wg sync.WaitGroup
	seqs := make(chan int, 40)
	for range 40 {
		wg.Go(func() {
			seq, err := s.AppendCall(ctx, "conc", &CallRecord{Result: "x"})
			if err != nil {
				t.Error(err)
			}
			seqs <- seq
		})
	}
	wg.Wait()
	close(seqs)
	seen := map[int]bool{}
	for seq := range seqs {
		if seen[seq] {
			t.Fatalf("sequence number %d given twice", seq)
		}
		seen[seq] = true
	}
}

func TestMemStoreConformance(t *testing.T) { storeConformance(t, NewMemStore()) }

func TestBadgerStoreConformance(t *testing.T) {
	s := openBadgerT(t, t.TempDir())
	defer s.Close()
	storeConformance(t, s)
}

// storePrune checks Prune on a fresh store.
func storePrune(t *testing.T, s Store) {
	ctx := t.Context()
	now := time.Now()
	old := now.Add(-48 * time.Hour)
	put := func(b *Branch) {
		if err := s.PutBranch(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	put(&Branch{ID: "old-closed", Session: "s", Status: StatusReturned, Created: old, Closed: old.Add(time.Minute)})
	put(&Branch{ID: "old-active", Session: "s", Status: StatusActive, Created: old})
	put(&Branch{ID: "new-closed", Session: "s", Status: StatusForced, Created: now, Closed: now})
	big := strings.Repeat("x", 1000)
	for i := range 3 {
		if _, err := s.AppendCall(ctx, "old-active", &CallRecord{Time: old.Add(time.Duration(i) * time.Second), Result: big}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 5 {
		if _, err := s.AppendCall(ctx, "new-closed", &CallRecord{Time: now.Add(time.Duration(i-10) * time.Second), Result: big}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.PutCut(ctx, "new-closed~01", []byte(big)); err != nil {
		t.Fatal(err)
	}

	// By age: the old calls and the old closed branch go; the old active
	// branch stays.
	if err := s.Prune(ctx, 24*time.Hour, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetBranch(ctx, "old-closed"); !errors.Is(err, ErrBranchNotFound) {
		t.Errorf("old closed branch: %v, want pruned", err)
	}
	if _, err := s.GetBranch(ctx, "old-active"); err != nil {
		t.Errorf("old active branch: %v, want kept", err)
	}
	if calls, _ := s.Calls(ctx, "old-active", 0, 0); len(calls) != 0 {
		t.Errorf("old calls: %d left, want 0", len(calls))
	}
	if calls, _ := s.Calls(ctx, "new-closed", 0, 0); len(calls) != 5 {
		t.Errorf("new calls: %d left, want 5", len(calls))
	}
	if bs, _ := s.Branches(ctx, "s"); len(bs) != 2 {
		t.Errorf("branches left: %d, want 2", len(bs))
	}

	// By size: the oldest archives go first, until under the bound.
	if err := s.Prune(ctx, 24*time.Hour, 3500); err != nil {
		t.Fatal(err)
	}
	calls, _ := s.Calls(ctx, "new-closed", 0, 0)
	if len(calls) == 0 || len(calls) > 3 || calls[len(calls)-1].Seq != 5 {
		var seqs []int
		for _, c := range calls {
			seqs = append(seqs, c.Seq)
		}
		t.Errorf("after size pruning: calls %v, want the newest few", seqs)
	}
	if _, err := s.GetCut(ctx, "new-closed~01"); err != nil {
		t.Errorf("the newest archive (a cut) was pruned: %v", err)
	}
	if _, err := s.GetBranch(ctx, "new-closed"); err != nil {
		t.Errorf("branch records are not pruned by size: %v", err)
	}
	// Appends continue after the pruned ones.
	if seq, err := s.AppendCall(ctx, "new-closed", &CallRecord{Result: "y"}); err != nil || seq != 6 {
		t.Errorf("append after prune: %d, %v", seq, err)
	}
}

func TestMemStorePrune(t *testing.T) { storePrune(t, NewMemStore()) }

func TestBadgerStorePrune(t *testing.T) {
	s := openBadgerT(t, t.TempDir())
	defer s.Close()
	storePrune(t, s)
}

// The Badger store keeps everything across a close and reopen, reads it
// back read-only, and refuses a second writer.
func TestBadgerReopen(t *testing.T) {
	dir := t.TempDir()
	ctx := t.Context()
	s := openBadgerT(t, dir)
	if _, err := OpenBadger(dir, nil); err == nil {
		t.Fatalf("a second writer opened the store")
	}
	if err := s.PutBranch(ctx, &Branch{ID: "b-1", Session: "s", Status: StatusActive}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendCall(ctx, "b-1", &CallRecord{Result: "r1"}); err != nil {
		t.Fatal(err)
	}
	large := bytes.Repeat([]byte("0123456789abcdef"), 64<<10) // 1 MiB: goes to the value log
	if err := s.PutCut(ctx, "b-1~aa", large); err != nil {
		t.Fatal(err)
	}
	if err := s.PutSession(ctx, &SessionRecord{ID: "s"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.PutSession(ctx, &SessionRecord{ID: "t"}); !errors.Is(err, ErrStoreClosed) {
		t.Errorf("write after close: %v", err)
	}

	ro, err := OpenBadgerReadOnly(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := ro.GetBranch(ctx, "b-1"); err != nil || b.Status != StatusActive {
		t.Errorf("read-only GetBranch: %v, %v", b, err)
	}
	if got, err := ro.GetCut(ctx, "b-1~aa"); err != nil || !bytes.Equal(got, large) {
		t.Errorf("read-only GetCut: %d bytes, %v", len(got), err)
	}
	if err := ro.PutSession(ctx, &SessionRecord{ID: "t"}); err == nil || !strings.Contains(err.Error(), "read-only") {
		t.Errorf("read-only write: %v", err)
	}
	if err := ro.Close(); err != nil {
		t.Fatal(err)
	}

	s = openBadgerT(t, dir)
	defer s.Close()
	if seq, err := s.AppendCall(ctx, "b-1", &CallRecord{Result: "r2"}); err != nil || seq != 2 {
		t.Errorf("append after reopen: seq %d, %v; want 2", seq, err)
	}
	if rec, err := s.GetSession(ctx, "s"); err != nil || rec.ID != "s" {
		t.Errorf("session after reopen: %v, %v", rec, err)
	}
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
		{"mem", func(*testing.B) Store { return NewMemStore() }},
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
		{"mem", func(*testing.T) Store { return NewMemStore() }},
		{"badger", func(t *testing.T) Store { return openBadgerT(t, t.TempDir()) }},
		{"fallback", func(*testing.T) Store { return plainStore{NewMemStore()} }},
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
		{"mem", func(*testing.B) Store { return NewMemStore() }},
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
	*MemStore
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
	st := &writeCounter{MemStore: NewMemStore()}
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
