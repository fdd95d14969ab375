// Package statedir owns the rules of foldproxy's state folder, where it
// keeps its store, its daemon's socket, lock and log, its audit log and
// its local CA: the folder must be the user's own, and nothing in it may
// lead foldproxy elsewhere.
//
//   - Prepare makes the folder (0700) or checks the one there: it must be
//     a folder owned by the user that nobody else can write (another user
//     could plant a socket that answers as foldproxy, or links that send
//     its writes into their files). A folder of the user's that others can
//     only read is made 0700. Check does the same without making or
//     changing anything, for the folders inside it that others open by
//     path (Badger's).
//   - OpenFile, Open and ReadFile open a file without following a symbolic
//     link as its last element (O_NOFOLLOW), and name the link in the
//     error.
//
// It lives under policy/ because policy is at the bottom of the dependency
// table: fold, intercept, proxy and cmd all open files in the state folder
// and import it; it imports nothing of foldproxy's. It never removes or
// rewrites anything it finds, and its errors say what to do.
package statedir
