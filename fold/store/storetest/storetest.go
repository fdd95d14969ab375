// Package storetest is the conformance suite of fold.Store: every store of
// fold/store (the Badger store, MemStore) runs it from its tests, and so
// must any other implementation. It covers what fold's Manager relies on:
// branches put and read back, archived calls with their sequence numbers,
// cut remainders byte for byte, sessions, fold's own records, batches all
// or nothing, pruning by age and size, and, for a durable store, every
// acknowledged write read back after a close and reopen.
package storetest

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

	"github.com/foldproxy/foldproxy/fold"
)

// Store is what the suite checks: fold.Store with the extensions the
// Manager uses when a store has them (both stores of fold/store do).
type Store interface {
	fold.Store
	fold.Batcher
	fold.RecordReader
}

// Run runs the suite on fresh stores made by open, one per subtest; the
// suite closes them.
func Run(t *testing.T, open func(t *testing.T) Store) {
	for _, tt := range []struct {
		name string
		fn   func(*testing.T, Store)
	}{
		{"Contract", contract},
		{"Prune", prune},
		{"Records", records},
		{"Batch", batch},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := open(t)
			defer s.Close()
			tt.fn(t, s)
		})
	}
}

// RunDurable runs Run, and then checks that a store that open opens in
// dir, written to and closed, gives back every write when open opens it
// again in the same folder.
func RunDurable(t *testing.T, open func(t *testing.T, dir string) Store) {
	Run(t, func(t *testing.T) Store { return open(t, t.TempDir()) })
	t.Run("Reopen", func(t *testing.T) { reopen(t, open) })
}

// contract checks the Store contract on a fresh store: branches,
// archived calls, cuts, sessions, bad input, concurrent appends, in that
// order on the one store.
func contract(t *testing.T, s Store) {
	created := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	contractBranches(t, s, created)
	contractCalls(t, s, created)
	contractCuts(t, s)
	contractSessions(t, s, created)
	contractBadInput(t, s)
	contractConcurrent(t, s)
}

// contractBranches checks branches: put, get, list by session, overwrite.
func contractBranches(t *testing.T, s Store, created time.Time) {
	ctx := t.Context()
	branches := []*fold.Branch{
		{ID: "root-a/b", Session: "a/b", Status: fold.StatusActive, Created: created, Level: "normal"},
		{ID: "b-1", Session: "a/b", Parent: "root-a/b", Depth: 1, Status: fold.StatusForced, Reason: fold.ReasonBudget, Budget: 100, Used: 100,
			Created: created.Add(time.Second), Closed: created.Add(time.Minute), Deadline: created.Add(time.Hour),
			ByTool: map[string]int{"up/x": 100}, ByUpstream: map[string]int{"up": 100}, Cuts: []string{"b-1~aa"}, CutCount: 1, Summary: "s", Ord: 3},
		{ID: "b-2", Session: "a/b", Parent: "b-1", Depth: 2, Ord: 1, Status: fold.StatusActive, Created: created.Add(2 * time.Second)},
		{ID: "root-c", Session: "c", Status: fold.StatusActive, Created: created.Add(3 * time.Second)},
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
	if _, err := s.GetBranch(ctx, "b-9"); !errors.Is(err, fold.ErrBranchNotFound) {
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
}

// contractCalls checks archived calls: sequence numbers per branch, paging.
func contractCalls(t *testing.T, s Store, created time.Time) {
	ctx := t.Context()
	for i := range 5 {
		for _, br := range []string{"b-1", "b-1/x"} {
			seq, err := s.AppendCall(ctx, br, &fold.CallRecord{Time: created.Add(time.Duration(i) * time.Second), Name: fmt.Sprint(br, i), Result: `{"i":` + fmt.Sprint(i) + `}`})
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
}

// contractCuts checks cuts, byte for byte.
func contractCuts(t *testing.T, s Store) {
	ctx := t.Context()
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
	if _, err := s.GetCut(ctx, "nope"); !errors.Is(err, fold.ErrCutNotFound) {
		t.Fatalf("GetCut(missing): %v", err)
	}
}

// contractSessions checks sessions: put, get, list, delete.
func contractSessions(t *testing.T, s Store, created time.Time) {
	ctx := t.Context()
	rec := &fold.SessionRecord{ID: "a/b", Transport: "http", ClientInfo: json.RawMessage(`{"name":"x"}`), Created: created, LastSeen: created}
	if err := s.PutSession(ctx, rec); err != nil {
		t.Fatal(err)
	}
	if err := s.PutSession(ctx, &fold.SessionRecord{ID: "c"}); err != nil {
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
	if _, err := s.GetSession(ctx, "a/b"); !errors.Is(err, fold.ErrSessionNotFound) {
		t.Fatalf("GetSession after delete: %v", err)
	}
}

// contractBadInput checks bad input is refused, not a panic.
func contractBadInput(t *testing.T, s Store) {
	ctx := t.Context()
	if err := s.PutBranch(ctx, nil); !errors.Is(err, fold.ErrInvalidArgument) {
		t.Errorf("PutBranch(nil): %v", err)
	}
	if _, err := s.AppendCall(ctx, "b", nil); !errors.Is(err, fold.ErrInvalidArgument) {
		t.Errorf("AppendCall(nil): %v", err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := s.PutSession(cancelled, &fold.SessionRecord{ID: "z"}); !errors.Is(err, context.Canceled) {
		t.Errorf("PutSession with a cancelled context: %v", err)
	}
}

// contractConcurrent checks concurrent appends to one branch get distinct sequence numbers.
func contractConcurrent(t *testing.T, s Store) {
	ctx := t.Context()
	var wg sync.WaitGroup
	seqs := make(chan int, 40)
	for range 40 {
		wg.Go(func() {
			seq, err := s.AppendCall(ctx, "conc", &fold.CallRecord{Result: "x"})
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

// prune checks Prune on a fresh store: by age, then by size; active
// branches and the newest archives stay.
func prune(t *testing.T, s Store) {
	ctx := t.Context()
	now := time.Now()
	old := now.Add(-48 * time.Hour)
	put := func(b *fold.Branch) {
		if err := s.PutBranch(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	put(&fold.Branch{ID: "old-closed", Session: "s", Status: fold.StatusReturned, Created: old, Closed: old.Add(time.Minute)})
	put(&fold.Branch{ID: "old-active", Session: "s", Status: fold.StatusActive, Created: old})
	put(&fold.Branch{ID: "new-closed", Session: "s", Status: fold.StatusForced, Created: now, Closed: now})
	big := strings.Repeat("x", 1000)
	for i := range 3 {
		if _, err := s.AppendCall(ctx, "old-active", &fold.CallRecord{Time: old.Add(time.Duration(i) * time.Second), Result: big}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 5 {
		if _, err := s.AppendCall(ctx, "new-closed", &fold.CallRecord{Time: now.Add(time.Duration(i-10) * time.Second), Result: big}); err != nil {
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
	if _, err := s.GetBranch(ctx, "old-closed"); !errors.Is(err, fold.ErrBranchNotFound) {
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
	if seq, err := s.AppendCall(ctx, "new-closed", &fold.CallRecord{Result: "y"}); err != nil || seq != 6 {
		t.Errorf("append after prune: %d, %v", seq, err)
	}
}

// records checks fold's own records: put, read back, listed by id,
// deleted, and left by Prune.
func records(t *testing.T, s Store) {
	ctx := t.Context()
	for _, id := range []string{"c-2", "c-1", "c-3"} {
		if err := s.PutRecord(ctx, fold.KindCheckpoint, id, []byte(`{"id":"`+id+`"}`)); err != nil {
			t.Fatalf("PutRecord(%s): %v", id, err)
		}
	}
	if err := s.PutRecord(ctx, "other", "c-1", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if got, err := s.GetRecord(ctx, fold.KindCheckpoint, "c-1"); err != nil || string(got) != `{"id":"c-1"}` {
		t.Errorf("GetRecord: %q, %v", got, err)
	}
	if _, err := s.GetRecord(ctx, fold.KindCheckpoint, "c-9"); !errors.Is(err, fold.ErrRecordNotFound) {
		t.Errorf("GetRecord(missing): %v, want ErrRecordNotFound", err)
	}
	if err := s.PutRecord(ctx, "", "x", nil); err == nil {
		t.Errorf("PutRecord without a kind was accepted")
	}
	list := func() string {
		rs, err := s.Records(ctx, fold.KindCheckpoint)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, r := range rs {
			if string(r.Data) != `{"id":"`+r.ID+`"}` {
				t.Errorf("record %s holds %q", r.ID, r.Data)
			}
			ids = append(ids, r.ID)
		}
		return strings.Join(ids, ",")
	}
	if got := list(); got != "c-1,c-2,c-3" {
		t.Errorf("Records: %s, want c-1,c-2,c-3", got)
	}
	got, err := s.GetRecords(ctx, fold.KindCheckpoint, []string{"c-1", "c-9", "c-3"})
	if err != nil || len(got) != 2 || string(got["c-3"]) != `{"id":"c-3"}` {
		t.Errorf("GetRecords: %q, %v", got, err)
	}
	if err := s.DeleteRecord(ctx, fold.KindCheckpoint, "c-2"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteRecord(ctx, fold.KindCheckpoint, "c-2"); err != nil {
		t.Errorf("deleting an absent record: %v", err)
	}
	if err := s.Prune(ctx, time.Nanosecond, 1); err != nil {
		t.Fatal(err)
	}
	if got := list(); got != "c-1,c-3" {
		t.Errorf("Records after a delete and a prune: %s, want c-1,c-3", got)
	}
	if got, err := s.GetRecord(ctx, "other", "c-1"); err != nil || string(got) != "x" {
		t.Errorf("a record of another kind: %q, %v", got, err)
	}
}

// batch checks Batch: every write of one operation applied, sequence
// numbers set, and a batch with missing parts refused whole.
func batch(t *testing.T, s Store) {
	ctx := t.Context()
	if _, err := s.AppendCall(ctx, "b-1", &fold.CallRecord{Result: "first"}); err != nil {
		t.Fatal(err)
	}
	r1, r2 := &fold.CallRecord{Result: "second"}, &fold.CallRecord{Result: strings.Repeat("big ", 200)}
	err := s.Batch(ctx, &fold.Batch{
		Cuts:     []fold.BatchCut{{Handle: "b-1~01", Rest: []byte("rest")}, {Handle: "b-1~02", Rest: bytes.Repeat([]byte{0, 1, 2}, 500)}},
		Calls:    []fold.BatchCall{{Branch: "b-1", Rec: r1}, {Branch: "b-2", Rec: r2}},
		Branches: []*fold.Branch{{ID: "b-1", Session: "s", Used: 3}, {ID: "b-2", Session: "s"}},
		Records:  []fold.BatchRecord{{Kind: "af", ID: "k1", Value: []byte("v1")}, {Kind: "af", ID: "k2", Value: []byte("v2"), Keep: true}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if r1.Seq != 2 || r2.Seq != 1 {
		t.Errorf("sequence numbers: got %d, %d; want 2, 1", r1.Seq, r2.Seq)
	}
	if calls, _ := s.Calls(ctx, "b-1", 0, 0); len(calls) != 2 || calls[1].Result != "second" {
		t.Errorf("calls of b-1: %v", calls)
	}
	if calls, _ := s.Calls(ctx, "b-2", 0, 0); len(calls) != 1 || calls[0].Result != r2.Result {
		t.Errorf("calls of b-2: %d", len(calls))
	}
	if rest, err := s.GetCut(ctx, "b-1~01"); err != nil || string(rest) != "rest" {
		t.Errorf("cut: %q, %v", rest, err)
	}
	if rest, err := s.GetCut(ctx, "b-1~02"); err != nil || !bytes.Equal(rest, bytes.Repeat([]byte{0, 1, 2}, 500)) {
		t.Errorf("large cut: %d bytes, %v", len(rest), err)
	}
	if b, err := s.GetBranch(ctx, "b-1"); err != nil || b.Used != 3 {
		t.Errorf("branch b-1: %+v, %v", b, err)
	}
	if got, err := s.GetRecords(ctx, "af", []string{"k1", "k2"}); err != nil || string(got["k1"]) != "v1" || string(got["k2"]) != "v2" {
		t.Errorf("batch records: %q, %v", got, err)
	}
	for _, bad := range []*fold.Batch{
		{Branches: []*fold.Branch{nil}},
		{Cuts: []fold.BatchCut{{Rest: []byte("no handle")}}},
		{Calls: []fold.BatchCall{{Branch: "b-1"}}},
		{Records: []fold.BatchRecord{{Kind: "a/b", ID: "x"}}},
	} {
		bad.Branches = append(bad.Branches, &fold.Branch{ID: "b-bad", Session: "s"})
		if err := s.Batch(ctx, bad); !errors.Is(err, fold.ErrInvalidArgument) {
			t.Errorf("a batch with missing parts: %v, want ErrInvalidArgument", err)
		}
	}
	if _, err := s.GetBranch(ctx, "b-bad"); !errors.Is(err, fold.ErrBranchNotFound) {
		t.Errorf("a refused batch wrote its branch: %v", err)
	}
}

// reopen checks that every acknowledged write is there after a close and
// an open of the same folder, and that sequence numbers go on.
func reopen(t *testing.T, open func(t *testing.T, dir string) Store) {
	ctx := t.Context()
	dir := t.TempDir()
	s := open(t, dir)
	created := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	want := &fold.Branch{ID: "b-1", Session: "s", Parent: "root-s", Depth: 1, Status: fold.StatusActive, Budget: 100, Used: 9,
		Level: "normal", Created: created, ByTool: map[string]int{"up/x": 9}, Cuts: []string{"b-1~aa"}, CutCount: 1}
	if err := s.PutBranch(ctx, want); err != nil {
		t.Fatal(err)
	}
	large := bytes.Repeat([]byte("0123456789abcdef"), 4<<10)
	for _, r := range []string{"r1", string(large)} {
		if _, err := s.AppendCall(ctx, "b-1", &fold.CallRecord{Time: created, Result: r}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.PutCut(ctx, "b-1~aa", large); err != nil {
		t.Fatal(err)
	}
	if err := s.PutSession(ctx, &fold.SessionRecord{ID: "s", Transport: "http", Created: created, LastSeen: created}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutRecord(ctx, fold.KindCheckpoint, "c-1", []byte("cp")); err != nil {
		t.Fatal(err)
	}
	rec := &fold.CallRecord{Result: "batched"}
	if err := s.Batch(ctx, &fold.Batch{
		Cuts:    []fold.BatchCut{{Handle: "b-2~01", Rest: []byte("rest")}},
		Calls:   []fold.BatchCall{{Branch: "b-2", Rec: rec}},
		Records: []fold.BatchRecord{{Kind: "af", ID: "k", Value: []byte("v"), Keep: true}},
		Branches: []*fold.Branch{{ID: "b-2", Session: "s", Parent: "b-1", Depth: 2, Status: fold.StatusReturned,
			Created: created, Closed: created.Add(time.Minute), Message: "done"}},
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = open(t, dir)
	defer s.Close()
	if got, err := s.GetBranch(ctx, "b-1"); err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("branch after reopen: %+v, %v; want %+v", got, err, want)
	}
	if b, err := s.GetBranch(ctx, "b-2"); err != nil || b.Message != "done" || b.Status != fold.StatusReturned {
		t.Errorf("batched branch after reopen: %+v, %v", b, err)
	}
	calls, err := s.Calls(ctx, "b-1", 0, 0)
	if err != nil || len(calls) != 2 || calls[0].Result != "r1" || calls[1].Result != string(large) {
		t.Errorf("calls after reopen: %d, %v", len(calls), err)
	}
	if got, err := s.GetCut(ctx, "b-1~aa"); err != nil || !bytes.Equal(got, large) {
		t.Errorf("cut after reopen: %d bytes, %v", len(got), err)
	}
	if got, err := s.GetCut(ctx, "b-2~01"); err != nil || string(got) != "rest" {
		t.Errorf("batched cut after reopen: %q, %v", got, err)
	}
	if rec, err := s.GetSession(ctx, "s"); err != nil || rec.Transport != "http" {
		t.Errorf("session after reopen: %+v, %v", rec, err)
	}
	if got, err := s.GetRecord(ctx, fold.KindCheckpoint, "c-1"); err != nil || string(got) != "cp" {
		t.Errorf("record after reopen: %q, %v", got, err)
	}
	if got, err := s.GetRecords(ctx, "af", []string{"k"}); err != nil || string(got["k"]) != "v" {
		t.Errorf("batched record after reopen: %q, %v", got, err)
	}
	if seq, err := s.AppendCall(ctx, "b-1", &fold.CallRecord{Result: "r3"}); err != nil || seq != 3 {
		t.Errorf("append after reopen: seq %d, %v; want 3", seq, err)
	}
	if seq, err := s.AppendCall(ctx, "b-2", &fold.CallRecord{Result: "r2"}); err != nil || seq != 2 {
		t.Errorf("append to the batched branch after reopen: seq %d, %v; want 2", seq, err)
	}
}
