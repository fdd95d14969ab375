package store

import (
	"errors"
	"testing"
	"time"

	"github.com/foldproxy/foldproxy/fold/memory"
	membadger "github.com/foldproxy/foldproxy/fold/memory/badger"
)

// TestMemoryWritesThroughLog: the embedded memory backend over the state
// store's write-ahead log (membadger.OpenWith with WriteKeys, as serve
// wires it): a change is durable when the write returns, as a Badger
// commit was, and an open after a kill -9 that came before the committer
// replays it, sets and deletes in order, before the memories are loaded.
func TestMemoryWritesThroughLog(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	s := openWALStore(t, dir, nil)
	release := s.holdCommitter()
	defer release()
	st, err := membadger.OpenWith(ctx, s.DB(), s.WriteKeys)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	mem := func(id, title string) *memory.Memory {
		return &memory.Memory{ID: id, Project: "p", Kind: memory.KindLesson, Title: title, Content: "use the fixture",
			Confidence: 0.8, Created: t0, Updated: t0}
	}
	m1 := mem("m1", "pytest fixtures")
	if err := st.PutAll(ctx, []*memory.Memory{m1, mem("m2", "gone")}); err != nil {
		t.Fatal(err)
	}
	m1.Injected, m1.Successes, m1.Confidence = 3, 1, 0.85 // MarkUsed and Outcome
	if err := st.Put(ctx, m1); err != nil {
		t.Fatal(err)
	}
	if err := st.Delete(ctx, "m2"); err != nil {
		t.Fatal(err)
	}
	s.crashForTest(t)
	if inBadger(t, dir, []byte("mem/m1")) || inBadger(t, dir, []byte("mem/m2")) {
		t.Fatal("the memories are in Badger already: the test did not crash before the commit")
	}

	s2 := openWALStore(t, dir, nil)
	defer s2.Close()
	st2, err := membadger.Open(ctx, s2.DB())
	if err != nil {
		t.Fatal(err)
	}
	got, err := st2.Get(ctx, "m1")
	if err != nil || got.Injected != 3 || got.Successes != 1 || got.Confidence != 0.85 || got.Title != "pytest fixtures" {
		t.Fatalf("m1 after the restart: %+v, %v", got, err)
	}
	if _, err := st2.Get(ctx, "m2"); !errors.Is(err, memory.ErrNotFound) {
		t.Errorf("m2, deleted before the crash, after the restart: %v", err)
	}
}
