package badger

import (
	"slices"
	"testing"

	badgerdb "github.com/dgraph-io/badger/v4"

	"github.com/foldproxy/foldproxy/fold/memory"
	"github.com/foldproxy/foldproxy/fold/memory/storetest"
)

func openDB(t testing.TB, dir string) *badgerdb.DB {
	t.Helper()
	return openDBSync(t, dir, false)
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
	db = openDB(t, dir)
	defer db.Close()
	s, err = Open(t.Context(), db)
	if err != nil {
		t.Fatal(err)
	}
	hits, err := s.Search(t.Context(), memory.Query{Sparse: memory.QueryVector("autodoc import errors"), Project: "p", Limit: 3})
	if err != nil || len(hits) != 1 || hits[0].Memory.ID != "m1" || !slices.Equal(hits[0].Memory.Dense, m.Dense) {
		t.Fatalf("after reopen: %v %v", hits, err)
	}
	if n, _ := s.Count(t.Context(), "p"); n != 1 {
		t.Fatalf("Count after reopen = %d, want 1", n)
	}
}
