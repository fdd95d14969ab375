//go:build unix

package statedir

import (
	"os"
	"syscall"
)

// owner returns the uid owning fi and this process's.
func owner(fi os.FileInfo) (uid, me int, ok bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0, false
	}
	return int(st.Uid), os.Getuid(), true
}

// ownerLinks returns the uid owning fi, this process's, and fi's number of
// names.
func ownerLinks(fi os.FileInfo) (uid, me, links int, ok bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0, 0, false
	}
	return int(st.Uid), os.Getuid(), int(st.Nlink), true
}

// ownerOnlyACL reports whether the mode bits say nothing of who else may
// write (they do on unix).
func ownerOnlyACL() bool { return false }

func openNoFollow(name string, flag int, perm os.FileMode) (*os.File, error) {
	return os.OpenFile(name, flag|syscall.O_NOFOLLOW, perm)
}
