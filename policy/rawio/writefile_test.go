package rawio

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// TestWriteFile appends to a regular file as f.Write does, and a write the
// file refuses is an error naming the file.
func TestWriteFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"first record\n", "", "second record\n"} {
		if n, err := WriteFile(f, []byte(s)); err != nil || n != len(s) {
			t.Fatalf("WriteFile(%q) = %d, %v", s, n, err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(path); string(got) != "first record\nsecond record\n" {
		t.Errorf("file holds %q", got)
	}

	ro, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	n, err := WriteFile(ro, []byte("x"))
	var pe *fs.PathError
	if n != 0 || !errors.As(err, &pe) || pe.Path != path {
		t.Errorf("WriteFile on a read-only file = %d, %v; want an error naming %s", n, err, path)
	}
}
