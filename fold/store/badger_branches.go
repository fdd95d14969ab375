package store

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	badger "github.com/dgraph-io/badger/v4"
)

func esc(s string) string { return url.PathEscape(s) }

func branchKey(id string) []byte { return []byte("b/" + esc(id)) }
func sessionIndexKey(session, id string) []byte {
	return []byte("s/" + esc(session) + "/" + esc(id))
}
func callPrefix(branch string) []byte { return []byte("c/" + esc(branch) + "/") }
func callKey(branch string, seq int) []byte {
	e := esc(branch)
	return append20(append(append(append(make([]byte, 0, len(e)+23), "c/"...), e...), '/'), int64(seq))
}
func cutKey(handle string) []byte    { return []byte("x/" + esc(handle)) }
func cutRefKey(handle string) []byte { return []byte("xr/" + esc(handle)) }
func sessionKey(id string) []byte    { return []byte("sess/" + esc(id)) }
func recordKey(kind, id string) []byte {
	return []byte("r/" + esc(kind) + "/" + esc(id))
}
func timeKey(t time.Time, key []byte) []byte {
	k := append20(append(make([]byte, 0, 23+len(key)), "t/"...), max(t.UnixNano(), 0))
	return append(append(k, '/'), key...)
}

// append20 appends n in 20 digits, zero-padded (fmt's %020d).
func append20(b []byte, n int64) []byte {
	if n < 0 {
		return fmt.Appendf(b, "%020d", n)
	}
	var d [20]byte
	for i := len(d) - 1; i >= 0; i-- {
		d[i] = byte('0' + n%10)
		n /= 10
	}
	return append(b, d[:]...)
}

// PutBranch stores b, replacing any earlier version, and indexes it under
// its session.
func (s *BadgerStore) PutBranch(ctx context.Context, b *Branch) error {
	if b == nil || b.ID == "" {
		return fmt.Errorf("%w: fold: PutBranch needs a branch with an id", ErrInvalidArgument)
	}
	data, err := marshalBranch(b)
	if err != nil {
		return fmt.Errorf("fold: encode branch %s: %w", b.ID, err)
	}
	ops := s.indexBranch([]walOp{set(branchKey(b.ID), data)}, b)
	if err := s.write(ctx, "put branch "+b.ID, ops...); err != nil {
		return err
	}
	s.markIndexed(b)
	return nil
}

// indexBranch appends to ops the set of b's session index key, unless
// this process has written it already.
func (s *BadgerStore) indexBranch(ops []walOp, b *Branch) []walOp {
	s.mu.Lock()
	done := s.indexed[b.ID]
	s.mu.Unlock()
	if done {
		return ops
	}
	return append(ops, set(sessionIndexKey(b.Session, b.ID), nil))
}

// markIndexed records that the session index keys of bs are written.
func (s *BadgerStore) markIndexed(bs ...*Branch) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, b := range bs {
		s.indexed[b.ID] = true
	}
}

// GetBranch returns the branch id, or an error wrapping ErrBranchNotFound.
func (s *BadgerStore) GetBranch(ctx context.Context, id string) (*Branch, error) {
	var b *Branch
	err := s.view(ctx, func(txn *badger.Txn) error {
		var err error
		b, err = getBranch(txn, id)
		return err
	})
	if err != nil {
		return nil, err
	}
	return b, nil
}

func getBranch(txn *badger.Txn, id string) (*Branch, error) {
	item, err := txn.Get(branchKey(id))
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil, fmt.Errorf("%w: branch %q is not in the store", ErrBranchNotFound, id)
	}
	if err != nil {
		return nil, fmt.Errorf("fold: read branch %s: %w", id, err)
	}
	var b *Branch
	err = item.Value(func(v []byte) error {
		var err error
		b, err = decodeBranch(v)
		return err
	})
	return b, err
}

// Branches lists the branches of session, or of every session when session
// is "", in creation order.
func (s *BadgerStore) Branches(ctx context.Context, session string) ([]*Branch, error) {
	var out []*Branch
	err := s.view(ctx, func(txn *badger.Txn) error {
		if session == "" {
			return scan(txn, []byte("b/"), true, func(_ []byte, v []byte) error {
				b, err := decodeBranch(v)
				if err != nil {
					return err
				}
				out = append(out, b)
				return nil
			})
		}
		prefix := []byte("s/" + esc(session) + "/")
		var ids []string
		err := scan(txn, prefix, false, func(k, _ []byte) error {
			id, err := url.PathUnescape(string(k[len(prefix):]))
			if err != nil {
				return fmt.Errorf("fold: bad index key %q: %w", k, err)
			}
			ids = append(ids, id)
			return nil
		})
		if err != nil {
			return err
		}
		for _, id := range ids {
			b, err := getBranch(txn, id)
			if errors.Is(err, ErrBranchNotFound) {
				continue // pruned after the index was read
			}
			if err != nil {
				return err
			}
			out = append(out, b)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	sortBranches(out)
	return out, nil
}

// scan calls fn for each key under prefix, in key order, with its value
// when values is set.
func scan(txn *badger.Txn, prefix []byte, values bool, fn func(k, v []byte) error) error {
	o := badger.DefaultIteratorOptions
	o.Prefix = prefix
	o.PrefetchValues = values
	o.PrefetchSize = 16
	it := txn.NewIterator(o)
	defer it.Close()
	for it.Seek(prefix); it.ValidForPrefix(prefix); it.Next() {
		item := it.Item()
		k := item.KeyCopy(nil)
		var v []byte
		if values {
			var err error
			if v, err = item.ValueCopy(nil); err != nil {
				return err
			}
		}
		if err := fn(k, v); err != nil {
			return err
		}
	}
	return nil
}
