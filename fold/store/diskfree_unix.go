//go:build unix && !(linux && (amd64 || arm64))

package store

import "golang.org/x/sys/unix"

// freeBytes reports the bytes an unprivileged writer may still use on the
// file system holding dir.
func freeBytes(dir string) (int64, bool) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, false
	}
	return int64(st.Bavail) * int64(st.Bsize), true //nolint:unconvert // field types differ by OS
}
