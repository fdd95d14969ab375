package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"
	"unsafe"

	badger "github.com/dgraph-io/badger/v4"
)

// nextSeq reserves the next call sequence number of branch.
func (s *BadgerStore) nextSeq(ctx context.Context, branch string) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	last, ok := s.seq[branch]
	if !ok {
		var err error
		if last, err = s.lastSeq(ctx, branch); err != nil {
			return 0, err
		}
	}
	s.seq[branch] = last + 1
	return last + 1, nil
}

// lastSeq finds the highest call sequence number of branch in the store,
// 0 when it has none. Unlike a read, it does not commit the pending writes
// first (the first call of a branch would wait for a Badger commit): it
// looks at the write-ahead log's pending records, then at Badger. A record
// that leaves the pending list has been committed by then, so the read of
// Badger that follows sees it. Counting a call that a pending delete
// removes only skips a number.
func (s *BadgerStore) lastSeq(ctx context.Context, branch string) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	prefix := callPrefix(branch)
	seqOf := func(k []byte) (int, error) {
		n, err := strconv.Atoi(string(k[len(prefix):]))
		if err != nil {
			return 0, fmt.Errorf("fold: bad call key %q: %w", k, err)
		}
		return n, nil
	}
	last := 0
	if w := s.wal; w != nil {
		w.mu.Lock()
		recs := w.pending // appends never write over this slice's elements
		w.mu.Unlock()
		for _, r := range recs {
			for _, op := range r.ops {
				if op.del || !bytes.HasPrefix(op.k, prefix) {
					continue
				}
				n, err := seqOf(op.k)
				if err != nil {
					return 0, err
				}
				last = max(last, n)
			}
		}
	}
	err := s.db.View(func(txn *badger.Txn) error {
		o := badger.DefaultIteratorOptions
		o.Reverse = true
		o.PrefetchValues = false
		o.Prefix = prefix
		it := txn.NewIterator(o)
		defer it.Close()
		it.Seek(append(bytes.Clone(prefix), 0xff))
		if !it.ValidForPrefix(prefix) {
			return nil
		}
		n, err := seqOf(it.Item().Key())
		last = max(last, n)
		return err
	})
	if errors.Is(err, badger.ErrDBClosed) {
		return 0, ErrStoreClosed
	}
	return last, err
}

// AppendCall archives rec as the next call of branch and returns its
// sequence number, starting at 1.
func (s *BadgerStore) AppendCall(ctx context.Context, branch string, rec *CallRecord) (int, error) {
	if rec == nil {
		return 0, fmt.Errorf("%w: fold: AppendCall needs a record", ErrInvalidArgument)
	}
	seq, err := s.nextSeq(ctx, branch)
	if err != nil {
		return 0, err
	}
	c := *rec
	c.Seq = seq
	if c.Time.IsZero() {
		c.Time = time.Now()
	}
	var refs archiveRefs
	defer refs.done(s.arch)
	data, size, err := s.encodeCall(ctx, branch, &c, &refs)
	if err != nil {
		return 0, err
	}
	key := callKey(branch, seq)
	if err := s.writeWith(ctx, callWhat(branch, seq), &refs, set(key, data), set(timeKey(c.Time, key), size)); err != nil {
		return 0, err
	}
	return seq, nil
}

// storedCall is an archived call as Badger holds it: the record, with its
// result in the archive files when Ref is set.
type storedCall struct {
	CallRecord
	Ref *archiveRef `json:"ref,omitempty"`
}

// archiveRefs collects the archive reservations of one write and their
// bytes: writeWith hands them to the write-ahead log, and the ones left
// (the write failed) are released by done.
type archiveRefs []walBlob

func (r *archiveRefs) add(ref archiveRef, data []byte) {
	*r = append(*r, walBlob{ref: ref, data: data})
}

// done has a pointer receiver so that "defer refs.done(a)" sees the
// reservations made after the defer statement.
func (r *archiveRefs) done(a *archiveFiles) {
	for _, b := range *r {
		a.done(b.ref.Seg)
	}
	*r = nil
}

// toArchive reserves data's place in the archive files, after checking
// the free space, and returns its reference; data goes there with the
// write (writeWith).
func (s *BadgerStore) toArchive(ctx context.Context, what string, data []byte, refs *archiveRefs) (*archiveRef, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if s.readOnly {
		return nil, fmt.Errorf("fold: %s: the store was opened read-only", what)
	}
	// In the write-ahead log, then in the archive file.
	if err := s.free.check(2*int64(len(data)) + 4096); err != nil {
		return nil, fmt.Errorf("fold: %s: %w", what, err)
	}
	ref, err := s.arch.reserve(data)
	if err != nil {
		return nil, fmt.Errorf("fold: %s: %w", what, err)
	}
	refs.add(ref, data)
	return &ref, nil
}

// callWhat names the archiving of a call in errors.
func callWhat(branch string, seq int) string {
	return "archive call " + strconv.Itoa(seq) + " of " + branch
}

// encodeCall returns the value of c's record (of branch) and of its
// time-index entry, moving a result over archiveInlineMax to the archive
// files.
func (s *BadgerStore) encodeCall(ctx context.Context, branch string, c *CallRecord, refs *archiveRefs) ([]byte, []byte, error) {
	sc := storedCall{CallRecord: *c}
	if len(c.Result) > archiveInlineMax {
		// A view of the string's bytes, not a copy: the archive only
		// reads them (checksum, write(2)).
		ref, err := s.toArchive(ctx, callWhat(branch, c.Seq), unsafe.Slice(unsafe.StringData(c.Result), len(c.Result)), refs)
		if err != nil {
			return nil, nil, err
		}
		sc.Result, sc.Ref = "", ref
	}
	data, err := marshalStoredCall(&sc)
	if err != nil {
		return nil, nil, fmt.Errorf("fold: %s: encode: %w", callWhat(branch, c.Seq), err)
	}
	size := strconv.AppendInt(nil, int64(len(data)), 10)
	if sc.Ref != nil {
		size = strconv.AppendInt(nil, int64(len(data))+sc.Ref.Len, 10)
		size = strconv.AppendUint(append(size, '@'), uint64(sc.Ref.Seg), 10)
	}
	return data, size, nil
}

// encodeCut returns the key and value of a cut remainder and of its
// time-index entry, moving one over archiveInlineMax to the archive files.
func (s *BadgerStore) encodeCut(ctx context.Context, handle string, rest []byte, refs *archiveRefs) ([]byte, []byte, []byte, error) {
	if len(rest) <= archiveInlineMax {
		return cutKey(handle), bytes.Clone(rest), strconv.AppendInt(nil, int64(len(rest)), 10), nil
	}
	ref, err := s.toArchive(ctx, "store cut "+handle, rest, refs)
	if err != nil {
		return nil, nil, nil, err
	}
	data, err := json.Marshal(ref)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("fold: store cut %s: %w", handle, err)
	}
	size := strconv.AppendInt(nil, ref.Len, 10)
	size = strconv.AppendUint(append(size, '@'), uint64(ref.Seg), 10)
	return cutRefKey(handle), data, size, nil
}

// decodeCall reads a stored call, with its result from the archive files
// when it is there.
func (s *BadgerStore) decodeCall(v []byte) (*CallRecord, error) {
	var sc storedCall
	if err := json.Unmarshal(v, &sc); err != nil {
		return nil, err
	}
	if sc.Ref != nil {
		data, err := s.arch.read(*sc.Ref)
		if err != nil {
			return nil, err
		}
		sc.Result = string(data)
	}
	return &sc.CallRecord, nil
}

// Batch applies the writes of one operation in one transaction: one
// fsync for all of them.
func (s *BadgerStore) Batch(ctx context.Context, b *Batch) error {
	if err := b.validate(); err != nil {
		return err
	}
	sets := make([]walOp, 0, 2*(len(b.Cuts)+len(b.Calls)+len(b.Branches)))
	var refs archiveRefs
	defer refs.done(s.arch)
	now := time.Now()
	for _, c := range b.Cuts {
		key, val, size, err := s.encodeCut(ctx, c.Handle, c.Rest, &refs)
		if err != nil {
			return err
		}
		sets = append(sets, set(key, val), set(timeKey(now, key), size))
	}
	seqs := make([]int, len(b.Calls))
	for i, c := range b.Calls {
		seq, err := s.nextSeq(ctx, c.Branch)
		if err != nil {
			return err
		}
		seqs[i] = seq
		rec := *c.Rec
		rec.Seq = seq
		if rec.Time.IsZero() {
			rec.Time = now
		}
		data, size, err := s.encodeCall(ctx, c.Branch, &rec, &refs)
		if err != nil {
			return err
		}
		key := callKey(c.Branch, seq)
		sets = append(sets, set(key, data), set(timeKey(rec.Time, key), size))
	}
	for _, br := range b.Branches {
		data, err := marshalBranch(br)
		if err != nil {
			return fmt.Errorf("fold: encode branch %s: %w", br.ID, err)
		}
		sets = s.indexBranch(append(sets, set(branchKey(br.ID), data)), br)
	}
	for _, r := range b.Records {
		key := recordKey(r.Kind, r.ID)
		sets = append(sets, set(key, bytes.Clone(r.Value)))
		if !r.Keep {
			sets = append(sets, set(timeKey(now, key), strconv.AppendInt(nil, int64(len(r.Value)), 10)))
		}
	}
	if err := s.writeWith(ctx, "write batch", &refs, sets...); err != nil {
		return err
	}
	s.markIndexed(b.Branches...)
	for i, c := range b.Calls {
		c.Rec.Seq = seqs[i]
	}
	return nil
}

// Calls returns up to limit calls of branch from sequence number fromSeq
// on; a limit of zero or less means all of them.
func (s *BadgerStore) Calls(ctx context.Context, branch string, fromSeq, limit int) ([]*CallRecord, error) {
	var out []*CallRecord
	err := s.view(ctx, func(txn *badger.Txn) error {
		prefix := callPrefix(branch)
		o := badger.DefaultIteratorOptions
		o.Prefix = prefix
		o.PrefetchSize = 8
		it := txn.NewIterator(o)
		defer it.Close()
		for it.Seek(callKey(branch, max(fromSeq, 0))); it.ValidForPrefix(prefix); it.Next() {
			if limit > 0 && len(out) >= limit {
				break
			}
			var c *CallRecord
			if err := it.Item().Value(func(v []byte) error {
				var err error
				c, err = s.decodeCall(v)
				return err
			}); err != nil {
				return fmt.Errorf("fold: decode call %q: %w", it.Item().Key(), err)
			}
			out = append(out, c)
		}
		return nil
	})
	return out, err
}

// PutCut stores the remainder of a cut result under handle.
func (s *BadgerStore) PutCut(ctx context.Context, handle string, rest []byte) error {
	if handle == "" {
		return fmt.Errorf("%w: fold: PutCut needs a handle", ErrInvalidArgument)
	}
	var refs archiveRefs
	defer refs.done(s.arch)
	key, val, size, err := s.encodeCut(ctx, handle, rest, &refs)
	if err != nil {
		return err
	}
	return s.writeWith(ctx, "store cut "+handle, &refs, set(key, val), set(timeKey(time.Now(), key), size))
}

// GetCut returns the remainder stored under handle, or an error wrapping
// ErrCutNotFound.
func (s *BadgerStore) GetCut(ctx context.Context, handle string) ([]byte, error) {
	var out []byte
	err := s.view(ctx, func(txn *badger.Txn) error {
		item, err := txn.Get(cutKey(handle))
		if errors.Is(err, badger.ErrKeyNotFound) {
			item, err = txn.Get(cutRefKey(handle))
			if errors.Is(err, badger.ErrKeyNotFound) {
				return fmt.Errorf("%w: handle %q is unknown or was pruned", ErrCutNotFound, handle)
			}
			if err != nil {
				return err
			}
			var ref archiveRef
			if err := item.Value(func(v []byte) error { return json.Unmarshal(v, &ref) }); err != nil {
				return fmt.Errorf("fold: decode the reference of cut %s: %w", handle, err)
			}
			out, err = s.arch.read(ref)
			return err
		}
		if err != nil {
			return err
		}
		out, err = item.ValueCopy(nil)
		return err
	})
	if err != nil {
		return nil, err
	}
	if out == nil {
		out = []byte{}
	}
	return out, nil
}
