package store

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// bigResult is a result over archiveInlineMax with bytes that JSON would
// escape or rewrite: the archive must give back exactly these.
func bigResult(n int, tag string) string {
	var b strings.Builder
	b.WriteString(`{"content":[{"type":"text","text":"` + tag + ` <&> \u00e9 9007199254740993 `)
	for b.Len() < n {
		b.WriteString("\\\"line\\\"\\n\t ")
	}
	b.WriteString(`"}]}`)
	return b.String()
}

// Results and remainders over archiveInlineMax live in the archive files, not in
// Badger, and read back byte for byte: through the store that wrote them,
// after a reopen, and through a read-only store (foldproxy report).
func TestBadgerArchiveFiles(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	s := openBadgerT(t, dir)
	small := `{"content":[{"type":"text","text":"ok"}]}`
	big := bigResult(100_000, "big")
	rest := bytes.Repeat([]byte("rest \x00\xff"), 3000)
	if _, err := s.AppendCall(ctx, "b-1", &CallRecord{Name: "small", Result: small}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendCall(ctx, "b-1", &CallRecord{Name: "big", Result: big}); err != nil {
		t.Fatal(err)
	}
	rec := &CallRecord{Name: "batched", Result: bigResult(9000, "batched")}
	if err := s.Batch(ctx, &Batch{Calls: []BatchCall{{Branch: "b-1", Rec: rec}}, Cuts: []BatchCut{{Handle: "b-1~h", Rest: rest}}}); err != nil {
		t.Fatal(err)
	}
	if err := s.barrier(); err != nil { // the committer writes the bytes
		t.Fatal(err)
	}
	segs, err := s.arch.segments()
	if err != nil || len(segs) != 1 {
		t.Fatalf("archive segments %v, %v; want one", segs, err)
	}
	st, err := os.Stat(s.arch.path(segs[0]))
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(len(big) + len(rec.Result) + len(rest)); st.Size() != want {
		t.Fatalf("archive segment holds %d bytes; want the %d of the two large results and the remainder", st.Size(), want)
	}
	check := func(s *BadgerStore, when string) {
		t.Helper()
		calls, err := s.Calls(ctx, "b-1", 0, 0)
		if err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		want := map[string]string{"small": small, "big": big, "batched": rec.Result}
		if len(calls) != len(want) {
			t.Fatalf("%s: %d calls; want %d", when, len(calls), len(want))
		}
		for _, c := range calls {
			if c.Result != want[c.Name] {
				t.Errorf("%s: call %q reads back %d bytes that differ from the %d archived", when, c.Name, len(c.Result), len(want[c.Name]))
			}
		}
		got, err := s.GetCut(ctx, "b-1~h")
		if err != nil || !bytes.Equal(got, rest) {
			t.Errorf("%s: cut reads back %d bytes (%v); want the %d stored", when, len(got), err, len(rest))
		}
	}
	check(s, "open")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openBadgerT(t, dir)
	check(s, "reopened")
	// A write after the reopen appends to the same segment.
	if _, err := s.AppendCall(ctx, "b-2", &CallRecord{Name: "after", Result: bigResult(5000, "after")}); err != nil {
		t.Fatal(err)
	}
	if segs, _ := s.arch.segments(); len(segs) != 1 {
		t.Errorf("after a reopen, segments %v; want the one appended to", segs)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	ro, err := OpenBadgerReadOnly(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	check(ro, "read-only")
}

// Damaged archive bytes are an error that says so, never wrong bytes.
func TestBadgerArchiveDamage(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	s := openBadgerT(t, dir)
	defer s.Close()
	if _, err := s.AppendCall(ctx, "b-1", &CallRecord{Name: "big", Result: bigResult(10_000, "x")}); err != nil {
		t.Fatal(err)
	}
	if err := s.barrier(); err != nil { // the committer writes the bytes
		t.Fatal(err)
	}
	path := s.arch.path(1)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	data[100] ^= 0x20
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Calls(ctx, "b-1", 0, 0); err == nil || !strings.Contains(err.Error(), "checksum") {
		t.Fatalf("reading a damaged archive: %v; want a checksum error", err)
	}
	if err := os.Truncate(path, 50); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Calls(ctx, "b-1", 0, 0); err == nil {
		t.Fatal("reading a truncated archive succeeded")
	}
}

// Bytes appended whose reference was never committed (the process was
// killed between the two) are garbage: they do not disturb later records,
// and Prune removes a segment once nothing points into it, but never the
// segment being appended to.
func TestBadgerArchivePrune(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	s := openBadgerT(t, dir)
	defer s.Close()
	// An orphan append, as kill -9 after the write and before the commit
	// leaves it.
	ref, err := s.arch.append([]byte("orphan bytes"))
	if err != nil {
		t.Fatal(err)
	}
	s.arch.done(ref.Seg)
	old := time.Now().Add(-2 * time.Hour)
	if _, err := s.AppendCall(ctx, "b-1", &CallRecord{Name: "old", Time: old, Result: bigResult(6000, "old")}); err != nil {
		t.Fatal(err)
	}
	// Start a second segment by hand (as a full first one would).
	s.arch.mu.Lock()
	if err := s.arch.openSegmentLocked(2); err != nil {
		s.arch.mu.Unlock()
		t.Fatal(err)
	}
	s.arch.mu.Unlock()
	if _, err := s.AppendCall(ctx, "b-1", &CallRecord{Name: "new", Result: bigResult(6000, "new")}); err != nil {
		t.Fatal(err)
	}
	calls, err := s.Calls(ctx, "b-1", 0, 0)
	if err != nil || len(calls) != 2 || calls[0].Result != bigResult(6000, "old") {
		t.Fatalf("calls before prune: %d, %v", len(calls), err)
	}
	if err := s.Prune(ctx, time.Hour, 0); err != nil {
		t.Fatal(err)
	}
	segs, err := s.arch.segments()
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(segs) != "[2]" {
		t.Fatalf("segments after pruning the only record of segment 1: %v; want [2]", segs)
	}
	calls, err = s.Calls(ctx, "b-1", 0, 0)
	if err != nil || len(calls) != 1 || calls[0].Result != bigResult(6000, "new") {
		t.Fatalf("calls after prune: %d, %v", len(calls), err)
	}
	// Everything pruned: the current segment stays.
	if err := s.Prune(ctx, time.Nanosecond, 0); err != nil {
		t.Fatal(err)
	}
	if segs, _ := s.arch.segments(); fmt.Sprint(segs) != "[2]" {
		t.Fatalf("segments after pruning everything: %v; want the current one, [2]", segs)
	}
	if _, err := os.Stat(filepath.Join(dir, "archive", "00000002.seg")); err != nil {
		t.Fatal(err)
	}
}
