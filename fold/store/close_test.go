package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
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
	// Badger's errors, to fail at once (instead of hanging in Close) if
	// its flush failure no longer reads as badgerFlushFailed.
	badgerErrs := make(chan string, 100)
	s, err := OpenBadgerFsync(dir, slog.New(errorsTo(badgerErrs)), false)
	if err != nil {
		t.Fatal(err)
	}
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
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	for err == nil {
		select {
		case err = <-closed:
			if err == nil {
				t.Fatal("Close with a memtable flush failing returned no error")
			}
		case msg := <-badgerErrs:
			if !strings.Contains(msg, badgerFlushFailed) {
				for _, o := range obstacles {
					os.Remove(o)
				}
				<-closed
				t.Fatalf("Badger logged %q while its flush failed, without %q: Close cannot tell; see badgerFlushFailed", msg, badgerFlushFailed)
			}
		}
	}
	if !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "could not write") {
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

// The Badger version whose flushMemtable (db.go) badgerFlushFailed was
// read in. A new version fails TestBadgerFlushFailedText until its text is
// checked again.
const badgerFlushFailedChecked = "v4.9.6"

// Close learns that Badger's memtable flush failed only from Badger's log
// line (see badgerFlushFailed): the line, as Badger's format makes it,
// reaches a Close waiting on it, other errors do not, and the Badger
// version in go.mod is the one the text was read in; its source, when the
// module cache has it, still holds the text.
func TestBadgerFlushFailedText(t *testing.T) {
	const badgerFormat = "error flushing memtable to disk: %v, retrying" // badger v4.9.6 db.go, flushMemtable
	w := &flushWatch{}
	l := badgerLogger{l: slog.New(slog.DiscardHandler), flushes: w}
	l.Errorf(badgerFormat, errors.New("before Close")) // not armed: dropped
	failed := w.arm()
	l.Errorf("while compacting: %v", errors.New("disk"))
	l.Warningf(badgerFormat, errors.New("a warning"))
	select {
	case msg := <-failed:
		t.Fatalf("reported as a failed flush: %q", msg)
	default:
	}
	l.Errorf(badgerFormat+"\n", errors.New("open 000002.sst: is a directory"))
	select {
	case msg := <-failed:
		if !strings.Contains(msg, "000002.sst") {
			t.Errorf("reported %q; want the flush's error in it", msg)
		}
	default:
		t.Fatal("Badger's flush failure line was not reported")
	}

	mod, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	version := ""
	for line := range strings.Lines(string(mod)) {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "github.com/dgraph-io/badger/v4" {
			version = f[1]
		}
	}
	if version != badgerFlushFailedChecked {
		t.Fatalf("go.mod has Badger %q; badgerFlushFailed was read in %s: check that %s's flushMemtable (db.go) still logs %q "+
			"on a failed flush, then set badgerFlushFailedChecked (and this test's badgerFormat)",
			version, badgerFlushFailedChecked, version, badgerFlushFailed)
	}
	out, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		t.Skipf("the Badger source could not be located (go env GOMODCACHE: %v); the version check passed", err)
	}
	src, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(out)), "github.com/dgraph-io/badger/v4@"+version, "db.go"))
	if err != nil {
		t.Skipf("the Badger source is not in the module cache (%v); the version check passed", err)
	}
	if !strings.Contains(string(src), `db.opt.Errorf("`+badgerFormat+`"`) {
		t.Errorf("Badger %s's db.go has no db.opt.Errorf(%q): see badgerFlushFailed", version, badgerFormat)
	}
}

// errorsTo is a slog handler sending the messages of error records to ch
// (dropped when ch is full).
type errorsTo chan string

func (h errorsTo) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelError }
func (h errorsTo) Handle(_ context.Context, r slog.Record) error {
	select {
	case h <- r.Message:
	default:
	}
	return nil
}
func (h errorsTo) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h errorsTo) WithGroup(string) slog.Handler      { return h }

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
