package store

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// spareID returns the number of the file kept for reuse, under the log's
// lock (the committer sets it).
func (w *walLog) spareID() (uint32, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.spare == nil {
		return 0, false
	}
	return w.spare.id, true
}

// pendingLen returns how many records wait for the committer.
func (w *walLog) pendingLen() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.pending)
}

// boundRecord frames a record setting k to v for log file id, as
// appendWAL writes it there.
func boundRecord(id uint32, k, v string) []byte {
	bp, _ := encodeWALRecord(nil, []walOp{set([]byte(k), []byte(v))})
	r := bytes.Clone(*bp)
	bindRecord(r, id)
	return r
}

// openMappedStore opens a store in dir for a test of mapped log files,
// and skips the test where they are not (another system, or a file system
// that does not preallocate).
func openMappedStore(t *testing.T, dir string) *BadgerStore {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("log files are mapped, and kept for reuse, on Linux only")
	}
	s := openWALStore(t, dir, nil)
	if s.wal.m == nil {
		s.Close()
		t.Skip("this file system does not preallocate: the log is written by write(2)")
	}
	return s
}

// A store of the version before left its log in .log files, framed with
// bare CRCs: an open replays them and removes them, and numbers its own
// files after them.
func TestWALReplaysLegacyFiles(t *testing.T) {
	dir := t.TempDir()
	s := openWALStore(t, dir, nil)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	wdir := filepath.Join(dir, "wal")
	var legacy []byte
	for i := 1; i <= 3; i++ {
		bp, _ := encodeWALRecord(nil, []walOp{set(cutKey(fmt.Sprint("old", i)), []byte(fmt.Sprint("remainder ", i)))})
		legacy = append(legacy, *bp...)
	}
	if err := os.WriteFile(filepath.Join(wdir, "00000007.log"), legacy, 0o600); err != nil {
		t.Fatal(err)
	}
	logs := &logBuffer{}
	s = openWALStore(t, dir, logs)
	defer s.Close()
	if s.wal.replayed != 3 || strings.Contains(logs.String(), "torn") {
		t.Fatalf("replayed %d records of the legacy file, want 3; log: %s", s.wal.replayed, logs)
	}
	for i := 1; i <= 3; i++ {
		if rest, err := s.GetCut(t.Context(), fmt.Sprint("old", i)); err != nil || string(rest) != fmt.Sprint("remainder ", i) {
			t.Errorf("cut old%d after the replay: %q, %v", i, rest, err)
		}
	}
	if _, err := os.Stat(filepath.Join(wdir, "00000007.log")); !os.IsNotExist(err) {
		t.Errorf("the legacy file is still there after the replay: %v", err)
	}
	if s.wal.id != 8 {
		t.Errorf("the new log file is number %d, want 8 (after the legacy one)", s.wal.id)
	}
}

// A file reused as the next one holds the records of its earlier life
// past its new ones: after a crash, the open replays exactly the records
// not in Badger yet, and warns of nothing.
func TestWALReusedFileReplaysNew(t *testing.T) {
	dir := t.TempDir()
	ctx := t.Context()
	s := openMappedStore(t, dir)
	val := bytes.Repeat([]byte("v"), 3000)
	n := walFileSize/len(val) + 10
	release := s.holdCommitter()
	for i := range n {
		if err := s.write(ctx, "cut", set(cutKey(fmt.Sprint("a", i)), val)); err != nil {
			t.Fatal(err)
		}
	}
	release()
	if _, err := s.GetCut(ctx, "a0"); err != nil { // commits everything
		t.Fatal(err)
	}
	if _, ok := s.wal.spareID(); !ok {
		t.Fatal("no file was kept for reuse")
	}
	s.holdCommitter()
	// Fill the current file, then 5 records into the reused one.
	m := 0
	for _, ok := s.wal.spareID(); ok; _, ok = s.wal.spareID() {
		if err := s.write(ctx, "cut", set(cutKey(fmt.Sprint("b", m)), val)); err != nil {
			t.Fatal(err)
		}
		m++
	}
	for i := range 4 {
		if err := s.write(ctx, "cut", set(cutKey(fmt.Sprint("c", i)), []byte(fmt.Sprint("short ", i)))); err != nil {
			t.Fatal(err)
		}
	}
	pending := s.wal.pendingLen()
	s.crashForTest(t)

	logs := &logBuffer{}
	s2 := openWALStore(t, dir, logs)
	defer s2.Close()
	if s2.wal.replayed != pending || strings.Contains(logs.String(), "torn") {
		t.Fatalf("replayed %d records, want the %d pending at the crash; log: %s", s2.wal.replayed, pending, logs)
	}
	for _, k := range []string{"a0", fmt.Sprint("a", n-1), "b0", fmt.Sprint("b", m-1)} {
		if rest, err := s2.GetCut(ctx, k); err != nil || !bytes.Equal(rest, val) {
			t.Errorf("cut %s: %d bytes, %v", k, len(rest), err)
		}
	}
	for i := range 4 {
		if rest, err := s2.GetCut(ctx, fmt.Sprint("c", i)); err != nil || string(rest) != fmt.Sprint("short ", i) {
			t.Errorf("cut c%d: %q, %v", i, rest, err)
		}
	}
}

// A mapped file cut short under the proxy faults on the next store into
// it: the write fails with an error, the process lives, and the next
// write goes to a new file.
func TestWALMappedFileFault(t *testing.T) {
	ctx := t.Context()
	s := openMappedStore(t, t.TempDir())
	defer s.Close()
	if err := s.write(ctx, "cut", set(cutKey("first"), []byte("one"))); err != nil {
		t.Fatal(err)
	}
	id := s.wal.id
	if err := os.Truncate(s.wal.path(id), 0); err != nil {
		t.Fatal(err)
	}
	err := s.write(ctx, "cut", set(cutKey("second"), []byte("two")))
	if err == nil || !strings.Contains(err.Error(), "faulted") {
		t.Fatalf("a write into the truncated mapped file: %v; want an error that says it faulted", err)
	}
	if err := s.write(ctx, "cut", set(cutKey("third"), []byte("three"))); err != nil {
		t.Fatalf("the write after the fault: %v", err)
	}
	if s.wal.id == id {
		t.Errorf("the write after the fault stayed in file %d", id)
	}
	if rest, err := s.GetCut(ctx, "third"); err != nil || string(rest) != "three" {
		t.Errorf("cut third: %q, %v", rest, err)
	}
	if _, err := s.GetCut(ctx, "second"); err == nil {
		t.Errorf("the failed write is in the store")
	}
}

// scanWAL: a preallocated file ends at its zero header, or at its last
// byte; the bytes of a torn record are reported.
func TestScanWALEnds(t *testing.T) {
	rec := func(id uint32, v string) []byte { return boundRecord(id, "k", v) }
	a, b := rec(3, "a"), rec(3, "bb")
	full := append(append(bytes.Clone(a), b...), make([]byte, 5)...)
	for _, tc := range []struct {
		name      string
		data      []byte
		recs, end int
		why       string
	}{
		{"zero header", append(append(bytes.Clone(a), b...), make([]byte, 64)...), 2, len(a) + len(b), ""},
		{"fewer zero bytes than a header", full, 2, len(a) + len(b), ""},
		{"exactly full", append(bytes.Clone(a), b...), 2, len(a) + len(b), ""},
		{"stale record after the zero header", append(append(bytes.Clone(a), make([]byte, 8)...), rec(1, "old")...), 1, len(a), ""},
		{"another file's record", append(bytes.Clone(a), rec(2, "bb")...), 1, len(a), "a record that fails its checksum"},
		{"header cut short", append(bytes.Clone(a), 1, 0, 0), 1, len(a), "a header cut short"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := 0
			end, _, why := scanWAL(tc.data, walFile{id: 3}, func([]byte, int) error { got++; return nil })
			if got != tc.recs || end != tc.end || why != tc.why {
				t.Errorf("scan: %d records ending at %d, %q; want %d at %d, %q", got, end, why, tc.recs, tc.end, tc.why)
			}
		})
	}
	// A legacy file has no zero header: zeros are an empty record.
	if _, _, why := scanWAL(append(bytes.Clone(a), make([]byte, 8)...), walFile{id: 3, legacy: true}, func([]byte, int) error { return nil }); why != "a record that fails its checksum" {
		t.Errorf("legacy scan of a bound record: %q", why)
	}
}

// A record too big for a mapped file goes to a file of its own, written
// by write(2); the next goes to a mapped file again, and a crash replays
// both.
func TestWALHugeRecord(t *testing.T) {
	dir := t.TempDir()
	ctx := t.Context()
	s := openWALStore(t, dir, nil)
	mapped := s.wal.m != nil // false where the file system does not preallocate
	s.holdCommitter()
	ops := make([]walOp, 0, 50000)
	for i := range 50000 {
		ops = append(ops, set(fmt.Appendf(nil, "x/k%06d", i), bytes.Repeat([]byte("v"), 100)))
	}
	if err := s.write(ctx, "huge", ops...); err != nil {
		t.Fatal(err)
	}
	if s.wal.m != nil || s.wal.size <= walFileSize {
		t.Fatalf("the huge record (%d bytes) is in a mapped file", s.wal.size)
	}
	if err := s.write(ctx, "cut", set(cutKey("after"), []byte("small"))); err != nil {
		t.Fatal(err)
	}
	if mapped && s.wal.m == nil {
		t.Errorf("the record after the huge one is not in a mapped file")
	}
	s.crashForTest(t)
	s2 := openWALStore(t, dir, nil)
	defer s2.Close()
	if s2.wal.replayed != 2 {
		t.Errorf("replayed %d records, want 2", s2.wal.replayed)
	}
	if _, err := s2.GetCut(ctx, "k049999"); err != nil {
		t.Error(err)
	}
	if rest, err := s2.GetCut(ctx, "after"); err != nil || string(rest) != "small" {
		t.Errorf("cut after: %q, %v", rest, err)
	}
}

// FuzzScanWAL: whatever a log file holds (a crash, a disk error, a file
// edited by hand), scanning it neither panics nor reads past it; the
// records it takes come one after the other from the start, each whole
// and checked, and decoding one never panics either. Whole records bound
// to the file, followed by anything, are all taken.
func FuzzScanWAL(f *testing.F) {
	rec := boundRecord
	f.Add([]byte{}, false, uint32(1), []byte(nil))
	f.Add(rec(1, "k", "v"), false, uint32(1), make([]byte, 8))
	f.Add(append(rec(2, "a", "b"), rec(2, "c", "d")...), false, uint32(2), []byte{1, 2, 3})
	f.Add(rec(3, "k", "v"), true, uint32(3), rec(4, "x", "y"))
	f.Fuzz(func(t *testing.T, data []byte, legacy bool, id uint32, tail []byte) {
		file := walFile{id: id, legacy: legacy}
		check := func(data []byte) (n int) {
			next := 0
			off, torn, _ := scanWAL(data, file, func(payload []byte, end int) error {
				if end-len(payload)-walHeader != next || end > len(data) {
					t.Fatalf("record ending at %d (%d bytes) does not follow the one ending at %d in %d bytes", end, len(payload), next, len(data))
				}
				next = end
				n++
				_, _, _ = decodeWALPayload(payload)
				return nil
			})
			if off != next || off+torn > len(data) {
				t.Fatalf("scan ended at %d with %d torn bytes, after a record ending at %d, in %d bytes", off, torn, next, len(data))
			}
			return n
		}
		check(data)
		// Records of this file, then anything: every record is taken.
		var whole []byte
		for i := range 3 {
			r := rec(id, fmt.Sprint("k", i), string(data[:min(len(data), 64)]))
			if legacy {
				bindRecord(r, id) // unbound: a bare CRC
			}
			whole = append(whole, r...)
		}
		if n := check(append(whole, tail...)); n < 3 {
			t.Fatalf("took %d of the 3 whole records before %d bytes of tail", n, len(tail))
		}
	})
}
