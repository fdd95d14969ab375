package store

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
)

// Closing the store must end. Badger's close flushes its memtable into a
// new table file under the store's folder, and Badger retries a flush that
// fails once a second, forever (badger db.go, flushMemtable): a store whose
// folder was removed while the process ran (a test's temporary folder, a
// user's rm -rf of the state folder) or whose disk fails would keep the
// process spinning in its close instead of exiting. So:
//
//   - Close first checks that the folder is still the one it opened; when
//     it is gone or was replaced, nothing can be kept, and Close returns an
//     error naming it without closing Badger (the process exits and the
//     operating system releases what Badger holds).
//   - Otherwise it closes as before, but returns with an error naming the
//     folder at the first memtable flush that Badger reports failed while
//     closing. Nothing acknowledged is lost then: what the write-ahead log
//     committed to Badger is in Badger's own log (its memtable's file),
//     which the next open replays, as after a crash.

// badgerFlushFailed is in Badger's log line for a failed memtable flush.
// Badger has no other signal of it: its flushMemtable (db.go) retries a
// failed flush once a second, forever, and says so only through
// Options.Logger's Errorf, as "error flushing memtable to disk: %v,
// retrying" (no error value, callback or metric reaches the caller, and
// DB.Close does not return meanwhile). The logger matches the phrase
// anywhere in the line, whatever Badger wraps around it.
// TestBadgerFlushFailedText pins the Badger version this was read in: a
// dependency update fails it until the text is checked again.
const badgerFlushFailed = "error flushing memtable to disk"

// flushWatch passes Badger's reports of a failed memtable flush (through
// its logger) to a Close waiting on them.
type flushWatch struct {
	mu sync.Mutex
	ch chan string // armed by Close; nil before
}

func (f *flushWatch) arm() <-chan string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ch == nil {
		f.ch = make(chan string, 1)
	}
	return f.ch
}

func (f *flushWatch) failed(msg string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ch == nil {
		return
	}
	select {
	case f.ch <- msg:
	default:
	}
}

// folderGone returns an error naming the store's folder when it is no
// longer the folder the store was opened in.
func (s *BadgerStore) folderGone() error {
	st, err := os.Stat(s.dir)
	switch {
	case err == nil && (s.dirInfo == nil || os.SameFile(st, s.dirInfo)):
		return nil
	case err == nil:
		return fmt.Errorf("the store's folder %s was replaced by another folder while foldproxy had it open: what it wrote there is gone; the store was not closed", s.dir)
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("the store's folder %s was removed while foldproxy had it open: what it wrote there is gone; the store was not closed", s.dir)
	default:
		return fmt.Errorf("the store's folder %s cannot be reached (%w); the store was not closed", s.dir, err)
	}
}

// closeBounded closes the write-ahead log, Badger and the archive files,
// and returns instead of hanging when Badger cannot write into the folder
// (see above).
func (s *BadgerStore) closeBounded() error {
	if err := s.folderGone(); err != nil {
		if w := s.wal; w != nil {
			// Writes after Close fail; the committer stops (not waited
			// for: it may be stuck in Badger).
			w.mu.Lock()
			w.closed = true
			w.mu.Unlock()
			w.stopOnce.Do(func() { close(w.stop) })
		}
		return errors.Join(err, s.arch.close())
	}
	failed := s.flushes.arm()
	done := make(chan error, 1)
	go func() { done <- errors.Join(s.closeWAL(), s.db.Close()) }()
	select {
	case err := <-done:
		return errors.Join(err, s.arch.close())
	case msg := <-failed:
		if err := s.folderGone(); err != nil {
			return errors.Join(err, s.arch.close())
		}
		return errors.Join(fmt.Errorf("its database (Badger) could not write its tables into the store's folder %s while closing (%s): "+
			"the store is left as a crash leaves it and the next start replays its logs; check that folder's disk", s.dir, msg), s.arch.close())
	}
}
