package store

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"time"

	badger "github.com/dgraph-io/badger/v4"
)

// The write-ahead log's life (its format and reading are in wal.go):
// opening and replaying it, appending a write's record, the background
// committer and its group commits to Badger, and the clean close.

// openWAL replays the records of the store's log that are not in Badger
// yet, removes the log files, and starts a new one. It runs before the
// store is used.
func (s *BadgerStore) openWAL(fsync, hold bool, log *slog.Logger) error {
	dir := filepath.Join(s.dir, "wal")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create the write-ahead log folder: %w", err)
	}
	recs, files, err := readWAL(dir, log)
	if err != nil {
		return err
	}
	applied, err := s.readApplied()
	if err != nil {
		return fmt.Errorf("read the write-ahead log's position: %w", err)
	}
	skipped := 0
	for len(recs) > 0 && !applied.less(walPos{recs[0].file, recs[0].end}) {
		recs, skipped = recs[1:], skipped+1
	}
	w := &walLog{dir: dir, fsync: fsync, log: log, kick: make(chan struct{}, 1), full: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	w.replayed, w.skipped = len(recs), skipped
	if len(recs) > 0 {
		if err := os.MkdirAll(s.arch.dir, 0o700); err != nil {
			return fmt.Errorf("replay the write-ahead log: create the archive folder: %w", err)
		}
		if err := s.arch.writeBlobs(recordBlobs(recs)); err != nil {
			return fmt.Errorf("replay the write-ahead log: %w", err)
		}
		if err := s.applyRecords(recs); err != nil {
			return fmt.Errorf("replay the write-ahead log: %w", err)
		}
		if fsync {
			if err := s.db.Sync(); err != nil {
				return fmt.Errorf("replay the write-ahead log: sync: %w", err)
			}
		}
		log.Info("fold: replayed the writes left in the write-ahead log by a process that stopped before committing them", "records", len(recs), "already_committed", skipped)
	}
	for _, f := range files {
		if err := os.Remove(walPath(dir, f)); err != nil {
			return fmt.Errorf("remove the replayed write-ahead log: %w", err)
		}
	}
	// Numbered after every file present and the one the position names.
	w.id = applied.file
	if len(files) > 0 {
		w.id = max(w.id, files[len(files)-1].id)
	}
	if err := w.openNextLocked(0); err != nil {
		return err
	}
	if hold {
		w.gate = make(chan struct{}) // never closed
	}
	s.wal = w
	go s.committer()
	return nil
}

// openNextLocked starts log file id+1, for a first record of need bytes,
// and makes it the current one: the spare renamed, or a new file, mapped
// unless the record would not fit.
func (w *walLog) openNextLocked(need int) error {
	id := w.id + 1
	mapped := need+walHeader <= walFileSize
	var f *os.File
	var m []byte
	if sp := w.spare; sp != nil && mapped {
		w.spare = nil
		f, m = w.reuse(*sp, id)
	}
	if f == nil {
		var err error
		f, err = os.OpenFile(w.path(id), os.O_CREATE|os.O_EXCL|os.O_RDWR|os.O_APPEND, 0o600)
		if err != nil {
			return fmt.Errorf("create the write-ahead log: %w", err)
		}
		if mapped {
			if m, err = mapWALFile(f, walFileSize); err != nil {
				f.Close()
				os.Remove(w.path(id))
				return fmt.Errorf("create the write-ahead log: %w", err)
			}
		}
	}
	if w.fsync {
		if d, err := os.Open(w.dir); err == nil {
			err = d.Sync()
			d.Close()
			if err != nil {
				unmapWALFile(m)
				f.Close()
				os.Remove(w.path(id)) // else the next try finds it there
				return fmt.Errorf("sync the write-ahead log folder: %w", err)
			}
		}
	}
	if w.f != nil {
		w.old = append(w.old, walSeg{id: w.id, f: w.f, m: w.m})
	}
	w.f, w.m, w.id, w.size = f, m, id, 0
	return nil
}

// reuse makes the spare sp log file id: its first header zeroed (it is
// empty), then renamed. It returns nil when that fails, after a warning:
// a new file is made instead.
func (w *walLog) reuse(sp walSeg, id uint32) (*os.File, []byte) {
	err := guardFault(func() { copy(sp.m[:walHeader], walZeroHeader[:]) })
	if err == nil && w.fsync {
		err = syncMapped(sp.m, 0, walHeader)
	}
	if err == nil {
		err = os.Rename(w.path(sp.id), w.path(id))
	}
	if err != nil {
		w.log.Warn("fold: could not reuse a write-ahead log file; making a new one", "err", err)
		sp.release()
		os.Remove(w.path(sp.id))
		return nil, nil
	}
	return sp.f, sp.m
}

// appendWAL makes blobs and ops durable as one record (in the OS, and on
// the disk with fsync) and queues them for the committer, which releases
// the blobs' reservations (archiveFiles.done) once they are committed.
func (s *BadgerStore) appendWAL(what string, blobs []walBlob, ops []walOp) error {
	w := s.wal
	bp, blobs := encodeWALRecord(blobs, ops)
	rec := *bp
	size := txnSize(ops)
	w.mu.Lock()
	if w.err != nil && !w.closed {
		// The last background commit failed: retry it before taking more.
		w.mu.Unlock()
		if err := s.commitPending(); err != nil {
			return fmt.Errorf("fold: %s: nothing was written: the writes before it could not be committed to the store: %w", what, err)
		}
		w.mu.Lock()
	}
	defer w.mu.Unlock()
	if w.closed {
		return fmt.Errorf("fold: %s: %w", what, ErrStoreClosed)
	}
	full := w.size >= walRotateSize
	if w.m != nil {
		full = w.size+int64(len(rec)) > int64(len(w.m))
	}
	if full {
		if err := w.openNextLocked(len(rec)); err != nil {
			return fmt.Errorf("fold: %s: %w", what, err)
		}
	}
	bindRecord(rec, w.id)
	n, err := w.writeLocked(rec)
	if err != nil {
		putWALBuf(bp)
		return fmt.Errorf("fold: %s: write the write-ahead log: %w", what, err)
	}
	w.size += int64(n)
	w.pending = append(w.pending, walRecord{ops: ops, blobs: blobs, buf: bp, file: w.id, end: w.size, size: size, bytes: n})
	w.npending.Store(int64(len(w.pending)))
	w.gsize += size
	w.gbytes += n
	// Wake the committer only to start a group and to end a full one:
	// not once per write.
	if len(w.pending) == 1 {
		signal(w.kick)
	}
	if w.gsize >= walGroupFill && w.gsize-size < walGroupFill ||
		w.gbytes >= walGroupBytes && w.gbytes-n < walGroupBytes {
		signal(w.full)
	}
	return nil
}

// writeLocked appends rec, a whole record, to the current file: into its
// mapping, the zero header that ends the log after it first, then the
// record (a crash in between leaves the log ending where it did); or by
// write(2). Flushed to the disk with fsync.
func (w *walLog) writeLocked(rec []byte) (int, error) {
	if w.m == nil {
		return appendRecord(w.f, w.size, rec, w.fsync)
	}
	off := int(w.size)
	end := off + len(rec)
	stop := min(end+walHeader, len(w.m))
	err := guardFault(func() {
		copy(w.m[end:stop], walZeroHeader[:])
		copy(w.m[off:end], rec)
	})
	if err == nil && w.fsync {
		if err = syncMapped(w.m, off, stop); err != nil {
			// Not acknowledged: the record is taken back, as a
			// write(2) is cut off (appendRecord).
			_ = guardFault(func() { copy(w.m[off:off+walHeader], walZeroHeader[:]) })
		}
	}
	if err != nil {
		// Whatever the mapping holds now, the next record goes to a
		// new file.
		w.size = int64(len(w.m))
		return 0, err
	}
	return len(rec), nil
}

// signal sends on c, a channel with room for one, unless it is full.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// groupFull reports whether the pending records make a full group.
func (w *walLog) groupFull() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.gsize >= walGroupFill || w.gbytes >= walGroupBytes
}

// committer applies the pending records to Badger in groups. A group
// starts with the first record appended to an empty pending list and is
// committed walGroupDelay later, or once it is full (walGroupFill,
// walGroupBytes), whichever comes first: one Badger transaction, and one
// wake-up of this goroutine and of Badger's writer, for many writes rather
// than for each (with a second core, the committer would otherwise run
// after every write and commit it alone). Nothing waits on it: the writes
// returned once their records were in the log, and a read commits what is
// pending itself (barrier).
func (s *BadgerStore) committer() {
	w := s.wal
	defer close(w.done)
	t := time.NewTimer(walGroupDelay)
	t.Stop()
	var failed bool
	for {
		if failed || w.npending.Load() == 0 {
			// A failed commit is retried by the next write.
			select {
			case <-w.kick:
			case <-w.stop:
				return
			}
		}
		t.Reset(walGroupDelay)
	gather:
		for {
			select {
			case <-t.C:
				break gather
			case <-w.full:
				if w.groupFull() {
					t.Stop()
					break gather
				}
			case <-w.stop:
				t.Stop()
				return
			}
		}
		w.mu.Lock()
		gate := w.gate
		w.mu.Unlock()
		if gate != nil {
			select {
			case <-gate:
			case <-w.stop:
				return
			}
		}
		failed = s.commitPending() != nil // logged, and kept for the next write
	}
}

// CommitPending applies to Badger now what the write-ahead log holds
// (what every read does first): the benchmarks of fold/ measure the
// commit's cost with it.
func (s *BadgerStore) CommitPending() error { return s.barrier() }

// barrier commits what is pending, so that a read sees every write that
// returned before it.
func (s *BadgerStore) barrier() error {
	if s.wal == nil || s.wal.npending.Load() == 0 {
		return nil
	}
	return s.commitPending()
}

// commitPending applies every pending record to Badger, in groups, and
// then drops the log files (or the part of them) that are all in Badger.
func (s *BadgerStore) commitPending() error {
	w := s.wal
	w.commitMu.Lock()
	defer w.commitMu.Unlock()
	w.mu.Lock()
	recs := w.pending
	crashed, failing := w.crashed, w.failing
	w.mu.Unlock()
	if len(recs) == 0 || crashed {
		return nil
	}
	var err error
	if failing != nil {
		err = failing()
	}
	if err == nil {
		err = s.arch.writeBlobs(recordBlobs(recs))
	}
	if err == nil {
		err = s.applyRecords(recs)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		if errors.Is(err, badger.ErrDBClosed) {
			err = ErrStoreClosed
		} else if errors.Is(err, syscall.ENOSPC) && !errors.Is(err, ErrStoreFull) {
			err = fmt.Errorf("%w: %w", ErrStoreFull, err)
		}
		if w.err == nil {
			w.log.Error("fold: committing writes to the store failed; they are kept in the write-ahead log and retried by the next write", "writes", len(recs), "err", err)
		}
		w.err = err
		return err
	}
	w.err = nil
	w.commits++
	for _, r := range recs {
		for _, b := range r.blobs {
			s.arch.done(b.ref.Seg)
		}
	}
	// The records are in Badger and their blobs in the archive files:
	// nothing reads their buffers anymore (lastSeq, which looks at the
	// pending records without commitMu, reads their ops only, which are
	// not in the buffer).
	for _, r := range recs {
		if r.buf != nil {
			putWALBuf(r.buf)
		}
	}
	w.pending = w.pending[len(recs):]
	if len(w.pending) == 0 {
		w.pending = nil
	}
	w.gsize, w.gbytes = 0, 0
	for _, r := range w.pending {
		w.gsize += r.size
		w.gbytes += r.bytes
	}
	w.npending.Store(int64(len(w.pending)))
	w.trimLocked()
	return nil
}

// recordBlobs lists the blobs of recs.
func recordBlobs(recs []walRecord) []walBlob {
	var out []walBlob
	for _, r := range recs {
		out = append(out, r.blobs...)
	}
	return out
}

// trimLocked removes the log files whose records are all in Badger, but
// for a mapped one of the full size, which it keeps as the spare (the
// next file) when there is none.
func (w *walLog) trimLocked() {
	keep := w.id
	if len(w.pending) > 0 {
		keep = w.pending[0].file
	}
	for len(w.old) > 0 && w.old[0].id < keep {
		seg := w.old[0]
		if w.spare == nil && len(seg.m) == walFileSize && !w.closed {
			w.spare = &seg
			w.old = w.old[1:]
			continue
		}
		if err := os.Remove(w.path(seg.id)); err != nil && !errors.Is(err, os.ErrNotExist) {
			w.log.Warn("fold: remove a committed write-ahead log file (it is replayed, harmlessly, at the next start)", "err", err)
			return
		}
		seg.release()
		w.old = w.old[1:]
	}
}

// applyRecords writes recs to Badger in order, in as few transactions as
// its size limit allows; a record is split across two only when it alone
// is too big for one. Each transaction also records the position of the
// last record it holds completely (walAppliedKey), and holds the time
// index entries its records set in one entry, a group (timeindex.go).
func (s *BadgerStore) applyRecords(recs []walRecord) error {
	txn := s.db.NewTransaction(true)
	defer func() { txn.Discard() }()
	inTxn := 0
	var last *walRecord // the last record complete in txn
	var tg timeGroup
	commit := func() error {
		if tg.key != nil {
			err := txn.Set(tg.key, tg.val)
			if errors.Is(err, badger.ErrTxnTooBig) {
				// The group alone in a transaction of its own, which
				// records the position: a crash between the two
				// commits replays these records.
				if err = txn.Commit(); err == nil {
					txn = s.db.NewTransaction(true)
					err = txn.Set(tg.key, tg.val)
				}
			}
			if err != nil {
				return err
			}
			tg.reset()
		}
		if last != nil {
			err := txn.Set(walAppliedKey, walPos{last.file, last.end}.encode())
			if err != nil && !errors.Is(err, badger.ErrTxnTooBig) {
				return err
			}
			// Too big: the position stays behind, and the next open
			// applies these records again, which is harmless.
		}
		return txn.Commit()
	}
	next := func() error {
		if err := commit(); err != nil {
			return err
		}
		txn = s.db.NewTransaction(true)
		inTxn, last = 0, nil
		return nil
	}
	apply := func(op walOp) error {
		if op.del {
			return txn.Delete(op.k)
		}
		return txn.Set(op.k, op.v)
	}
	for i := range recs {
		r := &recs[i]
		if inTxn > 0 && inTxn+r.size > walGroupMax {
			if err := next(); err != nil {
				return err
			}
		}
		for j, op := range r.ops {
			if !op.del && isTimeKey(op.k) {
				tg.add(op.k, op.v, r.file, r.end, j)
				continue
			}
			err := apply(op)
			if errors.Is(err, badger.ErrTxnTooBig) {
				if err = next(); err == nil {
					err = apply(op)
				}
			}
			if err != nil {
				return err
			}
		}
		inTxn += r.size
		last = r
	}
	return commit()
}

// closeWAL stops the committer, commits what is pending and empties the
// log. Writes after it fail with ErrStoreClosed.
func (s *BadgerStore) closeWAL() error {
	w := s.wal
	if w == nil {
		return nil
	}
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	w.stopOnce.Do(func() { close(w.stop) })
	<-w.done
	err := s.commitPending()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f == nil {
		return err
	}
	unmapWALFile(w.m)
	cerr := w.f.Close()
	w.f, w.m = nil, nil
	segs := w.old
	if w.spare != nil {
		segs = append(segs, *w.spare)
		w.spare = nil
	}
	for _, seg := range segs {
		cerr = errors.Join(cerr, seg.release())
	}
	if err == nil && len(w.pending) == 0 && !w.crashed {
		// Everything is in Badger: a clean close leaves no log, and no
		// position (a process of an earlier version numbers its files
		// from 1 again; a position left behind would hide them). Should
		// the position stay, so do the files, and the next open numbers
		// its files after them.
		if derr := s.db.Update(func(txn *badger.Txn) error { return txn.Delete(walAppliedKey) }); derr != nil {
			return errors.Join(cerr, fmt.Errorf("forget the write-ahead log's position (the log is kept): %w", derr))
		}
		for _, seg := range append(segs, walSeg{id: w.id}) {
			if rerr := os.Remove(w.path(seg.id)); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
				cerr = errors.Join(cerr, rerr)
			}
		}
		w.old = nil
	}
	if err != nil {
		return fmt.Errorf("commit the write-ahead log (kept for the next start): %w", err)
	}
	return cerr
}
