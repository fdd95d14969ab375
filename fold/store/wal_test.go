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
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	badger "github.com/dgraph-io/badger/v4"
)

// logBuffer is a log sink safe for the committer's goroutine.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func openWALStore(t testing.TB, dir string, logs *logBuffer) *BadgerStore {
	t.Helper()
	var logger *slog.Logger
	if logs != nil {
		logger = slog.New(slog.NewTextHandler(logs, nil))
	}
	s, err := OpenBadgerFsync(dir, logger, false)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// holdCommitter keeps the background committer from committing anything
// until release is called (reads and Close still commit).
func (s *BadgerStore) holdCommitter() (release func()) {
	gate := make(chan struct{})
	s.wal.mu.Lock()
	s.wal.gate = gate
	s.wal.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			s.wal.mu.Lock()
			s.wal.gate = nil
			s.wal.mu.Unlock()
			close(gate)
		})
	}
}

// crashForTest abandons the store as kill -9 would between a write's
// append to the write-ahead log and its commit: nothing pending is
// committed, the log is left as it is, and the database is released so
// that the same process can open it again.
func (s *BadgerStore) crashForTest(t testing.TB) {
	t.Helper()
	w := s.wal
	w.mu.Lock()
	w.crashed, w.closed = true, true
	segs := append(w.old, walSeg{id: w.id, f: w.f, m: w.m})
	if w.spare != nil {
		segs = append(segs, *w.spare)
	}
	w.f, w.m, w.old, w.spare = nil, nil, nil, nil
	w.mu.Unlock()
	w.stopOnce.Do(func() { close(w.stop) })
	<-w.done
	for _, seg := range segs {
		seg.release()
	}
	if err := errors.Join(s.db.Close(), s.arch.close()); err != nil {
		t.Fatal(err)
	}
}

// inBadger reports whether key is committed in Badger itself (not counting
// the write-ahead log), reading the closed store's folder directly.
func inBadger(t *testing.T, dir string, key []byte) bool {
	t.Helper()
	db, err := badger.Open(badger.DefaultOptions(dir).WithReadOnly(true).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	found := false
	err = db.View(func(txn *badger.Txn) error {
		_, err := txn.Get(key)
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		found = err == nil
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

// walBytes returns the number of log files in the store in dir and the
// bytes of their whole records (files are preallocated: their sizes say
// nothing), and checks that each is private.
func walBytes(t *testing.T, dir string) (files int, size int64) {
	t.Helper()
	fs, err := walFiles(filepath.Join(dir, "wal"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fs {
		st, err := os.Stat(walPath(filepath.Join(dir, "wal"), f))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("write-ahead log file %s has mode %v, want 0600", st.Name(), st.Mode().Perm())
		}
	}
	size, err = WALBytes(dir)
	if err != nil {
		t.Fatal(err)
	}
	return len(fs), size
}

// Writes that are in the write-ahead log but not in Badger when the
// process dies (the window issue 13 opened) are there after the next
// open, and the sequence numbers go on from them.
func TestWALReplaysUncommittedWrites(t *testing.T) {
	dir := t.TempDir()
	ctx := t.Context()
	s := openWALStore(t, dir, nil)
	s.holdCommitter()
	// The writes a Manager makes for a branch_create and two charges, the
	// second cut to the budget (a remainder, and the branch forced).
	br := "b-1"
	b0 := &Branch{ID: br, Session: "s1", Parent: "root-s1", Depth: 1, Status: StatusActive, Budget: 1000, Level: "normal", Created: time.Now()}
	if err := s.PutBranch(ctx, b0); err != nil {
		t.Fatal(err)
	}
	// The first write to a branch's calls reads its last sequence number,
	// which commits what is pending; the ones after stay pending.
	if _, err := s.AppendCall(ctx, "b-other", &CallRecord{Result: "small"}); err != nil {
		t.Fatal(err)
	}
	b1 := b0.Clone()
	b1.Used, b1.Calls = 7, 1
	if err := s.Batch(ctx, &Batch{
		Calls:    []BatchCall{{Branch: br, Rec: &CallRecord{Upstream: "up", Method: "tools/call", Name: "read", Result: `{"n":1}`, Tokens: 7}}},
		Branches: []*Branch{b1},
	}); err != nil {
		t.Fatal(err)
	}
	handle := br + "~000000000001"
	b2 := b1.Clone()
	b2.Used, b2.Calls, b2.Status, b2.Reason, b2.Cuts, b2.CutCount = 1000, 2, StatusForced, "budget exhausted", []string{handle}, 1
	if err := s.Batch(ctx, &Batch{
		Cuts:     []BatchCut{{Handle: handle, Rest: []byte("the rest")}},
		Calls:    []BatchCall{{Branch: br, Rec: &CallRecord{Upstream: "up", Method: "tools/call", Name: "read", Result: `{"n":1}`, Tokens: 993, Handle: handle}}},
		Branches: []*Branch{b2},
	}); err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("x", archiveInlineMax+100) // its bytes in the archive files
	seq, err := s.AppendCall(ctx, "b-other", &CallRecord{Result: big})
	if err != nil || seq != 2 {
		t.Fatalf("AppendCall: %d, %v", seq, err)
	}
	if err := s.PutSession(ctx, &SessionRecord{ID: "s2", Transport: "http"}); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteSession(ctx, "s2"); err != nil {
		t.Fatal(err)
	}
	if n := s.wal.npending.Load(); n == 0 {
		t.Fatal("nothing is pending: the committer was not held")
	}
	s.crashForTest(t)

	files, size := walBytes(t, dir)
	if files == 0 || size == 0 {
		t.Fatalf("the write-ahead log is empty after the crash: %d files, %d bytes", files, size)
	}
	if inBadger(t, dir, callKey(br, 1)) || inBadger(t, dir, callKey(br, 2)) || inBadger(t, dir, callKey("b-other", 2)) {
		t.Fatal("the calls are in Badger already: the test did not crash inside the window")
	}
	if _, err := OpenBadgerReadOnly(dir, nil); err == nil || !strings.Contains(err.Error(), "write-ahead log") {
		t.Errorf("a read-only open of a store with an unreplayed log: %v, want an error naming the write-ahead log", err)
	}

	logs := &logBuffer{}
	s2 := openWALStore(t, dir, logs)
	defer s2.Close()
	if !strings.Contains(logs.String(), "replayed the writes left in the write-ahead log") {
		t.Errorf("the replay was not logged: %s", logs)
	}
	calls, err := s2.Calls(ctx, br, 0, 0)
	if err != nil || len(calls) != 2 || calls[0].Tokens != 7 || calls[0].Seq != 1 || calls[1].Seq != 2 || calls[1].Handle == "" {
		t.Fatalf("calls of %s after the restart: %+v, %v", br, calls, err)
	}
	if rest, err := s2.GetCut(ctx, calls[1].Handle); err != nil || string(rest) != "the rest" {
		t.Errorf("cut %s after the restart: %q, %v", calls[1].Handle, rest, err)
	}
	b, err := s2.GetBranch(ctx, br)
	if err != nil || b.Status != StatusForced || b.Calls != 2 || b.Used != 1000 {
		t.Errorf("branch after the restart: %+v, %v", b, err)
	}
	other, err := s2.Calls(ctx, "b-other", 0, 0)
	if err != nil || len(other) != 2 || other[1].Result != big {
		t.Errorf("archived call after the restart: %d calls, %v", len(other), err)
	}
	if _, err := s2.GetSession(ctx, "s2"); !errors.Is(err, ErrSessionNotFound) {
		t.Errorf("a session deleted before the crash: %v", err)
	}
	if seq, err := s2.AppendCall(ctx, br, &CallRecord{Result: "late"}); err != nil || seq != 3 {
		t.Errorf("the next call of %s: seq %d, %v; want 3", br, seq, err)
	}
	// The replayed log is gone; a second restart replays nothing.
	if err := s2.Close(); err != nil {
		t.Fatal(err)
	}
	if files, size := walBytes(t, dir); files != 0 || size != 0 {
		t.Errorf("after a clean close: %d log files, %d bytes", files, size)
	}
	s3, err := OpenBadgerReadOnly(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s3.Close()
	if calls, err := s3.Calls(ctx, br, 0, 0); err != nil || len(calls) != 3 {
		t.Errorf("read-only after the clean close: %d calls, %v", len(calls), err)
	}
}

// A record cut short by the crash (never acknowledged) is dropped with a
// log line; the records before it are replayed.
func TestWALTornTailDropped(t *testing.T) {
	for _, tear := range []struct {
		name string
		tail func(rec []byte) []byte
	}{
		{"header cut short", func(rec []byte) []byte { return rec[:5] }},
		{"payload cut short", func(rec []byte) []byte { return rec[:len(rec)-3] }},
		{"bad checksum", func(rec []byte) []byte {
			r := bytes.Clone(rec)
			r[len(r)-1] ^= 0xff
			return r
		}},
		{"a record of another file", func(rec []byte) []byte {
			// Whole, but checked with the number of another file: what
			// a reused file held before, were its zero header lost.
			r := bytes.Clone(rec)
			bindRecord(r, 1)
			return r
		}},
	} {
		t.Run(tear.name, func(t *testing.T) {
			dir := t.TempDir()
			ctx := t.Context()
			s := openWALStore(t, dir, nil)
			s.holdCommitter()
			for i := 1; i <= 3; i++ {
				if _, err := s.AppendCall(ctx, "b-1", &CallRecord{Result: fmt.Sprint("result ", i)}); err != nil {
					t.Fatal(err)
				}
			}
			path, id, end := s.wal.path(s.wal.id), s.wal.id, s.wal.size
			s.crashForTest(t)
			bp, _ := encodeWALRecord(nil, []walOp{set(callKey("b-1", 4), []byte(`{"seq":4,"result":"torn"}`))})
			rec := *bp
			bindRecord(rec, id)
			f, err := os.OpenFile(path, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteAt(tear.tail(rec), end); err != nil {
				t.Fatal(err)
			}
			f.Close()

			logs := &logBuffer{}
			s2 := openWALStore(t, dir, logs)
			defer s2.Close()
			if !strings.Contains(logs.String(), "dropping the torn end of the write-ahead log") {
				t.Errorf("the torn record was not logged: %s", logs)
			}
			calls, err := s2.Calls(ctx, "b-1", 0, 0)
			if err != nil || len(calls) != 3 || calls[2].Result != "result 3" {
				t.Fatalf("calls after the restart: %+v, %v; want the 3 whole records", calls, err)
			}
			if seq, err := s2.AppendCall(ctx, "b-1", &CallRecord{Result: "next"}); err != nil || seq != 4 {
				t.Errorf("next seq %d, %v; want 4", seq, err)
			}
		})
	}
}

// Every read commits what is pending first: with the background committer
// held, a write is still seen by the next read.
func TestWALReadsSeeWrites(t *testing.T) {
	ctx := t.Context()
	s := openWALStore(t, t.TempDir(), nil)
	defer s.Close()
	release := s.holdCommitter()
	defer release()
	if err := s.PutBranch(ctx, &Branch{ID: "b-1", Session: "s", Status: StatusActive}); err != nil {
		t.Fatal(err)
	}
	if b, err := s.GetBranch(ctx, "b-1"); err != nil || b.ID != "b-1" {
		t.Fatalf("GetBranch after PutBranch: %v, %v", b, err)
	}
	if err := s.Batch(ctx, &Batch{
		Cuts:     []BatchCut{{Handle: "b-1~01", Rest: []byte("rest")}},
		Calls:    []BatchCall{{Branch: "b-1", Rec: &CallRecord{Result: "r"}}},
		Branches: []*Branch{{ID: "b-1", Session: "s", Status: StatusActive, Used: 9}},
	}); err != nil {
		t.Fatal(err)
	}
	if bs, err := s.Branches(ctx, "s"); err != nil || len(bs) != 1 || bs[0].Used != 9 {
		t.Errorf("Branches: %v, %v", bs, err)
	}
	if rest, err := s.GetCut(ctx, "b-1~01"); err != nil || string(rest) != "rest" {
		t.Errorf("GetCut: %q, %v", rest, err)
	}
	if calls, err := s.Calls(ctx, "b-1", 0, 0); err != nil || len(calls) != 1 {
		t.Errorf("Calls: %v, %v", calls, err)
	}
	if err := s.PutSession(ctx, &SessionRecord{ID: "s"}); err != nil {
		t.Fatal(err)
	}
	if ss, err := s.Sessions(ctx); err != nil || len(ss) != 1 {
		t.Errorf("Sessions: %v, %v", ss, err)
	}
	if n := s.wal.npending.Load(); n != 0 {
		t.Errorf("%d records pending after the reads", n)
	}
}

// Close commits what the held committer had not, and leaves no log: the
// store then opens read-only (which refuses an unreplayed log) with every
// write in it.
func TestWALCloseDrains(t *testing.T) {
	dir := t.TempDir()
	ctx := t.Context()
	s := openWALStore(t, dir, nil)
	s.holdCommitter()
	for i := range 20 {
		if err := s.PutBranch(ctx, &Branch{ID: fmt.Sprint("b-", i), Session: "s", Status: StatusActive}); err != nil {
			t.Fatal(err)
		}
	}
	if s.wal.npending.Load() != 20 {
		t.Fatalf("%d pending, want 20", s.wal.npending.Load())
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.PutBranch(ctx, &Branch{ID: "late", Session: "s"}); !errors.Is(err, ErrStoreClosed) {
		t.Errorf("a write after Close: %v, want ErrStoreClosed", err)
	}
	if files, size := walBytes(t, dir); files != 0 || size != 0 {
		t.Errorf("after Close: %d log files, %d bytes", files, size)
	}
	if !inBadger(t, dir, branchKey("b-19")) {
		t.Fatal("the last write is not in Badger after Close")
	}
	ro, err := OpenBadgerReadOnly(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if bs, err := ro.Branches(ctx, "s"); err != nil || len(bs) != 20 {
		t.Errorf("after Close: %d branches, %v", len(bs), err)
	}
}

// A commit that fails in the background is logged, not silent: the next
// write retries it and fails with the error (ErrStoreFull when the disk is
// full) and writes nothing; once the commit goes through, nothing written
// before is lost.
func TestWALCommitFailure(t *testing.T) {
	dir := t.TempDir()
	ctx := t.Context()
	logs := &logBuffer{}
	s := openWALStore(t, dir, logs)
	defer s.Close()
	release := s.holdCommitter()
	defer release()
	if err := s.PutBranch(ctx, &Branch{ID: "a", Session: "s"}); err != nil {
		t.Fatal(err)
	}
	full := fmt.Errorf("write value log: %w", syscall.ENOSPC)
	s.wal.mu.Lock()
	s.wal.failing = func() error { return full }
	s.wal.mu.Unlock()
	if _, err := s.GetBranch(ctx, "a"); !errors.Is(err, ErrStoreFull) {
		t.Errorf("a read while the commit fails: %v, want ErrStoreFull", err)
	}
	if !strings.Contains(logs.String(), "committing writes to the store failed") {
		t.Errorf("the failed commit was not logged: %s", logs)
	}
	err := s.PutBranch(ctx, &Branch{ID: "b", Session: "s"})
	if !errors.Is(err, ErrStoreFull) || !strings.Contains(err.Error(), "could not be committed") {
		t.Errorf("the write after a failed commit: %v, want ErrStoreFull saying the earlier writes could not be committed", err)
	}
	s.wal.mu.Lock()
	s.wal.failing = nil
	s.wal.mu.Unlock()
	if err := s.PutBranch(ctx, &Branch{ID: "c", Session: "s"}); err != nil {
		t.Fatalf("a write once commits go through again: %v", err)
	}
	bs, err := s.Branches(ctx, "s")
	if err != nil || len(bs) != 2 || bs[0].ID != "a" || bs[1].ID != "c" {
		t.Errorf("branches: %v, %v; want a and c (b was refused)", bs, err)
	}
}

// A log that is never empty (the committer behind a steady load) goes on
// in a new file past walRotateSize, and the files all in Badger are
// removed.
func TestWALRotates(t *testing.T) {
	dir := t.TempDir()
	ctx := t.Context()
	s := openWALStore(t, dir, nil)
	defer s.Close()
	release := s.holdCommitter()
	val := bytes.Repeat([]byte("v"), 3000)
	n := walRotateSize/len(val) + 10
	for i := range n {
		// Inline in the log (PutCut moves a remainder this big to the
		// archive files).
		if err := s.write(ctx, "cut", set(cutKey(fmt.Sprint("h", i)), val)); err != nil {
			t.Fatal(err)
		}
	}
	if files, _ := walBytes(t, dir); files != 2 {
		t.Fatalf("%d log files after %d bytes, want 2", files, n*len(val))
	}
	if s.wal.m == nil {
		t.Skip("log files are mapped, and kept for reuse, on Linux only")
	}
	first := s.wal.path(s.wal.id - 1)
	st1, err := os.Stat(first)
	if err != nil {
		t.Fatal(err)
	}
	release()
	if _, err := s.GetCut(ctx, "h0"); err != nil { // commits everything
		t.Fatal(err)
	}
	// The first file is all in Badger: kept, mapped, as the next one.
	if files, _ := walBytes(t, dir); files != 2 {
		t.Fatalf("after the commit: %d log files; want the current one and the first kept as the next", files)
	}
	if id, ok := s.wal.spareID(); !ok || id != s.wal.id-1 {
		t.Fatalf("after the commit: spare %d (%v); want file %d kept as the next", id, ok, s.wal.id-1)
	}
	release = s.holdCommitter() // nothing is trimmed, so no spare is kept again meanwhile
	for i := range n {
		if err := s.write(ctx, "cut", set(cutKey(fmt.Sprint("g", i)), val)); err != nil {
			t.Fatal(err)
		}
	}
	// The second rotation took the spare: renamed, not a new file.
	if _, ok := s.wal.spareID(); ok {
		t.Errorf("the spare was not taken by the next rotation")
	}
	release()
	st3, err := os.Stat(s.wal.path(s.wal.id))
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(st1, st3) {
		t.Errorf("file %d is a new file, not the first one reused", s.wal.id)
	}
	if _, err := os.Stat(first); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the reused file is still under its first name: %v", err)
	}
	for _, k := range []string{"h0", fmt.Sprint("h", n-1), "g0", fmt.Sprint("g", n-1)} {
		if rest, err := s.GetCut(ctx, k); err != nil || !bytes.Equal(rest, val) {
			t.Errorf("cut %s: %d bytes, %v", k, len(rest), err)
		}
	}
	if files, _ := walBytes(t, dir); files > 2 {
		t.Errorf("%d log files after the second rotation's commit, want at most 2", files)
	}
}

// The log is not emptied after a commit: an open replays only the records
// that are not in Badger yet (exactly those, each once), the ones a crash
// left pending, and skips those committed before.
func TestWALReplaysFromCommittedPosition(t *testing.T) {
	dir := t.TempDir()
	ctx := t.Context()
	s := openWALStore(t, dir, nil)
	for i := range 3 { // committed, each by the read after it
		if err := s.PutSession(ctx, &SessionRecord{ID: fmt.Sprint("c", i), Transport: "stdio"}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.GetSession(ctx, fmt.Sprint("c", i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.DeleteSession(ctx, "c0"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Sessions(ctx); err != nil { // commits the delete
		t.Fatal(err)
	}
	s.holdCommitter()
	for i := range 2 { // pending at the crash
		if err := s.PutSession(ctx, &SessionRecord{ID: fmt.Sprint("p", i), Transport: "stdio"}); err != nil {
			t.Fatal(err)
		}
	}
	s.crashForTest(t)
	if _, size := walBytes(t, dir); size == 0 {
		t.Fatal("the write-ahead log was emptied")
	}

	s2 := openWALStore(t, dir, nil)
	if s2.wal.replayed != 2 || s2.wal.skipped != 4 {
		t.Errorf("the open replayed %d records and skipped %d; want the 2 pending replayed, the 4 committed skipped", s2.wal.replayed, s2.wal.skipped)
	}
	got := sessionIDs(t, s2)
	if want := "c1 c2 p0 p1"; got != want {
		t.Errorf("sessions after the restart: %s; want %s", got, want)
	}
	// Committed, then a crash: nothing to replay.
	if err := s2.PutSession(ctx, &SessionRecord{ID: "q", Transport: "stdio"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s2.GetSession(ctx, "q"); err != nil {
		t.Fatal(err)
	}
	s2.crashForTest(t)
	s3 := openWALStore(t, dir, nil)
	if s3.wal.replayed != 0 || s3.wal.skipped != 1 {
		t.Errorf("the second open replayed %d records and skipped %d; want 0 and 1", s3.wal.replayed, s3.wal.skipped)
	}
	if err := s3.Close(); err != nil {
		t.Fatal(err)
	}
	// A clean close leaves no log and no position.
	if files, _ := walBytes(t, dir); files != 0 {
		t.Errorf("%d log files after a clean close", files)
	}
	s4 := openWALStore(t, dir, nil)
	defer s4.Close()
	if p, err := s4.readApplied(); err != nil || p != (walPos{}) {
		t.Errorf("the position after a clean close: %+v, %v; want none", p, err)
	}
	if got, want := sessionIDs(t, s4), "c1 c2 p0 p1 q"; got != want {
		t.Errorf("sessions after a clean close: %s; want %s", got, want)
	}
}

// New log files are numbered after the file the committed position names,
// even when no file is left: a record of a new file is never taken for
// one already in Badger.
func TestWALNumbersAfterPosition(t *testing.T) {
	dir := t.TempDir()
	ctx := t.Context()
	s := openWALStore(t, dir, nil)
	if err := s.db.Update(func(txn *badger.Txn) error {
		return txn.Set(walAppliedKey, walPos{file: 50, off: 1 << 20}.encode())
	}); err != nil {
		t.Fatal(err)
	}
	s.crashForTest(t)
	s2 := openWALStore(t, dir, nil)
	if s2.wal.id <= 50 {
		t.Errorf("the log file after a position in file 50 is number %d", s2.wal.id)
	}
	s2.holdCommitter()
	if err := s2.PutSession(ctx, &SessionRecord{ID: "p", Transport: "stdio"}); err != nil {
		t.Fatal(err)
	}
	s2.crashForTest(t)
	s3 := openWALStore(t, dir, nil)
	defer s3.Close()
	if s3.wal.replayed != 1 {
		t.Errorf("the open replayed %d records; want 1", s3.wal.replayed)
	}
	if _, err := s3.GetSession(ctx, "p"); err != nil {
		t.Errorf("the pending write was skipped: %v", err)
	}
}

// The bytes of a large result travel in the write-ahead log record: the
// reply path writes them once, the committer writes them to the archive
// files before it commits their reference, and an open writes those of the
// records a crash left pending.
func TestWALCarriesArchiveBytes(t *testing.T) {
	dir := t.TempDir()
	ctx := t.Context()
	s := openWALStore(t, dir, nil)
	s.holdCommitter() // reads commit
	big := bigResult(5000, "one")
	if _, err := s.AppendCall(ctx, "b-1", &CallRecord{Result: big}); err != nil {
		t.Fatal(err)
	}
	segSize := func() int64 {
		t.Helper()
		st, err := os.Stat(filepath.Join(dir, "archive", "00000001.seg"))
		if errors.Is(err, os.ErrNotExist) {
			return 0
		}
		if err != nil {
			t.Fatal(err)
		}
		return st.Size()
	}
	if n := segSize(); n != 0 {
		t.Errorf("the archive holds %d bytes before the commit; want them in the log only", n)
	}
	if calls, err := s.Calls(ctx, "b-1", 0, 0); err != nil || len(calls) != 1 || calls[0].Result != big {
		t.Fatalf("calls: %d, %v", len(calls), err)
	}
	if n := segSize(); n != int64(len(big)) {
		t.Errorf("the archive holds %d bytes after the commit; want %d", n, len(big))
	}
	two, rest := bigResult(7000, "two"), bytes.Repeat([]byte("rest \x00"), 700)
	if err := s.Batch(ctx, &Batch{Calls: []BatchCall{{Branch: "b-1", Rec: &CallRecord{Result: two}}}, Cuts: []BatchCut{{Handle: "b-1~h", Rest: rest}}}); err != nil {
		t.Fatal(err)
	}
	s.crashForTest(t)
	if n := segSize(); n != int64(len(big)) {
		t.Errorf("the archive holds %d bytes after the crash; want the first result's %d only", n, len(big))
	}
	s2 := openWALStore(t, dir, nil)
	defer s2.Close()
	if s2.wal.replayed != 1 {
		t.Errorf("the open replayed %d records; want 1", s2.wal.replayed)
	}
	calls, err := s2.Calls(ctx, "b-1", 0, 0)
	if err != nil || len(calls) != 2 || calls[0].Result != big || calls[1].Result != two {
		t.Fatalf("calls after the restart: %d, %v", len(calls), err)
	}
	if got, err := s2.GetCut(ctx, "b-1~h"); err != nil || !bytes.Equal(got, rest) {
		t.Errorf("cut after the restart: %d bytes, %v", len(got), err)
	}
	if n, want := segSize(), int64(len(big)+len(two)+len(rest)); n != want {
		t.Errorf("the archive holds %d bytes after the replay; want %d", n, want)
	}
	// New bytes go after the replayed ones.
	three := bigResult(3000, "three")
	if _, err := s2.AppendCall(ctx, "b-1", &CallRecord{Result: three}); err != nil {
		t.Fatal(err)
	}
	if calls, err := s2.Calls(ctx, "b-1", 2, 0); err != nil || len(calls) != 2 || calls[0].Result != two || calls[1].Result != three {
		t.Fatalf("calls after a write past the replay: %d, %v", len(calls), err)
	}
}

// sessionIDs lists the ids of s's sessions, space-separated.
func sessionIDs(t *testing.T, s *BadgerStore) string {
	t.Helper()
	recs, err := s.Sessions(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, len(recs))
	for i, r := range recs {
		ids[i] = r.ID
	}
	return strings.Join(ids, " ")
}

// A record bigger than one Badger transaction (a large prune) is applied
// across several.
func TestWALApplyLargeRecord(t *testing.T) {
	ctx := context.Background()
	s := openWALStore(t, t.TempDir(), nil)
	defer s.Close()
	ops := make([]walOp, 0, 20000)
	for i := range 20000 {
		ops = append(ops, set(fmt.Appendf(nil, "x/k%06d", i), bytes.Repeat([]byte("v"), 100)))
	}
	if err := s.write(ctx, "large", ops...); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetCut(ctx, "k019999"); err != nil {
		t.Fatal(err)
	}
}

// The first call of a branch takes its sequence number without committing
// what is pending (no Badger commit on the reply path), and still counts
// the calls that are only in the write-ahead log and those in Badger.
func TestWALFirstCallNoCommit(t *testing.T) {
	ctx := t.Context()
	s := openWALStore(t, t.TempDir(), nil)
	defer s.Close()
	release := s.holdCommitter()
	defer release()
	// b-1's first two calls are in Badger, the third only in the log.
	for range 2 {
		if _, err := s.AppendCall(ctx, "b-1", &CallRecord{Result: "in badger"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.barrier(); err != nil { // commits, held committer or not
		t.Fatal(err)
	}
	if _, err := s.AppendCall(ctx, "b-1", &CallRecord{Result: "in the log"}); err != nil {
		t.Fatal(err)
	}
	// A new branch's first call, and b-1's next one as a store that has
	// not seen it yet (a restart's, or one after a prune) numbers it.
	if seq, err := s.AppendCall(ctx, "b-2", &CallRecord{Result: "first"}); err != nil || seq != 1 {
		t.Fatalf("first call of a new branch: seq %d, %v; want 1", seq, err)
	}
	s.mu.Lock()
	clear(s.seq)
	s.mu.Unlock()
	if seq, err := s.AppendCall(ctx, "b-1", &CallRecord{Result: "fourth"}); err != nil || seq != 4 {
		t.Fatalf("next call of b-1 with its last call only in the log: seq %d, %v; want 4", seq, err)
	}
	s.mu.Lock()
	clear(s.seq)
	s.mu.Unlock()
	if seq, err := s.AppendCall(ctx, "b-2", &CallRecord{Result: "second"}); err != nil || seq != 2 {
		t.Fatalf("second call of b-2 with its first only in the log: seq %d, %v; want 2", seq, err)
	}
	if n := s.wal.npending.Load(); n != 4 {
		t.Errorf("%d records pending; want the 4 appended while the committer was held: numbering a call committed them", n)
	}
	release()
	if calls, err := s.Calls(ctx, "b-1", 0, 0); err != nil || len(calls) != 4 || calls[3].Result != "fourth" {
		t.Errorf("calls of b-1: %d, %v", len(calls), err)
	}
}

// The background committer commits a group, not each write: writes made
// within walGroupDelay of the group's first one reach Badger in one
// commit, walGroupDelay after it; a group that fills up (walGroupBytes)
// is committed without waiting; and nothing waits on it (the writes are
// pending, not committed, when they return). Time is synctest's.
func TestWALCommitsGroups(t *testing.T) {
	dir := t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		s := openWALStore(t, dir, nil)
		defer s.Close()
		state := func() (pending int64, commits int) {
			synctest.Wait()
			s.wal.mu.Lock()
			defer s.wal.mu.Unlock()
			return s.wal.npending.Load(), s.wal.commits
		}
		for i := range 20 {
			if err := s.PutSession(ctx, &SessionRecord{ID: fmt.Sprintf("s%d", i)}); err != nil {
				t.Fatal(err)
			}
			time.Sleep(walGroupDelay / 40)
		}
		if p, c := state(); p != 20 || c != 0 {
			t.Fatalf("after 20 writes within the group's delay: %d pending, %d commits; want 20 and 0", p, c)
		}
		time.Sleep(walGroupDelay / 2)
		if p, c := state(); p != 0 || c != 1 {
			t.Fatalf("after the group's delay: %d pending, %d commits; want 0 and 1", p, c)
		}
		// A group that reaches walGroupBytes is committed at once.
		big := bytes.Repeat([]byte("r"), walGroupBytes/4)
		for i := range 4 {
			if err := s.PutCut(ctx, fmt.Sprintf("x%d", i), big); err != nil {
				t.Fatal(err)
			}
		}
		if p, c := state(); p != 0 || c != 2 {
			t.Fatalf("after a full group: %d pending, %d commits; want 0 and 2", p, c)
		}
		if ss, err := s.Sessions(ctx); err != nil || len(ss) != 20 {
			t.Fatalf("Sessions: %d, %v", len(ss), err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	})
}

// The buffers of committed records are used again (walBufPools): a result
// archived before a commit reads back whole after later records have taken
// its record's buffer, and those later records read back whole too.
func TestWALRecycledBuffersKeepArchives(t *testing.T) {
	ctx := t.Context()
	s := openWALStore(t, t.TempDir(), nil)
	defer s.Close()
	s.holdCommitter() // reads commit
	var want []string
	for i := range 40 {
		// Sizes across several buffer classes, the same class again and again.
		r := bigResult(3000+(i%5)*9000, fmt.Sprint("result ", i))
		want = append(want, r)
		if _, err := s.AppendCall(ctx, "b-1", &CallRecord{Result: r}); err != nil {
			t.Fatal(err)
		}
		if i%3 == 2 {
			// A read commits what is pending, and its buffers go back.
			if _, err := s.Calls(ctx, "b-1", 0, 1); err != nil {
				t.Fatal(err)
			}
		}
	}
	calls, err := s.Calls(ctx, "b-1", 0, 0)
	if err != nil || len(calls) != len(want) {
		t.Fatalf("calls: %d, %v", len(calls), err)
	}
	for i, c := range calls {
		if c.Result != want[i] {
			t.Errorf("call %d: the archived result changed (%d bytes, want %d)", i+1, len(c.Result), len(want[i]))
		}
	}
}

func TestWALBufClasses(t *testing.T) {
	for _, tc := range []struct{ n, class int }{
		{0, 0}, {1, 0}, {walBufMin, 0}, {walBufMin + 1, 1}, {2 * walBufMin, 1}, {2*walBufMin + 1, 2},
		{walBufMin << (walBufClasses - 1), walBufClasses - 1}, {walBufMin<<(walBufClasses-1) + 1, walBufClasses},
	} {
		if got := walBufClass(tc.n); got != tc.class {
			t.Errorf("walBufClass(%d) = %d, want %d", tc.n, got, tc.class)
		}
		bp := getWALBuf(tc.n)
		if len(*bp) != 0 || cap(*bp) < tc.n {
			t.Errorf("getWALBuf(%d): len %d cap %d", tc.n, len(*bp), cap(*bp))
		}
		if tc.class < walBufClasses && cap(*bp) != walBufMin<<tc.class {
			t.Errorf("getWALBuf(%d): cap %d, want the class's %d", tc.n, cap(*bp), walBufMin<<tc.class)
		}
		*bp = append(*bp, 1, 2, 3)
		putWALBuf(bp)
	}
	// A buffer of no class is not kept.
	odd := make([]byte, 0, walBufMin+7)
	putWALBuf(&odd)
}
