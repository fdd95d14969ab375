package store

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// openBadger opens a Badger store in dir, closing it at the end of the test.
func openBadgerT(t testing.TB, dir string) *BadgerStore {
	t.Helper()
	s, err := OpenBadger(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// openBadgerNoFsyncT opens a store as serve does by default (fold.fsync
// false).
func openBadgerNoFsyncT(t testing.TB, dir string) *BadgerStore {
	t.Helper()
	s, err := OpenBadgerFsync(dir, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// The Badger store keeps everything across a close and reopen, reads it
// back read-only, and refuses a second writer.
func TestBadgerReopen(t *testing.T) {
	dir := t.TempDir()
	ctx := t.Context()
	s := openBadgerT(t, dir)
	if _, err := OpenBadger(dir, nil); err == nil {
		t.Fatalf("a second writer opened the store")
	}
	if err := s.PutBranch(ctx, &Branch{ID: "b-1", Session: "s", Status: StatusActive}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendCall(ctx, "b-1", &CallRecord{Result: "r1"}); err != nil {
		t.Fatal(err)
	}
	large := bytes.Repeat([]byte("0123456789abcdef"), 64<<10) // 1 MiB: goes to the value log
	if err := s.PutCut(ctx, "b-1~aa", large); err != nil {
		t.Fatal(err)
	}
	if err := s.PutSession(ctx, &SessionRecord{ID: "s"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.PutSession(ctx, &SessionRecord{ID: "t"}); !errors.Is(err, ErrStoreClosed) {
		t.Errorf("write after close: %v", err)
	}

	ro, err := OpenBadgerReadOnly(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := ro.GetBranch(ctx, "b-1"); err != nil || b.Status != StatusActive {
		t.Errorf("read-only GetBranch: %v, %v", b, err)
	}
	if got, err := ro.GetCut(ctx, "b-1~aa"); err != nil || !bytes.Equal(got, large) {
		t.Errorf("read-only GetCut: %d bytes, %v", len(got), err)
	}
	if err := ro.PutSession(ctx, &SessionRecord{ID: "t"}); err == nil || !strings.Contains(err.Error(), "read-only") {
		t.Errorf("read-only write: %v", err)
	}
	if err := ro.Close(); err != nil {
		t.Fatal(err)
	}

	s = openBadgerT(t, dir)
	defer s.Close()
	if seq, err := s.AppendCall(ctx, "b-1", &CallRecord{Result: "r2"}); err != nil || seq != 2 {
		t.Errorf("append after reopen: seq %d, %v; want 2", seq, err)
	}
	if rec, err := s.GetSession(ctx, "s"); err != nil || rec.ID != "s" {
		t.Errorf("session after reopen: %v, %v", rec, err)
	}
}
