package fold

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A store whose folder was removed while it was open (a test's temporary
// folder removed under a daemon, a user's rm -rf) closes with an error
// naming the folder. Before, Badger's close retried writing its memtable
// into the missing folder once a second, forever, and the process never
// exited.
func TestCloseFolderRemoved(t *testing.T) {
	for _, replaced := range []bool{false, true} {
		t.Run(fmt.Sprint("replaced=", replaced), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "badger")
			ctx := t.Context()
			s := openWALStore(t, dir, nil)
			for i := range 5 {
				if err := s.PutBranch(ctx, &Branch{ID: fmt.Sprint("b-", i), Session: "s", Status: StatusActive}); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := s.Branches(ctx, "s"); err != nil { // commits them to Badger's memtable
				t.Fatal(err)
			}
			if err := os.RemoveAll(dir); err != nil {
				t.Fatal(err)
			}
			if replaced {
				if err := os.Mkdir(dir, 0o700); err != nil {
					t.Fatal(err)
				}
			}
			err := s.Close()
			want := "removed"
			if replaced {
				want = "replaced"
			}
			if err == nil || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), want) {
				t.Fatalf("Close after the folder was %s: %v; want an error naming %s", want, err, dir)
			}
			if err := s.PutBranch(ctx, &Branch{ID: "late", Session: "s"}); !errors.Is(err, ErrStoreClosed) {
				t.Errorf("a write after Close: %v, want ErrStoreClosed", err)
			}
		})
	}
}

// A store whose memtable Badger cannot write while closing (a failing
// disk; here, a folder standing where its next table file goes) closes
// with an error naming the folder instead of hanging, and loses nothing
// that was acknowledged: both the writes already committed to Badger and
// those still pending in the write-ahead log are there when the folder,
// as the process left it, is opened again.
func TestCloseFlushFailsKeepsWrites(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "badger")
	ctx := t.Context()
	s := openWALStore(t, dir, nil)
	for i := range 10 {
		if err := s.PutBranch(ctx, &Branch{ID: fmt.Sprint("b-", i), Session: "s", Status: StatusActive}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Branches(ctx, "s"); err != nil { // the first 10 are committed to Badger
		t.Fatal(err)
	}
	s.holdCommitter()
	for i := 10; i < 20; i++ {
		if err := s.PutBranch(ctx, &Branch{ID: fmt.Sprint("b-", i), Session: "s", Status: StatusActive}); err != nil {
			t.Fatal(err)
		}
	}
	// Folders where the tables Badger's close flushes its memtable into
	// would go: each attempt fails (Badger takes the next number for its
	// retry, a second later), for longer than the test may run.
	var obstacles []string
	for id := 1; id <= 1000; id++ {
		obstacles = append(obstacles, filepath.Join(dir, fmt.Sprintf("%06d.sst", id)))
		if err := os.Mkdir(obstacles[len(obstacles)-1], 0o700); err != nil {
			t.Fatal(err)
		}
	}
	err := s.Close()
	if err == nil || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "could not write") {
		t.Fatalf("Close with a memtable flush failing: %v; want an error naming %s", err, dir)
	}

	// The folder as the process would leave it, exiting now.
	copyDir := filepath.Join(t.TempDir(), "badger")
	copyTree(t, dir, copyDir)
	// Let Badger's own close (still retrying) finish before the test's
	// folder is removed: Badger's Close runs its close once, and a second
	// call returns when that one has.
	for _, o := range obstacles {
		if err := os.Remove(o); err != nil {
			t.Fatal(err)
		}
	}
	s.db.Close()

	s2 := openWALStore(t, copyDir, nil)
	defer s2.Close()
	bs, err := s2.Branches(ctx, "s")
	if err != nil || len(bs) != 20 {
		t.Fatalf("after the failed close: %d branches, %v; want all 20", len(bs), err)
	}
}

// copyTree copies the regular files under src to dst, and the folders
// holding one.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		to := filepath.Join(dst, rel)
		if d.IsDir() {
			return nil
		}
		if err := os.MkdirAll(filepath.Dir(to), 0o700); err != nil {
			return err
		}
		in, err := os.Open(path)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
}
