package upstreams

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
)

// Set is the supervised upstreams of one configuration. Its methods are safe
// for concurrent use.
type Set struct {
	byName map[string]*Upstream
	all    []*Upstream // sorted by name
}

// NewSet returns a set with one Upstream per entry, each with opts. Entries
// are expected to have distinct names, as ParseServers returns them; a later
// entry with a name already seen is ignored.
func NewSet(entries []Entry, opts Options) *Set {
	s := &Set{byName: make(map[string]*Upstream, len(entries))}
	for _, e := range entries {
		if _, dup := s.byName[e.Name]; dup {
			continue
		}
		u := New(e, opts)
		s.byName[e.Name] = u
		s.all = append(s.all, u)
	}
	slices.SortFunc(s.all, func(a, b *Upstream) int { return strings.Compare(a.Name(), b.Name()) })
	return s
}

// Start starts every upstream. Each connects in its own goroutine, so one
// that is slow or failing holds back none of the others; Start returns at
// once.
func (s *Set) Start(ctx context.Context) {
	for _, u := range s.all {
		u.Start(ctx)
	}
}

// Get returns the upstream of that name.
func (s *Set) Get(name string) (*Upstream, bool) {
	u, ok := s.byName[name]
	return u, ok
}

// All returns every upstream, sorted by name.
func (s *Set) All() []*Upstream {
	return slices.Clone(s.all)
}

// Close closes every upstream concurrently and waits for all of them.
func (s *Set) Close() error {
	errs := make([]error, len(s.all))
	var wg sync.WaitGroup
	for i, u := range s.all {
		wg.Go(func() { errs[i] = u.Close() })
	}
	wg.Wait()
	return errors.Join(errs...)
}
