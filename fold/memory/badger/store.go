// Package badger is the embedded memory backend: memories live in the
// project's Badger state store (keys "mem/<id>"), and an inverted index of
// their lexical sparse vectors, rebuilt in memory when the store opens,
// answers searches without scanning every memory.
//
// Why not a library: the index has to rank exactly as Qdrant's sparse
// vectors with the IDF modifier do (so that both backends agree), keep its
// data in the Badger store foldproxy already has, and stay small. Bleve,
// the one well-kept Go full-text library, brings its own storage engine and
// its own scoring; the inverted index here is about a hundred lines.
package badger

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"sync"

	badgerdb "github.com/dgraph-io/badger/v4"

	"github.com/foldproxy/foldproxy/fold/memory"
)

var (
	_ memory.Store      = (*Store)(nil)
	_ memory.BatchStore = (*Store)(nil)
	_ memory.EmptyStore = (*Store)(nil)
	_ memory.TermStats  = (*Store)(nil)
)

const prefix = "mem/"

func key(id string) []byte { return []byte(prefix + url.PathEscape(id)) }

// record is a memory as stored: the memory and its dense vector, which
// memory.Memory keeps out of its JSON.
type record struct {
	*memory.Memory
	DenseVec []float32 `json:"dense,omitempty"`
}

// Store keeps memories in a Badger database it does not own.
type Store struct {
	db    *badgerdb.DB
	write Write // how a change is made durable

	mu       sync.RWMutex
	docs     map[string]*doc   // by memory id
	projects map[string]*index // by project
}

// doc is one indexed memory.
type doc struct {
	m      *memory.Memory
	sparse memory.Sparse
	slot   uint32
}

type posting struct {
	slot uint32
	w    float32
}

// index is the inverted index of one project.
type index struct {
	postings map[uint32][]posting // by term id; one posting per memory holding the term
	slots    []*doc               // by slot; nil when free
	free     []uint32
	n        int // live memories
}

// Write makes changes to the database durable for the store, in place of
// a Badger transaction: the sets (key, value), then the deletes, all or
// nothing, in the order of the calls. The proxy passes its state store's
// store.BadgerStore.WriteKeys: a record of its write-ahead log, in the
// operating system (on disk with fold.fsync) when it returns and replayed
// by the next open, instead of a commit that waits for Badger's writer
// goroutine on the reply path of every branch_create that injects
// memories and every return of such a branch. The database must show
// every change written once it is opened again (the store reads it only
// in Open).
type Write func(ctx context.Context, sets [][2][]byte, dels [][]byte) error

// txnWrite is the Write of a store opened without one: the changes in
// one Badger transaction.
func txnWrite(db *badgerdb.DB) Write {
	return func(_ context.Context, sets [][2][]byte, dels [][]byte) error {
		return db.Update(func(txn *badgerdb.Txn) error {
			for _, kv := range sets {
				if err := txn.Set(kv[0], kv[1]); err != nil {
					return err
				}
			}
			for _, k := range dels {
				if err := txn.Delete(k); err != nil {
					return err
				}
			}
			return nil
		})
	}
}

// Open loads every memory from db and indexes it. Close does not close db.
func Open(ctx context.Context, db *badgerdb.DB) (*Store, error) {
	return OpenWith(ctx, db, nil)
}

// OpenWith is Open with the store's changes made durable by write (a
// Badger transaction each when nil).
func OpenWith(ctx context.Context, db *badgerdb.DB, write Write) (*Store, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: memory/badger: the database is nil", memory.ErrInvalid)
	}
	if write == nil {
		write = txnWrite(db)
	}
	s := &Store{db: db, write: write, docs: map[string]*doc{}, projects: map[string]*index{}}
	err := db.View(func(txn *badgerdb.Txn) error {
		o := badgerdb.DefaultIteratorOptions
		o.Prefix = []byte(prefix)
		it := txn.NewIterator(o)
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			if err := ctx.Err(); err != nil {
				return err
			}
			var r record
			err := it.Item().Value(func(v []byte) error { return json.Unmarshal(v, &r) })
			if err != nil || r.Memory == nil {
				return fmt.Errorf("memory/badger: decode %q: %v", it.Item().Key(), err)
			}
			r.Memory.Dense = r.DenseVec
			s.indexLocked(r.Memory)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("memory/badger: load: %w", err)
	}
	return s, nil
}

func (s *Store) project(p string) *index {
	ix := s.projects[p]
	if ix == nil {
		ix = &index{postings: map[uint32][]posting{}}
		s.projects[p] = ix
	}
	return ix
}

// indexLocked adds or replaces m in the index; the caller holds mu.
func (s *Store) indexLocked(m *memory.Memory) {
	if old := s.docs[m.ID]; old != nil {
		if old.m.Project == m.Project && old.m.Text() == m.Text() {
			old.m = m // only counters or confidence changed
			return
		}
		s.unindexLocked(old)
	}
	ix := s.project(m.Project)
	d := &doc{m: m, sparse: memory.DocVector(m.Text())}
	if n := len(ix.free); n > 0 {
		d.slot = ix.free[n-1]
		ix.free = ix.free[:n-1]
		ix.slots[d.slot] = d
	} else {
		d.slot = uint32(len(ix.slots))
		ix.slots = append(ix.slots, d)
	}
	for i, t := range d.sparse.Indices {
		ix.postings[t] = append(ix.postings[t], posting{d.slot, d.sparse.Values[i]})
	}
	ix.n++
	s.docs[m.ID] = d
}

func (s *Store) unindexLocked(d *doc) {
	ix := s.projects[d.m.Project]
	for _, t := range d.sparse.Indices {
		ps := ix.postings[t]
		if i := slices.IndexFunc(ps, func(p posting) bool { return p.slot == d.slot }); i >= 0 {
			ps[i] = ps[len(ps)-1]
			ps = ps[:len(ps)-1]
		}
		if len(ps) == 0 {
			delete(ix.postings, t)
		} else {
			ix.postings[t] = ps
		}
	}
	ix.slots[d.slot] = nil
	ix.free = append(ix.free, d.slot)
	ix.n--
	delete(s.docs, d.m.ID)
}

// Put implements memory.Store: PutAll of one memory.
func (s *Store) Put(ctx context.Context, m *memory.Memory) error {
	return s.PutAll(ctx, []*memory.Memory{m})
}

// PutAll implements memory.BatchStore: one write for all of ms (a Badger
// commit each, with fold.fsync a disk flush each, was most of a
// branch_create's time when it injected memories).
func (s *Store) PutAll(ctx context.Context, ms []*memory.Memory) error {
	kept := make([]*memory.Memory, 0, len(ms))
	sets := make([][2][]byte, 0, len(ms))
	for _, m := range ms {
		if m == nil || m.ID == "" {
			return fmt.Errorf("%w: memory/badger: a memory needs an id", memory.ErrInvalid)
		}
		m = m.Clone()
		v, err := json.Marshal(record{Memory: m, DenseVec: m.Dense})
		if err != nil {
			return fmt.Errorf("memory/badger: encode %s: %w", m.ID, err)
		}
		kept = append(kept, m)
		sets = append(sets, [2][]byte{key(m.ID), v})
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.write(ctx, sets, nil); err != nil {
		if len(kept) == 1 {
			return fmt.Errorf("memory/badger: put %s: %w", kept[0].ID, err)
		}
		return fmt.Errorf("memory/badger: put %d memories: %w", len(kept), err)
	}
	for _, m := range kept {
		s.indexLocked(m)
	}
	return nil
}

// Get implements memory.Store.
func (s *Store) Get(_ context.Context, id string) (*memory.Memory, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	d := s.docs[id]
	if d == nil {
		return nil, fmt.Errorf("%w: %s", memory.ErrNotFound, id)
	}
	return d.m.Clone(), nil
}

// Delete implements memory.Store.
func (s *Store) Delete(ctx context.Context, id string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.docs[id]
	if d == nil {
		return fmt.Errorf("%w: %s", memory.ErrNotFound, id)
	}
	if err := s.write(ctx, nil, [][]byte{key(id)}); err != nil {
		return fmt.Errorf("memory/badger: delete %s: %w", id, err)
	}
	s.unindexLocked(d)
	return nil
}

// List implements memory.Store.
func (s *Store) List(_ context.Context, project string, all bool) ([]*memory.Memory, error) {
	s.mu.RLock()
	out := make([]*memory.Memory, 0, len(s.docs))
	for _, d := range s.docs {
		if all || d.m.Project == project {
			out = append(out, d.m.Clone())
		}
	}
	s.mu.RUnlock()
	slices.SortFunc(out, func(a, b *memory.Memory) int {
		return cmp.Or(a.Created.Compare(b.Created), cmp.Compare(a.ID, b.ID))
	})
	return out, nil
}

// Count implements memory.Store.
func (s *Store) Count(_ context.Context, project string) (int, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if ix := s.projects[project]; ix != nil {
		return ix.n, nil
	}
	return 0, nil
}

// Empty implements memory.EmptyStore.
func (s *Store) Empty(project string) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	ix := s.projects[project]
	return ix == nil || ix.n == 0
}

// DocFreq implements memory.TermStats from the index's postings.
func (s *Store) DocFreq(project string, terms []uint32) (int, []int) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	df := make([]int, len(terms))
	ix := s.projects[project]
	if ix == nil {
		return 0, df
	}
	for i, t := range terms {
		df[i] = len(ix.postings[t])
	}
	return ix.n, df
}

// Search implements memory.Store: the memories sharing a term with the
// query are scored from the postings of the query's terms alone.
func (s *Store) Search(ctx context.Context, q memory.Query) ([]memory.Hit, error) {
	if q.Limit <= 0 {
		return nil, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	ix := s.projects[q.Project]
	if ix == nil || ix.n == 0 {
		return nil, nil
	}
	scores := make([]float32, len(ix.slots))
	var touched []uint32
	for i, t := range q.Sparse.Indices {
		ps := ix.postings[t]
		if len(ps) == 0 {
			continue
		}
		w := float32(memory.IDF(ix.n, len(ps))) * q.Sparse.Values[i]
		for _, p := range ps {
			if scores[p.slot] == 0 {
				touched = append(touched, p.slot)
			}
			scores[p.slot] += w * p.w
		}
	}
	top := memory.NewTopK(q)
	for _, slot := range touched {
		if d := ix.slots[slot]; memory.Admit(d.m, q) {
			top.Offer(memory.Hit{Memory: d.m, Score: float64(scores[slot])})
		}
	}
	hits := memory.Rank(top.Hits(), q)
	for i := range hits {
		hits[i].Memory = hits[i].Memory.Clone()
	}
	return hits, nil
}

// Close implements memory.Store; the database stays open.
func (s *Store) Close() error { return nil }
