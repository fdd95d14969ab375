package secrets

import (
	"context"
	"time"
)

// WithFault returns a copy of s for tests of what its callers do when a
// scan fails: before the copy scans a piece of a text, it calls fault with
// the piece's text, and fault may sleep, block, panic or return an error
// that fails the scan; nil lets the piece be scanned as s scans it. A
// positive timeout replaces s's (Timeout), and onGoroutine has every text
// scanned on a goroutine of its own, under a context that ends at the
// deadline, however small (see runScan). s itself is left as it is.
func (s *Scrubber) WithFault(timeout time.Duration, onGoroutine bool, fault func(ctx context.Context, text string) error) *Scrubber {
	c := *s
	if timeout > 0 {
		c.timeout = timeout
	}
	if onGoroutine {
		c.inline = 0
	}
	if fault != nil && !s.disabled {
		find := s.find
		c.find = func(ctx context.Context, text string, nls []int, lo, hi int) ([]found, []int, error) {
			if err := fault(ctx, text); err != nil {
				return nil, nil, err
			}
			return find(ctx, text, nls, lo, hi)
		}
	}
	return &c
}
