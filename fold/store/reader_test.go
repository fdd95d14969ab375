package store

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// copyDir copies the files of dir into a new folder: taken while a store
// is open, it is what kill -9 leaves on disk (every write is in the files
// before it returns).
func copyDir(t *testing.T, dir string) string {
	t.Helper()
	out := t.TempDir()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.IsDir() {
			continue
		}
		src, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		dst, err := os.Create(filepath.Join(out, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(dst, src); err != nil {
			t.Fatal(err)
		}
		src.Close()
		if err := dst.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// TestOpenBadgerReader: a store that a live process holds is refused with
// ErrStoreBusy naming the process; one left open by a process that is gone
// (which a read-only open refuses) is recovered, read, and left closed
// cleanly; nothing is written through the reader.
func TestOpenBadgerReader(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	live, err := OpenBadgerWith(dir, nil, BadgerOptions{MinFreeBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	want := &Branch{ID: "b-1", Session: "s1", Parent: "root-s1", Depth: 1, Status: StatusActive, Budget: 500, Used: 123, Created: time.Unix(1, 0).UTC()}
	if err := live.PutBranch(ctx, want); err != nil {
		t.Fatal(err)
	}

	_, _, err = OpenBadgerReader(dir, nil)
	if !errors.Is(err, ErrStoreBusy) || !strings.Contains(err.Error(), fmt.Sprintf("process %d", os.Getpid())) {
		t.Fatalf("reading a store a live process holds: %v; want ErrStoreBusy naming process %d", err, os.Getpid())
	}

	// A read commits the write-ahead log into Badger and empties it, so
	// the copy below is an image a crash could leave: copied while the
	// committer ran, it could hold Badger's files from before the commit
	// and the log's from after it, which no instant ever had.
	if _, err := live.GetBranch(ctx, want.ID); err != nil {
		t.Fatal(err)
	}
	img := copyDir(t, dir)
	if ro, err := OpenBadgerReadOnly(img, nil); err == nil {
		ro.Close()
		t.Fatal("the crash image opened read-only: the test does not reach the recovery")
	}
	rd, recovered, err := OpenBadgerReader(img, nil)
	if err != nil || !recovered {
		t.Fatalf("OpenBadgerReader(crash image) = recovered %v, %v; want recovered", recovered, err)
	}
	got, err := rd.GetBranch(ctx, "b-1")
	if err != nil || got.Used != want.Used || got.Budget != want.Budget || got.Status != want.Status {
		t.Errorf("the recovered store's branch: %+v, %v; want %+v", got, err, want)
	}
	if err := rd.PutBranch(ctx, want); err == nil {
		t.Error("a write through the reader succeeded")
	}
	if err := rd.Close(); err != nil {
		t.Fatal(err)
	}
	rd, recovered, err = OpenBadgerReader(img, nil)
	if err != nil || recovered {
		t.Fatalf("after the recovery: recovered %v, %v; want a plain read-only open", recovered, err)
	}
	rd.Close()
}
