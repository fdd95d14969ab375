package store

import (
	"fmt"
	"sync"
	"time"
)

// The free-space check of every write (issue 13: a statfs costs about as
// much as the write-ahead log's write(2) itself). A write is checked
// against a fresh statfs unless the last one showed the file system far
// above the reserve (freeHeadroom), and was taken recently (freeRecheckAfter)
// and before fewer of the store's own bytes than freeRecheckBytes: then no
// write in between can bring it under the reserve, unless another process
// fills more than the headroom within that time. Near the reserve every
// write measures, so a disk that fills up is refused exactly as before.
const (
	freeHeadroom     = 1 << 30
	freeRecheckAfter = 50 * time.Millisecond
	freeRecheckBytes = 8 << 20
)

// freeGuard refuses writes that would leave less than minFree free on the
// file system of dir.
type freeGuard struct {
	dir     string
	minFree int64 // <= 0: no check
	stat    func(dir string) (int64, bool)
	now     func() time.Time

	mu    sync.Mutex
	valid bool      // free and at hold a measurement
	free  int64     // as measured at at
	at    time.Time // when free was measured
	since int64     // bytes the writes checked since then may add
}

func newFreeGuard(dir string, minFree int64) *freeGuard {
	return &freeGuard{dir: dir, minFree: minFree, stat: freeBytes, now: time.Now}
}

// check returns an error wrapping ErrStoreFull when writing size more
// bytes would leave less than the reserve free.
func (g *freeGuard) check(size int64) error {
	return g.checkFresh(size, false)
}

// checkNow is check measuring now, whatever the last measurement showed:
// for opening the store and for work that may write much at once (a value
// log rewrite), which a throttled check could let through.
func (g *freeGuard) checkNow(size int64) error {
	return g.checkFresh(size, true)
}

func (g *freeGuard) checkFresh(size int64, fresh bool) error {
	if !g.on() {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if !fresh && g.valid && g.since+size <= freeRecheckBytes && g.free-g.since-size >= g.minFree+freeHeadroom &&
		g.now().Sub(g.at) < freeRecheckAfter {
		g.since += size
		return nil
	}
	free, ok := g.stat(g.dir)
	if !ok {
		g.valid = false
		return nil
	}
	g.valid, g.free, g.at, g.since = true, free, g.now(), 0
	if free-size < g.minFree {
		return fullErr(g.dir, free, g.minFree)
	}
	g.since = size
	return nil
}

// on reports whether writes are checked at all (a reserve was set).
func (g *freeGuard) on() bool { return g != nil && g.minFree > 0 }

func fullErr(dir string, free, minFree int64) error {
	return fmt.Errorf("%w: the disk holding %s has %s free and foldproxy keeps %s free for its store; "+
		"nothing was written: free some space there, then retry", ErrStoreFull, dir, mib(free), mib(minFree))
}
