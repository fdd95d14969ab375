package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"

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

// Close commits the writes still pending in the write-ahead log to Badger
// and closes the database. Writes acknowledged before are already in the
// write-ahead log: should this fail, the next open replays them.
func (s *BadgerStore) Close() error {
	if err := s.closeBounded(); err != nil {
		return fmt.Errorf("fold: close store: %w", err)
	}
	return nil
}
