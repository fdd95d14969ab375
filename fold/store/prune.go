package store

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	badger "github.com/dgraph-io/badger/v4"
)

// Prune removes archived calls and cut remainders older than maxAge, closed
// branch records closed before then, and then the oldest archives until
// their total size is at most maxBytes. A maxAge or maxBytes of zero or less
// disables that rule. Active branches are never removed. Space is given back
// to the file system by Badger's value log garbage collection afterwards.
// It reads the time index both in groups and under entries' own keys
// (timeindex.go).
//
// In steps: read the archive index and the old closed branches
// (readPruneIndex), choose what goes (choose), write the deletes through
// the write-ahead log (pruneOps), remove the archive segments nothing
// points into any more, and collect Badger's value log (collectValueLog).
func (s *BadgerStore) Prune(ctx context.Context, maxAge time.Duration, maxBytes int64) error {
	if s.readOnly {
		return fmt.Errorf("fold: prune: the store was opened read-only")
	}
	cutoff := time.Now().Add(-maxAge)
	// Taken before the index is read: every reference into a segment below
	// it is written (in the write-ahead log), so the index read next, which
	// first commits what is pending, sees it.
	floor := s.arch.floor()
	x, err := s.readPruneIndex(ctx, maxAge, cutoff)
	if err != nil {
		return fmt.Errorf("fold: prune: %w", err)
	}
	drop, live := x.choose(maxAge, cutoff, maxBytes)
	if len(drop) == 0 && len(x.oldBranches) == 0 {
		return s.arch.removeUnreferenced(floor, live)
	}
	// Through the write-ahead log like every write, so that a record
	// written before this (still in the log at a crash) cannot be
	// replayed over the deletes.
	if err := s.write(ctx, "prune", s.pruneOps(x, drop)...); err != nil {
		return err
	}
	if err := s.arch.removeUnreferenced(floor, live); err != nil {
		return fmt.Errorf("fold: prune: remove archive segments: %w", err)
	}
	if err := s.barrier(); err != nil { // the deletes, in Badger for its garbage collection
		return fmt.Errorf("fold: prune: %w", err)
	}
	s.collectValueLog(ctx)
	return nil
}

// pruneEntry is one entry of the archive's time index.
type pruneEntry struct {
	tkey, key []byte
	t         int64
	size      int64
	seg       uint32 // archive segment of its bytes, 0 when inline
	direct    bool   // under its own key (a store written before the index was grouped)
}

// pruneGroup is one group of the time index, as read.
type pruneGroup struct {
	key   []byte
	pairs [][2][]byte
}

// pruneIndex is what Prune reads: every entry of the time index once,
// the groups that hold them, and the closed branches older than the cutoff.
type pruneIndex struct {
	all         []pruneEntry
	total       int64
	seen        map[string]int
	groups      []pruneGroup
	oldBranches []*Branch
}

// add records the index entry k → v, once however many places hold it.
func (x *pruneIndex) add(k, v []byte, direct bool) error {
	if i, ok := x.seen[string(k)]; ok {
		x.all[i].direct = x.all[i].direct || direct
		return nil
	}
	// t/<20 digits>/<key>
	if len(k) < 2+20+1 {
		return fmt.Errorf("fold: bad archive index key %q", k)
	}
	ns, err := strconv.ParseInt(string(k[2:22]), 10, 64)
	if err != nil {
		return fmt.Errorf("fold: bad archive index key %q: %w", k, err)
	}
	sz, segText, inFile := strings.Cut(string(v), "@")
	size, err := strconv.ParseInt(sz, 10, 64)
	if err != nil {
		return fmt.Errorf("fold: bad archive index value for %q: %w", k, err)
	}
	var seg uint64
	if inFile {
		if seg, err = strconv.ParseUint(segText, 10, 32); err != nil || seg == 0 {
			return fmt.Errorf("fold: bad archive segment in the index value for %q: %q", k, v)
		}
	}
	x.seen[string(k)] = len(x.all)
	x.all = append(x.all, pruneEntry{tkey: k, key: k[23:], t: ns, size: size, seg: uint32(seg), direct: direct})
	x.total += size
	return nil
}

// readPruneIndex reads the time index, under entries' own keys and in
// groups, and, when maxAge is set, the closed branches closed before
// cutoff.
func (s *BadgerStore) readPruneIndex(ctx context.Context, maxAge time.Duration, cutoff time.Time) (*pruneIndex, error) {
	x := &pruneIndex{seen: map[string]int{}}
	err := s.view(ctx, func(txn *badger.Txn) error {
		err := scan(txn, []byte("t/"), true, func(k, v []byte) error { return x.add(k, v, true) })
		if err != nil {
			return err
		}
		err = scan(txn, timeGroupPrefix, true, func(k, v []byte) error {
			pairs, err := decodeTimeGroup(v)
			if err != nil {
				return fmt.Errorf("fold: bad archive index group %q: %w", k, err)
			}
			x.groups = append(x.groups, pruneGroup{key: k, pairs: pairs})
			for _, p := range pairs {
				if err := x.add(p[0], p[1], false); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil || maxAge <= 0 {
			return err
		}
		return scan(txn, []byte("b/"), true, func(_ []byte, v []byte) error {
			b, err := decodeBranch(v)
			if err != nil {
				return err
			}
			if b.Status != StatusActive && !b.Closed.IsZero() && b.Closed.Before(cutoff) {
				x.oldBranches = append(x.oldBranches, b)
			}
			return nil
		})
	})
	return x, err
}

// choose returns the entries to drop, oldest first: those older than
// cutoff (when maxAge is set), then the oldest until the total is at most
// maxBytes (when set); and the archive segments the entries kept point
// into.
func (x *pruneIndex) choose(maxAge time.Duration, cutoff time.Time, maxBytes int64) (drop []pruneEntry, live map[uint32]bool) {
	all, total := x.all, x.total
	// Oldest first (the groups are not in time order among themselves or
	// with the entries under their own keys).
	slices.SortFunc(all, func(a, b pruneEntry) int {
		if c := cmp.Compare(a.t, b.t); c != 0 {
			return c
		}
		return bytes.Compare(a.tkey, b.tkey)
	})
	i := 0
	if maxAge > 0 {
		for ; i < len(all) && all[i].t < cutoff.UnixNano(); i++ {
			drop = append(drop, all[i])
			total -= all[i].size
		}
	}
	if maxBytes > 0 {
		for ; i < len(all) && total > maxBytes; i++ {
			drop = append(drop, all[i])
			total -= all[i].size
		}
	}
	live = map[uint32]bool{}
	for _, e := range all[i:] {
		if e.seg != 0 {
			live[e.seg] = true
		}
	}
	return drop, live
}

// pruneOps returns the deletes of the dropped entries and of the old
// branches, and forgets the old branches' sequence numbers and index
// marks.
func (s *BadgerStore) pruneOps(x *pruneIndex, drop []pruneEntry) []walOp {
	ops := make([]walOp, 0, 2*(len(drop)+len(x.oldBranches)))
	dropped := make(map[string]bool, len(drop))
	for _, e := range drop {
		if e.direct {
			ops = append(ops, del(e.tkey))
		}
		dropped[string(e.tkey)] = true
		ops = append(ops, del(e.key))
	}
	// A group loses its dropped entries: written again with the rest, or
	// deleted once none is left.
	for _, g := range x.groups {
		keep := slices.DeleteFunc(slices.Clone(g.pairs), func(p [2][]byte) bool { return dropped[string(p[0])] })
		switch {
		case len(keep) == len(g.pairs):
		case len(keep) == 0:
			ops = append(ops, del(g.key))
		default:
			ops = append(ops, set(g.key, encodeTimeGroup(keep)))
		}
	}
	s.mu.Lock()
	for _, b := range x.oldBranches {
		delete(s.seq, b.ID)
		delete(s.indexed, b.ID)
		ops = append(ops, del(branchKey(b.ID)), del(sessionIndexKey(b.Session, b.ID)))
	}
	s.mu.Unlock()
	return ops
}

// collectValueLog runs Badger's value log garbage collection until it has
// nothing more worth collecting, the disk is too full for the rewrite, or
// ctx ends.
func (s *BadgerStore) collectValueLog(ctx context.Context) {
	for ctx.Err() == nil {
		// Garbage collection rewrites the live part of a value log file.
		if s.free.checkNow(valueLogFileSize) != nil {
			break
		}
		if err := s.db.RunValueLogGC(0.5); err != nil {
			break // ErrNoRewrite: nothing more worth collecting
		}
	}
}
