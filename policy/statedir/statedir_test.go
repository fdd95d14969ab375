//go:build unix

package statedir

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPrepareMakesPrivateFolder(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "state")
	if err := Prepare(dir); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("made %v %v, want mode 0700", fi.Mode(), err)
	}
}

// A folder of the user's that others can read becomes 0700: what
// foldproxy keeps there is the user's alone.
func TestPrepareTightensReadableFolder(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := Prepare(dir); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(dir); fi.Mode().Perm() != 0o700 {
		t.Errorf("mode %04o after Prepare, want 0700", fi.Mode().Perm())
	}
}

func TestPrepareRefusesFolderOthersCanWrite(t *testing.T) {
	for _, mode := range []os.FileMode{0o777, 0o770, 0o1777} {
		dir := filepath.Join(t.TempDir(), "state")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, mode); err != nil {
			t.Fatal(err)
		}
		err := Prepare(dir)
		if !errors.Is(err, ErrNotPrivate) || !strings.Contains(err.Error(), "chmod 700 "+dir) {
			t.Errorf("mode %v: %v, want ErrNotPrivate naming the fix", mode, err)
		}
		if fi, _ := os.Stat(dir); fi.Mode().Perm() != mode.Perm() {
			t.Errorf("mode %v: changed to %v; a folder others can write is refused, not changed", mode, fi.Mode())
		}
	}
}

func TestPrepareRefusesAnotherUsersFolder(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to give a folder to another user")
	}
	dir := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, 4242, 4242); err != nil {
		t.Fatal(err)
	}
	if err := Prepare(dir); !errors.Is(err, ErrNotPrivate) || !strings.Contains(err.Error(), "uid 4242") {
		t.Errorf("another user's folder: %v", err)
	}
}

func TestCheckRefusesLink(t *testing.T) {
	base := t.TempDir()
	other := filepath.Join(base, "elsewhere")
	if err := os.Mkdir(other, 0o700); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(base, "badger")
	if err := os.Symlink(other, link); err != nil {
		t.Fatal(err)
	}
	if err := Check(link, "Badger's folder"); !errors.Is(err, ErrNotPrivate) || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("a link: %v", err)
	}
	if err := Check(filepath.Join(base, "missing"), "x"); err != nil {
		t.Errorf("a folder not made yet: %v", err)
	}
	if err := Check(other, "x"); err != nil {
		t.Errorf("a private folder: %v", err)
	}
}

func TestOpenFileRefusesLinks(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	if err := os.WriteFile(victim, []byte("keep me"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "daemon.lock")
	if err := os.Symlink(victim, link); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenFile(link, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600); !errors.Is(err, ErrLink) || !strings.Contains(err.Error(), link) {
		t.Errorf("OpenFile of a link: %v", err)
	}
	if _, err := ReadFile(link); !errors.Is(err, ErrLink) {
		t.Errorf("ReadFile of a link: %v", err)
	}
	// A dangling link: O_CREATE would make its target.
	dangling := filepath.Join(dir, "audit.jsonl")
	if err := os.Symlink(filepath.Join(dir, "made"), dangling); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenFile(dangling, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600); !errors.Is(err, ErrLink) {
		t.Errorf("OpenFile of a dangling link: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "made")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the link's target was made: %v", err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "keep me" {
		t.Errorf("the link's target was changed: %q", b)
	}
	// A hard link to another file: refused.
	hard := filepath.Join(dir, "foldproxy.log")
	if err := os.Link(victim, hard); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenFile(hard, os.O_WRONLY|os.O_APPEND, 0o600); !errors.Is(err, ErrNotPrivate) || !strings.Contains(err.Error(), "hard links") {
		t.Errorf("OpenFile of a hard link: %v", err)
	}
	// A plain file: opened.
	f, err := OpenFile(filepath.Join(dir, "plain"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
}

func TestOpenFileRefusesAnotherUsersFile(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to give a file to another user")
	}
	name := filepath.Join(t.TempDir(), "audit.jsonl")
	if err := os.WriteFile(name, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(name, 4242, 4242); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenFile(name, os.O_WRONLY|os.O_APPEND, 0o600); !errors.Is(err, ErrNotPrivate) || !strings.Contains(err.Error(), "uid 4242") {
		t.Errorf("another user's file: %v", err)
	}
}
