//go:build !unix

package statedir

import (
	"fmt"
	"os"
)

// owner is not known from the mode bits here (Windows keeps owners and
// rights in ACLs, which a user's profile folders restrict already).
func owner(os.FileInfo) (uid, me int, ok bool) { return 0, 0, false }

func ownerLinks(os.FileInfo) (uid, me, links int, ok bool) { return 0, 0, 0, false }

// ownerOnlyACL: the mode bits Go reports on Windows say nothing of other
// users' rights.
func ownerOnlyACL() bool { return true }

// openNoFollow refuses a symbolic link it finds before opening (there is
// no O_NOFOLLOW; creating links there needs a privilege on Windows).
func openNoFollow(name string, flag int, perm os.FileMode) (*os.File, error) {
	if isLink(name) {
		return nil, fmt.Errorf("open %s: %w", name, ErrLink)
	}
	return os.OpenFile(name, flag, perm)
}
