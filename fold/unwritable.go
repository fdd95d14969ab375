package fold

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// NewUnwritableStore returns a Store that holds nothing and refuses every
// write with cause, which should wrap ErrStoreFull: what `serve` runs on
// when its state store cannot be opened because the disk is full, so that
// the proxy starts, lists its upstreams and answers every call that needs
// the store with the reason, instead of dying.
func NewUnwritableStore(cause error) Store {
	if cause == nil {
		cause = ErrStoreFull
	}
	return &unwritableStore{MemStore: NewMemStore(), cause: cause}
}

type unwritableStore struct {
	*MemStore
	cause error
}

func (s *unwritableStore) refuse(what string) error {
	return fmt.Errorf("fold: %s: the state store cannot be written: %w", what, s.cause)
}

func (s *unwritableStore) PutBranch(context.Context, *Branch) error {
	return s.refuse("put branch")
}

func (s *unwritableStore) AppendCall(context.Context, string, *CallRecord) (int, error) {
	return 0, s.refuse("archive call")
}

func (s *unwritableStore) PutCut(context.Context, string, []byte) error {
	return s.refuse("store cut")
}

func (s *unwritableStore) PutSession(context.Context, *SessionRecord) error {
	return s.refuse("put session")
}

func (s *unwritableStore) DeleteSession(context.Context, string) error {
	return s.refuse("delete session")
}

func (s *unwritableStore) PutRecord(context.Context, string, string, []byte) error {
	return s.refuse("put record")
}

func (s *unwritableStore) DeleteRecord(context.Context, string, string) error {
	return s.refuse("delete record")
}

func (s *unwritableStore) Prune(context.Context, time.Duration, int64) error { return nil }

// Batch hides the MemStore's Batcher, so that batches take the refusing
// methods above.
func (s *unwritableStore) Batch(context.Context, *Batch) error {
	return s.refuse("write batch")
}

// storeFull reports whether err means the store could not be written for
// lack of space: what a session can live through in memory.
func storeFull(err error) bool { return errors.Is(err, ErrStoreFull) }
