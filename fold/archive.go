package fold

import (
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// archiveFiles keeps the raw bytes of large archived results and cut
// remainders outside Badger, in append-only segment files under
// <store>/archive/ (00000001.seg, 00000002.seg, ...); Badger keeps a small
// reference (segment, offset, length, CRC-32) in their place. The bytes are
// written with write(2), never through a memory map: they do not count in
// the process's resident memory, a full disk is an error (ENOSPC) rather
// than a SIGBUS, and they are not rewritten by Badger's compactions or
// value-log garbage collection.
//
// Durability: append returns after the bytes are in the operating system
// (and on the disk with fsync), and the store commits the reference only
// after that, so a reference that survived kill -9 always points at bytes
// that did too. Bytes whose reference was never committed are garbage that
// Prune removes with their segment.
//
// Segments are removed whole by Prune once no reference points into them.
// A segment still being appended to, or one whose appends have not all
// been committed (pending), is never removed.
type archiveFiles struct {
	dir   string
	fsync bool

	mu      sync.Mutex
	cur     *os.File // nil until the first append; nil for a read-only store
	curID   uint32
	curSize int64
	pending map[uint32]int // appends not yet committed (or abandoned), by segment
}

// archiveSegmentSize is the size past which a new segment is started.
const archiveSegmentSize = 64 << 20

// archiveInlineMax is the largest result or remainder kept inline in
// Badger; larger ones go to the archive files. Badger's cost per byte
// (its own log, the memtable, then every table build of a flush or a
// compaction rewrites it) outweighs the archive's one write(2) beyond a
// few hundred bytes: on the trajectories' results (half of them under 250
// bytes, half the bytes under 4 KiB), 256 rather than 4 KiB took a
// quarter off the store's CPU time per call (BenchmarkStoreChargeMix).
const archiveInlineMax = 256

// archiveRef locates bytes in the archive files.
type archiveRef struct {
	Seg uint32 `json:"seg"`
	Off int64  `json:"off"`
	Len int64  `json:"len"`
	CRC uint32 `json:"crc"`
}

var crcTable = crc32.MakeTable(crc32.Castagnoli)

func openArchiveFiles(storeDir string, fsync bool) *archiveFiles {
	return &archiveFiles{dir: filepath.Join(storeDir, "archive"), fsync: fsync, pending: map[uint32]int{}}
}

// appendRecord writes data at the end of f, whose length is size, as one
// whole record, flushed to the disk with fsync. On failure a partial write
// is cut off, so that the file holds whole records only, and a full disk is
// an error wrapping ErrStoreFull. It returns the bytes written.
func appendRecord(f *os.File, size int64, data []byte, fsync bool) (int, error) {
	n, err := f.Write(data)
	if err == nil && fsync {
		err = f.Sync()
	}
	if err != nil {
		if n > 0 {
			_ = f.Truncate(size)
		}
		if errors.Is(err, syscall.ENOSPC) {
			err = fmt.Errorf("%w: %w", ErrStoreFull, err)
		}
		return 0, err
	}
	return n, nil
}

// segments lists the segment ids present, in ascending order.
func (a *archiveFiles) segments() ([]uint32, error) {
	return numberedFiles(a.dir, ".seg")
}

// numberedFiles lists the ids of the files named <decimal id><ext> in dir
// (the archive's segments, the write-ahead log's files), in ascending
// order; a folder that does not exist holds none.
func numberedFiles(dir, ext string) ([]uint32, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var ids []uint32
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), ext)
		if !ok || e.IsDir() {
			continue
		}
		id, err := strconv.ParseUint(name, 10, 32)
		if err != nil {
			continue
		}
		ids = append(ids, uint32(id))
	}
	slices.Sort(ids)
	return ids, nil
}

func (a *archiveFiles) path(id uint32) string {
	return filepath.Join(a.dir, fmt.Sprintf("%08d.seg", id))
}

// openCurrentLocked opens the last segment for appending, or the first one.
func (a *archiveFiles) openCurrentLocked() error {
	if err := os.MkdirAll(a.dir, 0o700); err != nil {
		return err
	}
	ids, err := a.segments()
	if err != nil {
		return err
	}
	id := uint32(1)
	if len(ids) > 0 {
		id = ids[len(ids)-1]
	}
	return a.openSegmentLocked(id)
}

func (a *archiveFiles) openSegmentLocked(id uint32) error {
	f, err := os.OpenFile(a.path(id), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return err
	}
	if a.cur != nil {
		a.cur.Close()
	}
	a.cur, a.curID, a.curSize = f, id, st.Size()
	return nil
}

// append writes data as one record and returns its reference. The caller
// must call done(ref.Seg) once the reference is committed, or abandoned.
func (a *archiveFiles) append(data []byte) (archiveRef, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cur == nil {
		if err := a.openCurrentLocked(); err != nil {
			return archiveRef{}, fmt.Errorf("open archive: %w", err)
		}
	}
	if a.curSize > 0 && a.curSize+int64(len(data)) > archiveSegmentSize {
		if err := a.openSegmentLocked(a.curID + 1); err != nil {
			return archiveRef{}, fmt.Errorf("start archive segment %d: %w", a.curID+1, err)
		}
	}
	ref := archiveRef{Seg: a.curID, Off: a.curSize, Len: int64(len(data)), CRC: crc32.Checksum(data, crcTable)}
	// The segment's length stays equal to what the references account for.
	n, err := appendRecord(a.cur, a.curSize, data, a.fsync)
	if err != nil {
		return archiveRef{}, fmt.Errorf("write archive segment %d: %w", a.curID, err)
	}
	a.curSize += int64(n)
	a.pending[ref.Seg]++
	return ref, nil
}

// done marks one append to segment seg as committed or abandoned.
func (a *archiveFiles) done(seg uint32) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.pending[seg]--; a.pending[seg] <= 0 {
		delete(a.pending, seg)
	}
}

// read returns the bytes ref points at, checked against its CRC.
func (a *archiveFiles) read(ref archiveRef) ([]byte, error) {
	f, err := os.Open(a.path(ref.Seg))
	if err != nil {
		return nil, fmt.Errorf("read archive segment %d: %w", ref.Seg, err)
	}
	defer f.Close()
	if ref.Len < 0 || ref.Off < 0 {
		return nil, fmt.Errorf("archive reference %+v is malformed", ref)
	}
	buf := make([]byte, ref.Len)
	if _, err := f.ReadAt(buf, ref.Off); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("read archive segment %d at %d: %w", ref.Seg, ref.Off, err)
	}
	if crc32.Checksum(buf, crcTable) != ref.CRC {
		return nil, fmt.Errorf("archive segment %d at %d: %d bytes fail their checksum (the file was damaged)", ref.Seg, ref.Off, ref.Len)
	}
	return buf, nil
}

// floor returns the lowest segment that may still gain references: the
// current one, or a lower one with appends not yet committed. Every append
// to a segment below it has been committed (or abandoned) already.
func (a *archiveFiles) floor() uint32 {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cur == nil {
		// The next append goes to the last segment: keep it.
		if err := a.openCurrentLocked(); err != nil {
			return 0 // remove nothing
		}
	}
	f := a.curID
	for seg := range a.pending {
		f = min(f, seg)
	}
	return f
}

// removeUnreferenced deletes the segments below floor that no reference in
// live points into. floor must have been taken before live was read.
func (a *archiveFiles) removeUnreferenced(floor uint32, live map[uint32]bool) error {
	ids, err := a.segments()
	if err != nil {
		return err
	}
	var errs []error
	for _, id := range ids {
		if id >= floor || live[id] {
			continue
		}
		if err := os.Remove(a.path(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (a *archiveFiles) close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cur == nil {
		return nil
	}
	err := a.cur.Close()
	a.cur = nil
	return err
}
