package statedir

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// ErrNotPrivate is wrapped by the errors of Prepare and Check about a
// folder that is not the user's own.
var ErrNotPrivate = errors.New("not a private folder of this user's")

// ErrLink is wrapped by the errors of OpenFile, Open and ReadFile for a
// name that is a symbolic link.
var ErrLink = errors.New("a symbolic link where foldproxy keeps its own file")

// Prepare makes the folder dir (mode 0700, its parents as os.MkdirAll
// does) when it does not exist, and otherwise checks it: it must be a
// folder (a symbolic link to one is followed) owned by this process's
// user that nobody else can write. A folder of the user's that others may
// read or enter is made 0700: what foldproxy keeps there is for the user
// alone. The errors name the folder and the fix.
func Prepare(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("state folder %s: %w (choose another with --state or foldproxy.stateDir)", dir, err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("state folder %s: %w", dir, err)
	}
	if err := private(dir, fi, "state folder"); err != nil {
		return err
	}
	if fi.Mode().Perm()&0o077 != 0 {
		if err := os.Chmod(dir, fi.Mode().Perm()&0o700); err != nil {
			return fmt.Errorf("state folder %s: making it private to this user (mode 0700): %w", dir, err)
		}
	}
	return nil
}

// Check checks that dir, when it exists, is a folder (not a symbolic link)
// owned by this process's user that nobody else can write; what names it
// in the errors ("Badger's folder"). A folder that does not exist is no
// error: its maker creates it private.
func Check(dir, what string) error {
	fi, err := os.Lstat(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%s %s: %w", what, dir, err)
	}
	if fi.Mode()&os.ModeSymlink != 0 {
		return fmt.Errorf("%s %s is a symbolic link: %w (foldproxy keeps its files in folders of its own; remove the link)", what, dir, ErrNotPrivate)
	}
	return private(dir, fi, what)
}

// private checks that fi, dir's, is a folder of this user's that nobody
// else can write.
func private(dir string, fi os.FileInfo, what string) error {
	if !fi.IsDir() {
		return fmt.Errorf("%s %s is not a folder: %w", what, dir, ErrNotPrivate)
	}
	if uid, me, ok := owner(fi); ok && uid != me {
		return fmt.Errorf("%s %s belongs to uid %d, not to this user (uid %d): %w; "+
			"foldproxy keeps its store, socket and logs only in a folder of its own user's: "+
			"choose another with --state or foldproxy.stateDir, or have the owner remove it", what, dir, uid, me, ErrNotPrivate)
	}
	if perm := fi.Mode().Perm(); perm&0o022 != 0 && !ownerOnlyACL() {
		return fmt.Errorf("%s %s is writable by other users (mode %04o): %w; "+
			"another user could plant a socket or links there: check what it holds, then run chmod 700 %s, "+
			"or choose another with --state or foldproxy.stateDir", what, dir, perm, ErrNotPrivate, dir)
	}
	return nil
}

// OpenFile is os.OpenFile that does not follow a symbolic link as name's
// last element: such a name is an error wrapping ErrLink that names it.
// What it opens must also be a regular file of this user's with no other
// name (hard link): a file someone else left there would otherwise be
// written into or read as foldproxy's own.
func OpenFile(name string, flag int, perm os.FileMode) (*os.File, error) {
	f, err := openNoFollow(name, flag, perm)
	if err != nil {
		if isLink(name) {
			return nil, fmt.Errorf("%s is a symbolic link: %w; foldproxy does not follow links in its state folder: remove it", name, ErrLink)
		}
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%s is not a regular file: %w; remove it", name, ErrNotPrivate)
	}
	if uid, me, links, ok := ownerLinks(fi); ok && (uid != me || links > 1) {
		f.Close()
		if uid != me {
			return nil, fmt.Errorf("%s belongs to uid %d, not to this user (uid %d): %w; check who put it there, then remove it", name, uid, me, ErrNotPrivate)
		}
		return nil, fmt.Errorf("%s has %d names (hard links): %w; foldproxy's files have one: check where the others are, then remove it", name, links, ErrNotPrivate)
	}
	return f, nil
}

// Open is OpenFile for reading.
func Open(name string) (*os.File, error) { return OpenFile(name, os.O_RDONLY, 0) }

// ReadFile is os.ReadFile through Open.
func ReadFile(name string) ([]byte, error) {
	f, err := Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

// isLink reports whether name is a symbolic link.
func isLink(name string) bool {
	fi, err := os.Lstat(name)
	return err == nil && fi.Mode()&os.ModeSymlink != 0
}
