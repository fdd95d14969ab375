//go:build linux && (amd64 || arm64)

package store

import (
	"testing"

	"golang.org/x/sys/unix"
)

// TestFreeBytesRaw checks the raw statfs against x/sys/unix's, and that a
// folder that does not exist is reported as not measured.
func TestFreeBytesRaw(t *testing.T) {
	dir := t.TempDir()
	got, ok := freeBytes(dir)
	if !ok {
		t.Fatalf("freeBytes(%s): not measured", dir)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	want := int64(st.Bavail) * int64(st.Bsize)
	// Other processes write meanwhile: the two agree within a gigabyte.
	if d := got - want; d > 1<<30 || d < -(1<<30) {
		t.Errorf("freeBytes = %d, statfs says %d", got, want)
	}
	if _, ok := freeBytes(dir + "/missing"); ok {
		t.Errorf("freeBytes of a missing folder: measured")
	}
	if _, ok := freeBytes("a\x00b"); ok {
		t.Errorf("freeBytes of a path with a NUL: measured")
	}
}
