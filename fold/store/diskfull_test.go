//go:build linux

package store

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// mountTmpfs mounts a tmpfs of size bytes on a fresh folder and unmounts it
// at the end of the test; it skips the test where mounting is not
// permitted (not root, or no CAP_SYS_ADMIN in a container).
func mountTmpfs(t *testing.T, size int64) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "small")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d,mode=0700", size)); err != nil {
		t.Skipf("the full-disk test needs to mount a small tmpfs, which is not permitted here (%v): run it as root on Linux", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// fill leaves about leave bytes free on the file system of dir, with a
// filler file it returns.
func fill(t *testing.T, dir string, leave int64) string {
	t.Helper()
	free, ok := freeBytes(dir)
	if !ok {
		t.Fatal("free space is not measured on this platform")
	}
	path := filepath.Join(dir, fmt.Sprintf("filler-%d", leave))
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := bytes.Repeat([]byte{0xA5}, 1<<20)
	for n := free - leave; n > 0; n -= int64(len(chunk)) {
		if _, err := f.Write(chunk[:min(int64(len(chunk)), n)]); err != nil {
			t.Fatalf("filling %s: %v", dir, err)
		}
	}
	return path
}

// A store on a file system that fills up refuses writes with ErrStoreFull
// and a message naming the folder, never faults (a write into a mapped page
// that tmpfs cannot back is a SIGBUS, which would kill this test), keeps
// serving reads, and takes writes again once space is freed. Opening a
// store on a full file system fails the same way instead of crashing.
func TestBadgerFullDisk(t *testing.T) {
	mnt := mountTmpfs(t, 96<<20)
	ctx := t.Context()
	dir := filepath.Join(mnt, "badger")
	const reserve = 24 << 20
	s, err := OpenBadgerWith(dir, nil, BadgerOptions{MinFreeBytes: reserve})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.PutBranch(ctx, &Branch{ID: "b-1", Session: "s", Status: StatusActive}); err != nil {
		t.Fatal(err)
	}
	// Leave a little more than the reserve, then write until refused: with
	// no check, these writes would run the file system out of space.
	filler := fill(t, mnt, reserve+6<<20)
	big := bytes.Repeat([]byte("x"), 200<<10) // value log
	var refused error
	written := 0
	for i := 0; i < 1000 && refused == nil; i++ {
		var err error
		if i%2 == 0 {
			err = s.PutCut(ctx, fmt.Sprintf("b-1~%d", i), big)
		} else {
			_, err = s.AppendCall(ctx, "b-1", &CallRecord{Result: strings.Repeat("r", 10<<10)})
		}
		if err != nil {
			refused = err
			break
		}
		written++
	}
	if refused == nil {
		t.Fatalf("1000 writes on a nearly full file system were all accepted")
	}
	if !errors.Is(refused, ErrStoreFull) || !strings.Contains(refused.Error(), dir) || !strings.Contains(refused.Error(), "free some space") {
		t.Fatalf("refused write: %v; want ErrStoreFull naming %s and what to do", refused, dir)
	}
	if written == 0 {
		t.Fatalf("no write was accepted before the reserve was reached")
	}
	t.Logf("%d writes accepted, then: %v", written, refused)
	// Reads go on.
	if b, err := s.GetBranch(ctx, "b-1"); err != nil || b.ID != "b-1" {
		t.Fatalf("read on a full disk: %v, %v", b, err)
	}
	if got, err := s.GetCut(ctx, "b-1~0"); err != nil || !bytes.Equal(got, big) {
		t.Fatalf("read back a cut on a full disk: %d bytes, %v", len(got), err)
	}
	// Below the reserve every kind of write is refused the same way.
	filler2 := fill(t, mnt, reserve/2)
	if err := s.PutSession(ctx, &SessionRecord{ID: "s2"}); !errors.Is(err, ErrStoreFull) {
		t.Errorf("PutSession on a full disk: %v", err)
	}
	if err := s.Batch(ctx, &Batch{Branches: []*Branch{{ID: "b-2", Session: "s"}}}); !errors.Is(err, ErrStoreFull) {
		t.Errorf("Batch on a full disk: %v", err)
	}

	// A second store cannot be opened there: refused before Badger maps
	// anything.
	if _, err := OpenBadgerWith(filepath.Join(mnt, "other"), nil, BadgerOptions{MinFreeBytes: reserve}); !errors.Is(err, ErrStoreFull) {
		t.Errorf("opening a store on a full disk: %v; want ErrStoreFull", err)
	}

	// Space freed: writes are accepted again.
	for _, f := range []string{filler, filler2} {
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.PutSession(ctx, &SessionRecord{ID: "s2"}); err != nil {
		t.Fatalf("write after space was freed: %v", err)
	}
}
