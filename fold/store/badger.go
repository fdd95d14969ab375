package store

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	badger "github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"
)

// BadgerStore is the durable Store, kept in an embedded Badger database.
//
// Every write is one record of the store's own write-ahead log (wal.go),
// appended with one write(2) before the write returns: a write that
// returned nil is in the operating system and survives kill -9 or any
// crash of foldproxy. With fsync (policy fold.fsync) the record is also
// fsynced, which survives a crash of the machine too, at the price of one
// disk flush per change (about 2 ms on the development machines). A
// background committer applies the records to Badger in groups, one
// transaction for all that is pending; every read first commits what is
// pending, so it sees every write made before it, and the next open
// replays what a crash left in the log.
//
// Key layout (ids are path-escaped, so they never contain a '/'):
//
//	b/<id>                      branch record (JSON)
//	s/<session>/<id>            index of a session's branches (empty value)
//	c/<branch>/<seq, 20 digits> archived call (JSON; a result over 256 B
//	                            is in the archive files, and the record
//	                            holds its reference under "ref")
//	x/<handle>                  remainder of a cut result (raw bytes)
//	xr/<handle>                 reference to a remainder over 256 B in the
//	                            archive files (JSON)
//	sess/<id>                   session record (JSON)
//	r/<kind>/<id>               fold's own records (checkpoints: JSON)
//	t/<unix ns, 20 digits>/<key> archive index by time; the value is the
//	                            archived value's size, for pruning, then
//	                            "@<segment>" when its bytes are in an
//	                            archive file
//
// Large results and remainders are kept as raw bytes in append-only files
// beside Badger (see archiveFiles), written before the reference to them is
// committed: they stay out of Badger's LSM tree and value log, so neither
// the store's compactions nor the process's resident memory grow with the
// archive.
type BadgerStore struct {
	db       *badger.DB
	arch     *archiveFiles
	readOnly bool
	dir      string
	free     *freeGuard // refuses writes while less than the reserve is free under dir

	mu  sync.Mutex
	seq map[string]int // last sequence number by branch, loaded lazily
	// indexed holds, by id, the branches whose session index key (s/...)
	// this process has written: a branch's later versions need not write
	// it again (a charge rewrites the branch record on every call, and a
	// create and a return each their parent's), nor build it to find out.
	indexed map[string]bool

	wal *walLog // nil when read-only

	// Close's guards (close.go): the folder as opened, and Badger's
	// reports of a memtable flush that failed.
	dirInfo os.FileInfo
	flushes *flushWatch
}

// OpenBadger opens (creating if needed) the store in dir for reading and
// writing. Only one process may hold it open this way. Badger's own
// warnings and errors go to logger; nil discards them.
//
// The options keep Badger's memory small because the store holds small
// records (branches, sessions, archive references and results up to 256 B;
// larger results live in the archive files) that are read rarely: two
// memtables of memTableSize (see there), values over 128 B in the value log
// (where they count by their pointer in that limit), 16 MiB value log files
// (a file being written is mapped, so its written pages count as resident
// until it is full), 2 MiB block and index caches, no compression. A single
// value must stay under 16 MiB.
//
// The value threshold is low because the records are written far more
// often than read: a branch or call record (about 200 to 500 B) is
// written once, to the value log, and the tree holds its 12-byte pointer,
// so memtable flushes and compactions, which rewrite the tree, move
// pointers instead of records (the store's CPU per charge fell by about a
// fifth in BenchmarkStoreChargeMix, and the resident memory after 80,000
// charges from 78 to 60 MB). Prune's value log garbage collection
// reclaims the records replaced or deleted.
func OpenBadger(dir string, logger *slog.Logger) (*BadgerStore, error) {
	return OpenBadgerWith(dir, logger, BadgerOptions{Fsync: true})
}

// DefaultMinFreeBytes is the free space kept under the store: below it,
// writes are refused with ErrStoreFull. Badger writes its logs and tables
// through memory-mapped files, and a write into a mapped page that the
// file system cannot back kills the process (SIGBUS); the reserve covers
// what Badger may still write on its own after the last accepted write (a
// memtable flush, a compaction) plus the write itself.
const DefaultMinFreeBytes = 64 << 20

const valueLogFileSize = 16 << 20

// memTableSize is the size of each of Badger's two memtables: an arena of
// about 1.2 times it on the heap (its pages resident once written), a
// memtable log file of twice it (mapped, written sparsely), and a write
// transaction of up to about 15% of it. Every byte of the tree goes
// through a memtable, then a flush to a level-0 table and compactions;
// bigger memtables mean fewer of both for the same writes. At 16 MiB
// instead of 4 a tiny call's chain costs about 12% less CPU in steady
// state (BenchmarkPipelineChainTiny/badger at 400,000 calls, 19.8 → 17.3
// µs, the two builds alternated); the full call path
// (BenchmarkPipelineChainFull/badger, 30 passes) gained 6% in one
// interleaved run and moved within the noise in another. The price: 0.8
// MiB more resident memory idle, 1.3 MiB more after 3,000 results of 100
// KB (the peak during them 70 → 81 MiB) and 6 MiB more with 10,000
// branches open (89 → 95 MiB; make bench, archive and memory sections,
// in one run). 32 MiB gained a few % more for a peak of 101 MiB
// and 46 MiB more with 10,000 branches: not worth it.
const memTableSize = 16 << 20

// BadgerOptions tune OpenBadgerWith.
type BadgerOptions struct {
	// Fsync flushes each commit to the disk (policy fold.fsync).
	Fsync bool
	// MinFreeBytes is the space kept free on the store's file system;
	// zero: DefaultMinFreeBytes; negative: no check.
	MinFreeBytes int64
	// HoldCommits keeps the write-ahead log's background committer from
	// running: writes reach Badger only when a read or Close commits them.
	// For tests that kill the process between a write's reply and its
	// commit (serve sets it from FOLDPROXY_TEST_HOLD_STORE_COMMITS=1 in
	// the binary the e2e tests build only).
	HoldCommits bool
}

// OpenBadgerWith is OpenBadger with options. When the file system has less
// than the reserve free, the store is not opened (Badger itself writes
// through mapped files while it opens) and the error wraps ErrStoreFull.
func OpenBadgerWith(dir string, logger *slog.Logger, o BadgerOptions) (*BadgerStore, error) {
	return openBadgerOpts(dir, logger, false, o)
}

// OpenBadgerFsync is OpenBadger with the fsync policy made explicit: with
// fsync false a commit is written to the OS (it survives kill -9) but not
// flushed to the disk.
func OpenBadgerFsync(dir string, logger *slog.Logger, fsync bool) (*BadgerStore, error) {
	return OpenBadgerWith(dir, logger, BadgerOptions{Fsync: fsync})
}

// OpenBadgerReadOnly opens the store in dir for reading only, as
// `foldproxy report` does. It fails while a proxy holds the store open, and
// after a crash until a proxy has opened it once again (Badger must replay
// its log first).
func OpenBadgerReadOnly(dir string, logger *slog.Logger) (*BadgerStore, error) {
	return openBadgerOpts(dir, logger, true, BadgerOptions{MinFreeBytes: -1})
}

// ErrStoreBusy is wrapped when a store cannot be read because a running
// process (a foldproxy serving on it, or its daemon) holds it open.
var ErrStoreBusy = errors.New("ErrStoreBusy")

// OpenBadgerReader opens the store in dir for reading, as `foldproxy
// report --state` does, and never writes through the returned store.
//
// A store that was closed cleanly is opened read-only. One left open by a
// process that is gone (kill -9, a crash) cannot be opened read-only:
// Badger must first replay its log. Then, and only when no process holds
// the store (Badger's own exclusive lock on the directory decides, so a
// proxy that is running is never touched), it is opened read-write, which
// replays the log exactly as a proxy's next start would, and closed
// cleanly afterwards; recovered reports that. A store that a live process
// holds is an error wrapping ErrStoreBusy that names its process id.
func OpenBadgerReader(dir string, logger *slog.Logger) (st *BadgerStore, recovered bool, err error) {
	st, roErr := OpenBadgerReadOnly(dir, logger)
	if roErr == nil {
		return st, false, nil
	}
	st, err = openBadgerOpts(dir, logger, false, BadgerOptions{})
	if err == nil {
		st.readOnly = true // replayed; nothing else is written through it
		return st, true, nil
	}
	if strings.Contains(err.Error(), "Another process is using this Badger database") {
		holder := "another process"
		if b, rerr := os.ReadFile(filepath.Join(dir, "LOCK")); rerr == nil && len(bytes.TrimSpace(b)) > 0 {
			holder = "process " + string(bytes.TrimSpace(b))
		}
		return nil, false, fmt.Errorf("%w: the store %s is open in %s (a foldproxy serving on this state folder, or its daemon); it cannot be read while it runs: stop it, then retry", ErrStoreBusy, dir, holder)
	}
	return nil, false, fmt.Errorf("fold: open store %s for reading: %w (read-only, it failed with: %v)", dir, err, roErr)
}

func openBadgerOpts(dir string, logger *slog.Logger, readOnly bool, o BadgerOptions) (*BadgerStore, error) {
	fsync := o.Fsync
	minFree := o.MinFreeBytes
	if minFree == 0 {
		minFree = DefaultMinFreeBytes
	}
	if dir == "" {
		return nil, fmt.Errorf("%w: fold: the store directory is empty; set stateDir or --state", ErrInvalidArgument)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	flushes := &flushWatch{}
	opts := badger.DefaultOptions(dir).
		WithLogger(badgerLogger{l: logger.With("component", "badger"), flushes: flushes}).
		WithReadOnly(readOnly).
		WithSyncWrites(fsync).
		WithMemTableSize(memTableSize).
		WithNumMemtables(2).
		WithNumLevelZeroTables(2).
		WithNumLevelZeroTablesStall(8).
		WithBlockCacheSize(2 << 20).
		WithIndexCacheSize(2 << 20).
		WithValueLogFileSize(valueLogFileSize).
		WithValueThreshold(128).
		WithCompression(options.None).
		WithNumCompactors(2).
		WithNumGoroutines(2).
		WithMetricsEnabled(false).
		WithDetectConflicts(false)
	free := newFreeGuard(dir, minFree)
	if !readOnly && free.on() {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("fold: open store %s: %w", dir, err)
		}
		if err := free.checkNow(0); err != nil {
			return nil, fmt.Errorf("fold: open store %s: %w", dir, err)
		}
	}
	if readOnly {
		// Writes acknowledged but not yet in Badger are in the
		// write-ahead log; only a read-write open replays them.
		if left, err := walPending(dir); err != nil || left {
			if err == nil {
				err = errors.New("its write-ahead log holds writes not yet committed (a foldproxy stopped without closing it)")
			}
			return nil, fmt.Errorf("fold: open store %s read-only: %w (is a foldproxy running on it, or did one crash? start and stop the proxy once, then retry)", dir, err)
		}
	}
	db, err := badger.Open(opts)
	if err != nil {
		if readOnly {
			return nil, fmt.Errorf("fold: open store %s read-only: %w (is a foldproxy running on it, or did one crash? start and stop the proxy once, then retry)", dir, err)
		}
		return nil, fmt.Errorf("fold: open store %s: %w (is another foldproxy using this state directory?)", dir, err)
	}
	s := &BadgerStore{db: db, arch: openArchiveFiles(dir, fsync), readOnly: readOnly, dir: dir, free: free, seq: make(map[string]int), indexed: make(map[string]bool), flushes: flushes}
	s.dirInfo, _ = os.Stat(dir)
	if !readOnly {
		if err := s.openWAL(fsync, o.HoldCommits, logger); err != nil {
			db.Close()
			return nil, fmt.Errorf("fold: open store %s: %w", dir, err)
		}
	}
	return s, nil
}

func mib(n int64) string {
	if n < 0 {
		n = 0
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

// DB returns the underlying Badger database, for the embedded memory
// backend (fold/memory/badger), which keeps its keys under "mem/". The
// BadgerStore still owns it: closing the store closes it.
func (s *BadgerStore) DB() *badger.DB { return s.db }

// WriteKeys writes keys outside the store's own (the embedded memory
// backend's "mem/" keys, fold/memory/badger.OpenWith) as the store's own
// writes go: sets (key, value) then deletes, as one write-ahead-log record
// that is in the operating system (and on disk with fold.fsync) when
// WriteKeys returns, as durable as a Badger transaction's commit, without
// waiting for Badger's writer; the committer applies it to Badger in
// order with the other writes, and an open after a crash replays it before
// anything reads the database. A direct read of DB sees it only once the
// committer has applied it (the store's own reads commit what is pending
// first; the memory backend reads the database only when it opens).
func (s *BadgerStore) WriteKeys(ctx context.Context, sets [][2][]byte, dels [][]byte) error {
	ops := make([]walOp, 0, len(sets)+len(dels))
	for _, kv := range sets {
		ops = append(ops, set(kv[0], kv[1]))
	}
	for _, k := range dels {
		ops = append(ops, del(k))
	}
	if len(ops) == 0 {
		return nil
	}
	return s.writeWith(ctx, "write keys", nil, ops...)
}

// badgerLogger adapts slog to Badger's logger at warn level: Badger's info
// and debug chatter is dropped. A failed memtable flush is also reported
// to flushes (Close waits on it, close.go).
type badgerLogger struct {
	l       *slog.Logger
	flushes *flushWatch
}

func (b badgerLogger) Errorf(f string, v ...any) {
	msg := strings.TrimSpace(fmt.Sprintf(f, v...))
	b.l.Error(msg)
	if b.flushes != nil && strings.Contains(msg, badgerFlushFailed) {
		b.flushes.failed(msg)
	}
}

func (b badgerLogger) Warningf(f string, v ...any) {
	b.l.Warn(strings.TrimSpace(fmt.Sprintf(f, v...)))
}
func (badgerLogger) Infof(string, ...any)  {}
func (badgerLogger) Debugf(string, ...any) {}

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

// write makes ops durable, all or nothing, as one record of the
// write-ahead log (see wal.go); Badger gets them in the background.
func (s *BadgerStore) write(ctx context.Context, what string, ops ...walOp) error {
	return s.writeWith(ctx, what, nil, ops...)
}

// writeWith is write with the bytes of refs' reservations in the record
// too; once it is written, the committer writes them to the archive files
// and releases the reservations (refs is emptied).
func (s *BadgerStore) writeWith(ctx context.Context, what string, refs *archiveRefs, ops ...walOp) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.readOnly || s.wal == nil {
		return fmt.Errorf("fold: %s: the store was opened read-only", what)
	}
	if s.free.on() {
		size := 0
		for _, op := range ops {
			size += len(op.k) + len(op.v)
		}
		// The write-ahead log's record, then in Badger the keys, its own
		// log's copy of small values, and headers: three times the
		// payload is a safe bound.
		if err := s.free.check(3*int64(size) + 4096); err != nil {
			return fmt.Errorf("fold: %s: %w", what, err)
		}
	}
	var blobs []walBlob
	if refs != nil {
		blobs = *refs
	}
	if err := s.appendWAL(what, blobs, ops); err != nil {
		return err
	}
	if refs != nil {
		*refs = nil // the committer's now
	}
	return nil
}

func set(k, v []byte) walOp { return walOp{k: k, v: v} }
func del(k []byte) walOp    { return walOp{del: true, k: k} }

// view runs fn in a read transaction, after the writes made before it are
// in Badger.
func (s *BadgerStore) view(ctx context.Context, fn func(txn *badger.Txn) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := s.barrier(); err != nil {
		return fmt.Errorf("fold: read the store: the writes before it could not be committed: %w", err)
	}
	err := s.db.View(fn)
	if errors.Is(err, badger.ErrDBClosed) {
		return ErrStoreClosed
	}
	return err
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

// GetRecords returns the records of kind among ids that exist, by id.
func (s *BadgerStore) GetRecords(ctx context.Context, kind string, ids []string) (map[string][]byte, error) {
	out := make(map[string][]byte)
	err := s.view(ctx, func(txn *badger.Txn) error {
		for _, id := range ids {
			item, err := txn.Get(recordKey(kind, id))
			if errors.Is(err, badger.ErrKeyNotFound) {
				continue
			}
			if err != nil {
				return err
			}
			v, err := item.ValueCopy(nil)
			if err != nil {
				return err
			}
			out[id] = v
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("fold: read %s records: %w", kind, err)
	}
	return out, nil
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

// PutSession stores a session record.
func (s *BadgerStore) PutSession(ctx context.Context, rec *SessionRecord) error {
	if rec == nil || rec.ID == "" {
		return fmt.Errorf("%w: fold: PutSession needs a record with an id", ErrInvalidArgument)
	}
	data, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("fold: encode session %s: %w", rec.ID, err)
	}
	return s.write(ctx, "put session "+rec.ID, set(sessionKey(rec.ID), data))
}

// GetSession returns a session record, or an error wrapping
// ErrSessionNotFound.
func (s *BadgerStore) GetSession(ctx context.Context, id string) (*SessionRecord, error) {
	var rec *SessionRecord
	err := s.view(ctx, func(txn *badger.Txn) error {
		item, err := txn.Get(sessionKey(id))
		if errors.Is(err, badger.ErrKeyNotFound) {
			return fmt.Errorf("%w: session %q is not in the store", ErrSessionNotFound, id)
		}
		if err != nil {
			return err
		}
		return item.Value(func(v []byte) error {
			rec, err = decodeSession(v)
			return err
		})
	})
	if err != nil {
		return nil, err
	}
	return rec, nil
}

// Sessions lists every session record, ordered by id.
func (s *BadgerStore) Sessions(ctx context.Context) ([]*SessionRecord, error) {
	var out []*SessionRecord
	err := s.view(ctx, func(txn *badger.Txn) error {
		return scan(txn, []byte("sess/"), true, func(_ []byte, v []byte) error {
			rec, err := decodeSession(v)
			if err != nil {
				return err
			}
			out = append(out, rec)
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// DeleteSession removes a session record; removing an absent one is not an
// error.
func (s *BadgerStore) DeleteSession(ctx context.Context, id string) error {
	return s.write(ctx, "delete session "+id, del(sessionKey(id)))
}

// PutRecord stores one of fold's own records.
func (s *BadgerStore) PutRecord(ctx context.Context, kind, id string, data []byte) error {
	if kind == "" || id == "" {
		return fmt.Errorf("%w: fold: PutRecord needs a kind and an id", ErrInvalidArgument)
	}
	return s.write(ctx, "put "+kind+" "+id, set(recordKey(kind, id), data))
}

// GetRecord returns a record, or an error wrapping ErrRecordNotFound.
func (s *BadgerStore) GetRecord(ctx context.Context, kind, id string) ([]byte, error) {
	var out []byte
	err := s.view(ctx, func(txn *badger.Txn) error {
		item, err := txn.Get(recordKey(kind, id))
		if errors.Is(err, badger.ErrKeyNotFound) {
			return fmt.Errorf("%w: %s %q", ErrRecordNotFound, kind, id)
		}
		if err != nil {
			return err
		}
		out, err = item.ValueCopy(nil)
		return err
	})
	return out, err
}

// Records lists the records of a kind, by id.
func (s *BadgerStore) Records(ctx context.Context, kind string) ([]Record, error) {
	var out []Record
	prefix := []byte("r/" + esc(kind) + "/")
	err := s.view(ctx, func(txn *badger.Txn) error {
		return scan(txn, prefix, true, func(k, v []byte) error {
			id, err := url.PathUnescape(string(k[len(prefix):]))
			if err != nil {
				return err
			}
			out = append(out, Record{ID: id, Data: bytes.Clone(v)})
			return nil
		})
	})
	return out, err
}

// DeleteRecord removes a record; removing an absent one is not an error.
func (s *BadgerStore) DeleteRecord(ctx context.Context, kind, id string) error {
	return s.write(ctx, "delete "+kind+" "+id, del(recordKey(kind, id)))
}

// Prune removes archived calls and cut remainders older than maxAge, closed
// branch records closed before then, and then the oldest archives until
// their total size is at most maxBytes. A maxAge or maxBytes of zero or less
// disables that rule. Active branches are never removed. Space is given back
// to the file system by Badger's value log garbage collection afterwards.
// It reads the time index both in groups and under entries' own keys
// (timeindex.go).
func (s *BadgerStore) Prune(ctx context.Context, maxAge time.Duration, maxBytes int64) error {
	if s.readOnly {
		return fmt.Errorf("fold: prune: the store was opened read-only")
	}
	type entry struct {
		tkey, key []byte
		t         int64
		size      int64
		seg       uint32 // archive segment of its bytes, 0 when inline
		direct    bool   // under its own key (a store written before the index was grouped)
	}
	var all []entry
	var total int64
	var oldBranches []*Branch
	type group struct {
		key   []byte
		pairs [][2][]byte
	}
	var groups []group
	cutoff := time.Now().Add(-maxAge)
	// add records the index entry k → v, once however many places hold it.
	seen := map[string]int{}
	add := func(k, v []byte, direct bool) error {
		if i, ok := seen[string(k)]; ok {
			all[i].direct = all[i].direct || direct
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
		seen[string(k)] = len(all)
		all = append(all, entry{tkey: k, key: k[23:], t: ns, size: size, seg: uint32(seg), direct: direct})
		total += size
		return nil
	}
	// Taken before the index is read: every reference into a segment below
	// it is written (in the write-ahead log), so the index read next, which
	// first commits what is pending, sees it.
	floor := s.arch.floor()
	err := s.view(ctx, func(txn *badger.Txn) error {
		err := scan(txn, []byte("t/"), true, func(k, v []byte) error { return add(k, v, true) })
		if err != nil {
			return err
		}
		err = scan(txn, timeGroupPrefix, true, func(k, v []byte) error {
			pairs, err := decodeTimeGroup(v)
			if err != nil {
				return fmt.Errorf("fold: bad archive index group %q: %w", k, err)
			}
			groups = append(groups, group{key: k, pairs: pairs})
			for _, p := range pairs {
				if err := add(p[0], p[1], false); err != nil {
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
				oldBranches = append(oldBranches, b)
			}
			return nil
		})
	})
	if err != nil {
		return fmt.Errorf("fold: prune: %w", err)
	}
	// Oldest first (the groups are not in time order among themselves or
	// with the entries under their own keys).
	slices.SortFunc(all, func(a, b entry) int {
		if c := cmp.Compare(a.t, b.t); c != 0 {
			return c
		}
		return bytes.Compare(a.tkey, b.tkey)
	})
	var drop []entry
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
	live := map[uint32]bool{}
	for _, e := range all[i:] {
		if e.seg != 0 {
			live[e.seg] = true
		}
	}
	if len(drop) == 0 && len(oldBranches) == 0 {
		return s.arch.removeUnreferenced(floor, live)
	}
	ops := make([]walOp, 0, 2*(len(drop)+len(oldBranches)))
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
	for _, g := range groups {
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
	for _, b := range oldBranches {
		delete(s.seq, b.ID)
		delete(s.indexed, b.ID)
		ops = append(ops, del(branchKey(b.ID)), del(sessionIndexKey(b.Session, b.ID)))
	}
	s.mu.Unlock()
	// Through the write-ahead log like every write, so that a record
	// written before this (still in the log at a crash) cannot be
	// replayed over the deletes.
	if err := s.write(ctx, "prune", ops...); err != nil {
		return err
	}
	if err := s.arch.removeUnreferenced(floor, live); err != nil {
		return fmt.Errorf("fold: prune: remove archive segments: %w", err)
	}
	if err := s.barrier(); err != nil { // the deletes, in Badger for its garbage collection
		return fmt.Errorf("fold: prune: %w", err)
	}
	for ctx.Err() == nil {
		// Garbage collection rewrites the live part of a value log file.
		if s.free.checkNow(valueLogFileSize) != nil {
			break
		}
		if err := s.db.RunValueLogGC(0.5); err != nil {
			break // ErrNoRewrite: nothing more worth collecting
		}
	}
	return nil
}

// Close commits the writes still pending in the write-ahead log to Badger
// and closes the database. Writes acknowledged before are already in the
// write-ahead log: should this fail, the next open replays them.
func (s *BadgerStore) Close() error {
	if err := s.closeBounded(); err != nil {
		return fmt.Errorf("fold: close store: %w", err)
	}
	return nil
}
