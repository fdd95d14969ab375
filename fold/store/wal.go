package store

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"math"
	"math/bits"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	badger "github.com/dgraph-io/badger/v4"
)

// The store's write-ahead log (issue 13: the reply path does no avoidable
// work). A write of the BadgerStore is not committed to Badger before it
// returns: its key/value changes are appended as one framed, checksummed
// record to a file under <store>/wal/ (and flushed to the disk with
// fold.fsync), and a background committer applies the pending records to
// Badger in groups, one transaction for all that is pending. The write
// returns once its record is in the operating system, so kill -9 loses
// nothing the agent heard of: the next open replays the records of the log
// that are not in Badger yet, in order, before anything else. A record
// torn by a crash in the middle of its write (it was never acknowledged)
// fails its length or checksum and is dropped with a log line.
//
// On Linux a log file is given walFileSize bytes of disk when it is
// created (fallocate) and mapped, shared: an append is a copy into the
// mapping, which is in the page cache as a write(2) would be, without the
// system call (the write(2) was more than half of the store's CPU time
// per call in BenchmarkPipelineChainFull). Where mapping fails, and for a
// record too big for a mapped file, the file is written by write(2), with
// the same framing.
//
// The log is not emptied after each commit (a truncate per call cost more
// than the rest of the commit): it keeps growing, and each commit
// transaction records in Badger, under walAppliedKey, the position (file,
// end offset) of the last record it holds completely, so the next open
// skips what is in Badger already. When a file is full appends go on in a
// new file, and the files whose records are all in Badger are removed, but
// for one mapped file kept as the next one: it is renamed to the next
// number and written again from its start, with its pages already in
// memory and mapped (a fresh file costs a page fault per 4 KiB). File
// numbers only grow (a new file is numbered after both the files present
// and the one the position names), so a position never claims a record of
// a later file. A clean close commits everything, deletes the position,
// and removes the files. Applying a record twice would be harmless anyway
// (each sets or deletes whole keys, in the order they were written), which
// a record split across two transactions relies on.
//
// Reads see the writes made before them: every read first commits what is
// pending (barrier). A background commit that fails is logged, kept in the
// log, and retried by the next write, which fails with the error when the
// retry fails too.
//
// Record framing: a 4-byte little-endian payload length, a 4-byte check,
// then the payload: ops, each a byte (walSet or walDelete), the key's
// length as a uvarint, the key, and for a set the value's length as a
// uvarint and the value; or a byte walArchived, the archive segment and
// offset as uvarints, the bytes' CRC-32 (4 bytes, little-endian), their
// length as a uvarint and the bytes: bytes for the archive files, which
// the committer writes there before it commits the record's changes (see
// archiveFiles).
//
// The files are named <number>.wal. Their records end at a zero length:
// each append stores the zero header after its record before the record
// itself, so a reader never reads on into what a reused file held before.
// The check is the payload's CRC-32 (Castagnoli) XORed with walFileMix of
// the file's number: a record a reused file kept from its earlier life
// (were its zero header lost with the power) never passes as one of its
// new number. Files named <number>.log are of the versions before (the
// check is the CRC alone, and the file ends where its records do): an
// open replays them too.

const (
	walSet      = 1
	walDelete   = 2
	walArchived = 3
	walHeader   = 8
	// walRotateSize is the size past which appends go to a new log file,
	// so that a log that is never empty (a steady load) does not grow
	// without bound: older files are removed once all their records are
	// in Badger. It is also the size of a mapped file (walFileSize),
	// whose pages, once written, count in the process's resident memory
	// with those of the spare: 4 MiB files added 6-10 MiB after 3,000
	// results of 100 KB. A rotation to the spare is a rename.
	walRotateSize = 1 << 20
	walFileSize   = walRotateSize
	// walGroupMax bounds the estimated size of one commit transaction
	// (Badger refuses one over about 15% of a memtable, memTableSize; a
	// bigger group measured no faster).
	walGroupMax = 256 << 10
	// walOpOverhead is what a change costs in a Badger transaction beyond
	// its key and value, roughly.
	walOpOverhead = 64
	// The background committer lets a group gather (see committer): it
	// commits once walGroupDelay has passed since the first record of
	// the group was appended, or as soon as the group's changes reach
	// walGroupFill (estimated transaction size) or its records
	// walGroupBytes (archived bytes included, which the pending records
	// hold in memory). The reply never waits on it either way.
	walGroupDelay = 10 * time.Millisecond
	walGroupFill  = walGroupMax / 2
	walGroupBytes = 1 << 20
)

// walAppliedKey holds the position of the last record in Badger: the
// file's number (4 bytes) and the record's end offset in it (8 bytes), big
// endian.
var walAppliedKey = []byte("wal!applied")

// walPos is a position in the log: a file and an offset in it.
type walPos struct {
	file uint32
	off  int64
}

func (p walPos) less(q walPos) bool {
	return p.file < q.file || p.file == q.file && p.off < q.off
}

func (p walPos) encode() []byte {
	b := binary.BigEndian.AppendUint32(make([]byte, 0, 12), p.file)
	return binary.BigEndian.AppendUint64(b, uint64(p.off))
}

// readApplied returns the position of the last record in Badger, zero when
// none is recorded.
func (s *BadgerStore) readApplied() (walPos, error) {
	var p walPos
	err := s.db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(walAppliedKey)
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		return item.Value(func(v []byte) error {
			if len(v) != 12 {
				return fmt.Errorf("the write-ahead log position %x is malformed", v)
			}
			p = walPos{file: binary.BigEndian.Uint32(v[:4]), off: int64(binary.BigEndian.Uint64(v[4:]))}
			return nil
		})
	})
	return p, err
}

// walOp is one change: a set of k to v, or a delete of k.
type walOp struct {
	del  bool
	k, v []byte
}

// walBlob is bytes for the archive files and their place there.
type walBlob struct {
	ref  archiveRef
	data []byte
}

// walRecord is one appended write, pending until it is in Badger.
type walRecord struct {
	ops   []walOp
	blobs []walBlob // written to the archive files before ops are committed
	buf   *[]byte   // the encoded record, which blobs are views of: recycled once committed
	file  uint32    // the log file holding it
	end   int64     // the offset of its end in that file
	size  int       // estimated transaction size
	bytes int       // its length in the log
}

// walLog is the BadgerStore's write-ahead log.
type walLog struct {
	dir   string
	fsync bool
	log   *slog.Logger

	mu      sync.Mutex
	f       *os.File
	m       []byte   // the current file mapped, or nil: written by write(2)
	id      uint32   // current file
	size    int64    // of the current file's records
	old     []walSeg // earlier files that still hold pending records
	spare   *walSeg  // a mapped file all in Badger, kept for the next one
	pending []walRecord
	err     error // the last commit's failure; nil after a success
	closed  bool
	// replayed and skipped count the records the open applied, and those
	// it found in Badger already (tests).
	replayed, skipped int
	commits           int           // commits that applied records (tests)
	gate              chan struct{} // test hook: the background committer waits on it
	crashed           bool          // test hook: commit nothing more (crashForTest)
	failing           func() error  // test hook: a commit fails with its error

	npending atomic.Int64 // len(pending), for the reads' fast path
	// gsize and gbytes add up the pending records' estimated transaction
	// sizes and their record sizes (the committer's group).
	gsize, gbytes int
	commitMu      sync.Mutex    // one commit at a time, in log order
	kick          chan struct{} // a record was appended to an empty pending list
	full          chan struct{} // the pending records make a full group
	stop          chan struct{}
	done          chan struct{}
	stopOnce      sync.Once
}

// walSeg is a file of the log other than the current one.
type walSeg struct {
	id uint32
	f  *os.File
	m  []byte // mapped, or nil
}

// release closes s's file and unmaps it.
func (s walSeg) release() error {
	unmapWALFile(s.m)
	if s.f == nil {
		return nil
	}
	return s.f.Close()
}

// walZeroHeader ends the records of a log file.
var walZeroHeader [walHeader]byte

// walFileMix is what a record's check holds beyond its CRC in file id: a
// different value for every id (an odd multiplier is a bijection).
func walFileMix(id uint32) uint32 { return id * 0x9e3779b1 }

// bindRecord binds rec, framed by encodeWALRecord with its bare CRC, to
// log file id (the check XORed with walFileMix(id)); binding twice to the
// same id undoes it.
func bindRecord(rec []byte, id uint32) {
	binary.LittleEndian.PutUint32(rec[4:8], binary.LittleEndian.Uint32(rec[4:8])^walFileMix(id))
}

// txnSize estimates what ops cost in a Badger transaction.
func txnSize(ops []walOp) int {
	size := 0
	for _, op := range ops {
		size += len(op.k) + len(op.v) + walOpOverhead
	}
	return size
}

// guardFault runs f, which stores into a mapped log file, and returns a
// fault there (the file cut short under the proxy, a disk error) as an
// error rather than a crash.
func guardFault(f func()) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("the mapped write-ahead log file faulted: %v", r)
		}
	}()
	f()
	return nil
}

func (w *walLog) path(id uint32) string { return walPath(w.dir, walFile{id: id}) }

// walFile is a log file: its number, and whether it is of the versions
// before (named .log, whose checks are bare CRCs and which end at their
// last record).
type walFile struct {
	id     uint32
	legacy bool
}

func walPath(dir string, f walFile) string {
	if f.legacy {
		return filepath.Join(dir, fmt.Sprintf("%08d.log", f.id))
	}
	return filepath.Join(dir, fmt.Sprintf("%08d.wal", f.id))
}

// walFiles lists the log files under dir by number, the legacy ones
// first at a number both have (never, but for a folder edited by hand).
func walFiles(dir string) ([]walFile, error) {
	legacy, err := numberedFiles(dir, ".log")
	if err != nil {
		return nil, err
	}
	cur, err := numberedFiles(dir, ".wal")
	if err != nil {
		return nil, err
	}
	out := make([]walFile, 0, len(legacy)+len(cur))
	for _, id := range legacy {
		out = append(out, walFile{id: id, legacy: true})
	}
	for _, id := range cur {
		out = append(out, walFile{id: id})
	}
	slices.SortStableFunc(out, func(a, b walFile) int { return cmp.Compare(a.id, b.id) })
	return out, nil
}

// walPending reports whether the log under storeDir holds anything: a
// store closed cleanly leaves it empty.
func walPending(storeDir string) (bool, error) {
	n, err := WALBytes(storeDir)
	return n > 0, err
}

// WALBytes returns the bytes of the whole records in the write-ahead log
// of the store in storeDir: writes acknowledged that may not be in the
// store's database yet (a store closed cleanly leaves none). The files are
// preallocated, so their sizes do not say it.
func WALBytes(storeDir string) (int64, error) {
	dir := filepath.Join(storeDir, "wal")
	files, err := walFiles(dir)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, f := range files {
		data, err := os.ReadFile(walPath(dir, f))
		if err != nil {
			return 0, err
		}
		end, _, _ := scanWAL(data, f, func([]byte, int) error { return nil })
		n += int64(end)
	}
	return n, nil
}

// encodeWALRecord frames blobs and ops as one record, in a buffer from
// getWALBuf. The blobs it returns hold their bytes in the record's.
func encodeWALRecord(blobs []walBlob, ops []walOp) (*[]byte, []walBlob) {
	n := walHeader
	for _, b := range blobs {
		n += 1 + 3*binary.MaxVarintLen64 + 4 + len(b.data)
	}
	for _, op := range ops {
		n += 1 + 2*binary.MaxVarintLen32 + len(op.k) + len(op.v)
	}
	bp := getWALBuf(n)
	buf := append((*bp)[:0], make([]byte, walHeader)...)
	var views []walBlob
	if len(blobs) > 0 {
		views = make([]walBlob, len(blobs))
	}
	for i, b := range blobs {
		buf = append(buf, walArchived)
		buf = binary.AppendUvarint(buf, uint64(b.ref.Seg))
		buf = binary.AppendUvarint(buf, uint64(b.ref.Off))
		buf = binary.LittleEndian.AppendUint32(buf, b.ref.CRC)
		buf = binary.AppendUvarint(buf, uint64(len(b.data)))
		views[i] = walBlob{ref: b.ref, data: buf[len(buf) : len(buf)+len(b.data) : len(buf)+len(b.data)]}
		buf = append(buf, b.data...)
	}
	for _, op := range ops {
		if op.del {
			buf = append(buf, walDelete)
			buf = binary.AppendUvarint(buf, uint64(len(op.k)))
			buf = append(buf, op.k...)
			continue
		}
		buf = append(buf, walSet)
		buf = binary.AppendUvarint(buf, uint64(len(op.k)))
		buf = append(buf, op.k...)
		buf = binary.AppendUvarint(buf, uint64(len(op.v)))
		buf = append(buf, op.v...)
	}
	payload := buf[walHeader:]
	binary.LittleEndian.PutUint32(buf[0:4], uint32(len(payload)))
	binary.LittleEndian.PutUint32(buf[4:8], crc32.Checksum(payload, crcTable))
	*bp = buf
	return bp, views
}

// The buffers of the records the committer has applied are used again for
// new records (an archived result is copied into its record: without
// this, the copies of every call were garbage for the collector a few
// milliseconds later). walBufPools[k] holds buffers of capacity
// walBufMin<<k; a record bigger than the largest class gets a buffer of
// its own.
const (
	walBufMin     = 4 << 10
	walBufClasses = 9 // up to 1 MiB
)

var walBufPools [walBufClasses]sync.Pool

// walBufClass returns the class of the buffers with room for n bytes, or
// walBufClasses when n is over the largest.
func walBufClass(n int) int {
	if n <= walBufMin {
		return 0
	}
	return bits.Len(uint(n-1)) - bits.Len(walBufMin-1)
}

// getWALBuf returns an empty buffer with room for n bytes.
func getWALBuf(n int) *[]byte {
	k := walBufClass(n)
	if k >= walBufClasses {
		b := make([]byte, 0, n)
		return &b
	}
	if bp, ok := walBufPools[k].Get().(*[]byte); ok {
		return bp
	}
	b := make([]byte, 0, walBufMin<<k)
	return &b
}

// putWALBuf gives back a buffer of getWALBuf that nothing refers to
// anymore.
func putWALBuf(bp *[]byte) {
	c := cap(*bp)
	if c < walBufMin || c > walBufMin<<(walBufClasses-1) || c&(c-1) != 0 {
		return
	}
	*bp = (*bp)[:0]
	walBufPools[bits.Len(uint(c))-bits.Len(walBufMin)].Put(bp)
}

// lengthPrefixed reads a uvarint length and that many bytes from *p, and
// moves *p past them; what names the bytes *p holds, for the error when
// the length runs past them.
func lengthPrefixed(p *[]byte, what string) ([]byte, error) {
	n, w := binary.Uvarint(*p)
	if w <= 0 || n > uint64(len(*p)-w) {
		return nil, errors.New("a length runs past the " + what)
	}
	b := (*p)[w : w+int(n)]
	*p = (*p)[w+int(n):]
	return b, nil
}

// decodeWALPayload parses a checked payload into its ops and blobs.
func decodeWALPayload(p []byte) ([]walOp, []walBlob, error) {
	var ops []walOp
	var blobs []walBlob
	number := func(limit uint64) (uint64, error) {
		n, w := binary.Uvarint(p)
		if w <= 0 || n > limit {
			return 0, errors.New("a malformed number")
		}
		p = p[w:]
		return n, nil
	}
	field := func() ([]byte, error) { return lengthPrefixed(&p, "record") }
	for len(p) > 0 {
		kind := p[0]
		p = p[1:]
		if kind == walArchived {
			seg, err := number(math.MaxUint32)
			if err != nil {
				return nil, nil, err
			}
			off, err := number(math.MaxInt64)
			if err != nil {
				return nil, nil, err
			}
			if len(p) < 4 {
				return nil, nil, errors.New("a checksum runs past the record")
			}
			crc := binary.LittleEndian.Uint32(p)
			p = p[4:]
			data, err := field()
			if err != nil {
				return nil, nil, err
			}
			if crc32.Checksum(data, crcTable) != crc {
				return nil, nil, errors.New("archive bytes that fail their checksum")
			}
			blobs = append(blobs, walBlob{ref: archiveRef{Seg: uint32(seg), Off: int64(off), Len: int64(len(data)), CRC: crc}, data: data})
			continue
		}
		if kind != walSet && kind != walDelete {
			return nil, nil, fmt.Errorf("unknown change kind %d", kind)
		}
		k, err := field()
		if err != nil {
			return nil, nil, err
		}
		op := walOp{del: kind == walDelete, k: k}
		if !op.del {
			if op.v, err = field(); err != nil {
				return nil, nil, err
			}
		}
		ops = append(ops, op)
	}
	return ops, blobs, nil
}

// readWAL reads the records of every log file under dir, in order. A
// record that fails its framing or checksum ends its file: it and what
// follows were never acknowledged (a write torn by the crash), and are
// dropped with a warning.
func readWAL(dir string, log *slog.Logger) (recs []walRecord, files []walFile, err error) {
	files, err = walFiles(dir)
	if err != nil {
		return nil, nil, err
	}
	for _, f := range files {
		path := walPath(dir, f)
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, nil, fmt.Errorf("read the write-ahead log %s: %w", path, err)
		}
		off, torn, why := scanWAL(data, f, func(payload []byte, end int) error {
			ops, blobs, err := decodeWALPayload(payload)
			if err != nil {
				return err
			}
			recs = append(recs, walRecord{ops: ops, blobs: blobs, file: f.id, end: int64(end), size: txnSize(ops), bytes: walHeader + len(payload)})
			return nil
		})
		if why != "" {
			log.Warn("fold: dropping the torn end of the write-ahead log (a write cut short by a crash; it was never acknowledged)",
				"file", path, "offset", off, "bytes", torn, "found", why)
		}
	}
	return recs, files, nil
}

// scanWAL calls fn with the payload and the end offset of each whole,
// checked record of data, the contents of log file f, in order, until fn
// fails (a record this version cannot decode ends the log too). It returns
// the end of the last record taken and, when what follows is not the
// log's clean end, its length and why it is not a record.
func scanWAL(data []byte, f walFile, fn func(payload []byte, end int) error) (off, torn int, why string) {
	for off < len(data) {
		rest := data[off:]
		if len(rest) < walHeader {
			if !f.legacy && allZero(rest) {
				return off, 0, "" // a mapped file's last bytes
			}
			return off, len(rest), "a header cut short"
		}
		n := int64(binary.LittleEndian.Uint32(rest[0:4]))
		check := binary.LittleEndian.Uint32(rest[4:8])
		if !f.legacy {
			if n == 0 {
				return off, 0, "" // the zero header after the last record
			}
			check ^= walFileMix(f.id)
		}
		switch {
		case n == 0:
			return off, len(rest), "an empty record"
		case n > int64(len(rest)-walHeader):
			return off, len(rest), fmt.Sprintf("a record of %d bytes with %d left in the file", n, len(rest)-walHeader)
		case crc32.Checksum(rest[walHeader:walHeader+n], crcTable) != check:
			return off, len(rest), "a record that fails its checksum"
		}
		if err := fn(rest[walHeader:walHeader+n:walHeader+n], off+walHeader+int(n)); err != nil {
			return off, len(rest), "a malformed record: " + err.Error()
		}
		off += walHeader + int(n)
	}
	return off, 0, ""
}

// allZero reports whether b holds zero bytes only.
func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
