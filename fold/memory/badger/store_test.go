package badger

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	badgerdb "github.com/dgraph-io/badger/v4"

	"github.com/foldproxy/foldproxy/fold/memory"
	"github.com/foldproxy/foldproxy/fold/memory/storetest"
)

func openDB(t testing.TB, dir string) *badgerdb.DB {
	t.Helper()
	return openDBSync(t, dir, false)
}

// reopen opens the database in dir again (closed at the test's end) and
// a store on it.
func reopen(t testing.TB, dir string) *Store {
	t.Helper()
	db := openDB(t, dir)
	t.Cleanup(func() { db.Close() })
	s, err := Open(t.Context(), db)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// openDBSync is openDB with Badger's SyncWrites (fold.fsync) set to sync.
func openDBSync(t testing.TB, dir string, sync bool) *badgerdb.DB {
	t.Helper()
	o := badgerdb.DefaultOptions(dir).WithLogger(nil).WithMemTableSize(4 << 20).WithNumMemtables(1).WithBlockCacheSize(1 << 20).WithValueThreshold(64 << 10).
		WithSyncWrites(sync)
	if dir == "" {
		o = o.WithInMemory(true)
	}
	db, err := badgerdb.Open(o)
	if err != nil {
		t.Fatal(err)
	}
	return db
}

func TestSuite(t *testing.T) {
	storetest.Run(t, func(t *testing.T) memory.Store {
		db := openDB(t, "")
		t.Cleanup(func() { db.Close() })
		s, err := Open(t.Context(), db)
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// TestReopen: memories and their index survive closing and reopening the
// database.
func TestReopen(t *testing.T) {
	dir := t.TempDir()
	db := openDB(t, dir)
	s, err := Open(t.Context(), db)
	if err != nil {
		t.Fatal(err)
	}
	m := storetest.Mem("m1", "p", "Sphinx autodoc", "autodoc_mock_imports avoids import errors", 0.9)
	m.Dense = []float32{1, 0, 0.5}
	if err := s.Put(t.Context(), m); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(t.Context(), storetest.Mem("m2", "p", "gone", "deleted memory", 0.9)); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(t.Context(), "m2"); err != nil {
		t.Fatal(err)
	}
	db.Close()
	s = reopen(t, dir)
	hits, err := s.Search(t.Context(), memory.Query{Sparse: memory.QueryVector("autodoc import errors"), Project: "p", Limit: 3})
	if err != nil || len(hits) != 1 || hits[0].Memory.ID != "m1" || !slices.Equal(hits[0].Memory.Dense, m.Dense) {
		t.Fatalf("after reopen: %v %v", hits, err)
	}
	if n, _ := s.Count(t.Context(), "p"); n != 1 {
		t.Fatalf("Count after reopen = %d, want 1", n)
	}
}

// TestSuiteWrite: the store's contract holds with its changes made durable
// by a Write (here one that applies them in a Badger transaction, as the
// state store's committer does).
func TestSuiteWrite(t *testing.T) {
	storetest.Run(t, func(t *testing.T) memory.Store {
		db := openDB(t, "")
		t.Cleanup(func() { db.Close() })
		s, err := OpenWith(t.Context(), db, txnWrite(db))
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// TestOpenWith: with a Write, every change goes through it and none to the
// database directly; a change it fails is not made (the index is left as
// it was) and its error is returned; and what it wrote is there when the
// database is opened again.
func TestOpenWith(t *testing.T) {
	dir := t.TempDir()
	db := openDB(t, dir)
	var calls [][2]int // sets, deletes of each call
	var fail error
	apply := txnWrite(db)
	write := func(ctx context.Context, sets [][2][]byte, dels [][]byte) error {
		calls = append(calls, [2]int{len(sets), len(dels)})
		for _, kv := range sets {
			if !strings.HasPrefix(string(kv[0]), prefix) {
				t.Errorf("a set of %q, outside %q", kv[0], prefix)
			}
		}
		if fail != nil {
			return fail
		}
		return apply(ctx, sets, dels)
	}
	s, err := OpenWith(t.Context(), db, write)
	if err != nil {
		t.Fatal(err)
	}
	m1 := storetest.Mem("m1", "p", "Sphinx autodoc", "autodoc_mock_imports avoids import errors", 0.9)
	m2 := storetest.Mem("m2", "p", "pytest fixtures", "use tmp_path rather than tmpdir", 0.8)
	if err := s.PutAll(t.Context(), []*memory.Memory{m1, m2}); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(t.Context(), "m2"); err != nil {
		t.Fatal(err)
	}
	if want := [][2]int{{2, 0}, {0, 1}}; !slices.Equal(calls, want) {
		t.Fatalf("writes %v, want %v (one for the PutAll, one for the Delete)", calls, want)
	}

	fail = errors.New("disk on fire")
	m3 := storetest.Mem("m3", "p", "new", "never stored", 0.8)
	if err := s.Put(t.Context(), m3); !errors.Is(err, fail) {
		t.Errorf("Put with a failing write: %v, want its error", err)
	}
	if err := s.Delete(t.Context(), "m1"); !errors.Is(err, fail) {
		t.Errorf("Delete with a failing write: %v, want its error", err)
	}
	if _, err := s.Get(t.Context(), "m3"); !errors.Is(err, memory.ErrNotFound) {
		t.Errorf("a memory whose write failed is in the index: %v", err)
	}
	if _, err := s.Get(t.Context(), "m1"); err != nil {
		t.Errorf("a memory whose delete failed left the index: %v", err)
	}

	db.Close()
	s = reopen(t, dir)
	all, _ := s.List(t.Context(), "p", true)
	if len(all) != 1 || all[0].ID != "m1" {
		t.Fatalf("after reopening: %v, want m1 alone", all)
	}
}
