package store

import (
	"cmp"
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

	"github.com/foldproxy/foldproxy/policy/rawio"
)

// archiveFiles keeps the raw bytes of large archived results and cut
// remainders outside Badger, in append-only segment files under
// <store>/archive/ (00000001.seg, 00000002.seg, ...); Badger keeps a small
// reference (segment, offset, length, CRC-32) in their place. The bytes are
// written with pwrite(2), never through a memory map: they do not count in
// the process's resident memory, a full disk is an error (ENOSPC) rather
// than a SIGBUS, and they are not rewritten by Badger's compactions or
// value-log garbage collection.
//
// Writing is in two steps, so that the reply path makes one write(2), to
// the store's write-ahead log, not two: a write reserves the bytes' place
// (reserve: the segment and offset, known at once), and its write-ahead
// log record carries the bytes with their place. The committer writes them
// there (writeBlobs, the bytes of a whole group of records at once, and
// fsynced with fold.fsync) before it commits the references to Badger, and
// the open replays the records not in Badger yet the same way, so a
// reference in Badger always points at bytes that are in the file; the
// record that carries them is removed only after that. Bytes whose
// reference was never committed are garbage that Prune removes with their
// segment.
//
// Segments are removed whole by Prune once no reference points into them.
// A segment still being appended to, or one whose appends have not all
// been committed (pending), is never removed.
type archiveFiles struct {
	dir   string
	fsync bool

	mu      sync.Mutex
	opened  bool // curID and curSize are known (at the first reserve)
	curID   uint32
	curSize int64          // the end of the last reservation
	pending map[uint32]int // reservations not yet committed (or abandoned), by segment

	// The segment writeBlobs wrote to last, kept open for the next group
	// (the committer writes one group after another, mostly to the same
	// segment): wmu serializes writeBlobs and guards wf and wfID.
	wmu  sync.Mutex
	wf   *os.File
	wfID uint32
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
	n, err := rawio.WriteFile(f, data)
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

// openSegmentLocked makes segment id, created if absent, the one
// reservations go to, from its end on.
func (a *archiveFiles) openSegmentLocked(id uint32) error {
	f, err := os.OpenFile(a.path(id), os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	st, err := f.Stat()
	f.Close()
	if err != nil {
		return err
	}
	a.opened, a.curID, a.curSize = true, id, st.Size()
	return nil
}

// reserve returns the place of data in the archive files, to be written
// there by writeBlobs. The caller must call done(ref.Seg) once the
// reference is committed, or abandoned.
func (a *archiveFiles) reserve(data []byte) (archiveRef, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.opened {
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
	a.curSize += ref.Len
	a.pending[ref.Seg]++
	return ref, nil
}

// append reserves data's place and writes it there (tests).
func (a *archiveFiles) append(data []byte) (archiveRef, error) {
	ref, err := a.reserve(data)
	if err != nil {
		return ref, err
	}
	if err := a.writeBlobs([]walBlob{{ref: ref, data: data}}); err != nil {
		a.done(ref.Seg)
		return archiveRef{}, err
	}
	return ref, nil
}

// writeBlobs writes each blob's bytes at its reserved place, the runs of
// adjacent ones with one pwritev(2), and flushes the segments to the disk
// with fsync. Writing them again is harmless.
func (a *archiveFiles) writeBlobs(blobs []walBlob) error {
	if len(blobs) == 0 {
		return nil
	}
	blobs = slices.Clone(blobs)
	slices.SortFunc(blobs, func(x, y walBlob) int {
		if x.ref.Seg != y.ref.Seg {
			return cmp.Compare(x.ref.Seg, y.ref.Seg)
		}
		return cmp.Compare(x.ref.Off, y.ref.Off)
	})
	// The folder exists: reserve made it (a folder gone since is an
	// error, not made again).
	a.wmu.Lock()
	defer a.wmu.Unlock()
	var run [][]byte
	for i := 0; i < len(blobs); {
		seg := blobs[i].ref.Seg
		if a.wf == nil || a.wfID != seg {
			if a.wf != nil {
				a.wf.Close()
				a.wf = nil
			}
			f, err := os.OpenFile(a.path(seg), os.O_CREATE|os.O_WRONLY, 0o600)
			if err != nil {
				return fmt.Errorf("open archive segment %d: %w", seg, err)
			}
			a.wf, a.wfID = f, seg
		}
		f := a.wf
		var err error
		for ; i < len(blobs) && blobs[i].ref.Seg == seg && err == nil; i++ {
			off, end := blobs[i].ref.Off, blobs[i].ref.Off+int64(len(blobs[i].data))
			run = append(run[:0], blobs[i].data)
			for i+1 < len(blobs) && blobs[i+1].ref.Seg == seg && blobs[i+1].ref.Off == end {
				i++
				run = append(run, blobs[i].data)
				end += int64(len(blobs[i].data))
			}
			err = writeAtv(f, run, off)
		}
		if err == nil && a.fsync {
			err = f.Sync()
		}
		if err != nil {
			a.wf.Close()
			a.wf = nil
			if errors.Is(err, syscall.ENOSPC) {
				err = fmt.Errorf("%w: %w", ErrStoreFull, err)
			}
			return fmt.Errorf("write archive segment %d: %w", seg, err)
		}
	}
	return nil
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
	if !a.opened {
		// The next reservation goes to the last segment: keep it.
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
		a.wmu.Lock()
		if a.wf != nil && a.wfID == id {
			a.wf.Close()
			a.wf = nil
		}
		a.wmu.Unlock()
		if err := os.Remove(a.path(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// close forgets the current segment and closes the one writeBlobs keeps.
func (a *archiveFiles) close() error {
	a.mu.Lock()
	a.opened = false
	a.mu.Unlock()
	a.wmu.Lock()
	defer a.wmu.Unlock()
	if a.wf == nil {
		return nil
	}
	err := a.wf.Close()
	a.wf = nil
	return err
}
