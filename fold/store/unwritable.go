package store

import (
	"context"
	"fmt"
	"time"
)

// NewUnwritableStore returns a Store that holds nothing and refuses every
// write with cause, which should wrap ErrStoreFull: what `serve` runs on
// when its state store cannot be opened because the disk is full, so that
// the proxy starts, lists its upstreams and answers every call that needs
// the store with the reason, instead of dying.
func NewUnwritableStore(cause error) *UnwritableStore {
	if cause == nil {
		cause = ErrStoreFull
	}
	return &UnwritableStore{MemStore: NewMemStore(), cause: cause}
}

// UnwritableStore is the store NewUnwritableStore returns.
type UnwritableStore struct {
	*MemStore
	cause error
}

func (s *UnwritableStore) refuse(what string) error {
	return fmt.Errorf("fold: %s: the state store cannot be written: %w", what, s.cause)
}

func (s *UnwritableStore) PutBranch(context.Context, *Branch) error {
	return s.refuse("put branch")
}

func (s *UnwritableStore) AppendCall(context.Context, string, *CallRecord) (int, error) {
	return 0, s.refuse("archive call")
}

func (s *UnwritableStore) PutCut(context.Context, string, []byte) error {
	return s.refuse("store cut")
}

func (s *UnwritableStore) PutSession(context.Context, *SessionRecord) error {
	return s.refuse("put session")
}

func (s *UnwritableStore) DeleteSession(context.Context, string) error {
	return s.refuse("delete session")
}

func (s *UnwritableStore) PutRecord(context.Context, string, string, []byte) error {
	return s.refuse("put record")
}

func (s *UnwritableStore) DeleteRecord(context.Context, string, string) error {
	return s.refuse("delete record")
}

func (s *UnwritableStore) Prune(context.Context, time.Duration, int64) error { return nil }

// Batch hides the MemStore's Batcher, so that batches take the refusing
// methods above.
func (s *UnwritableStore) Batch(context.Context, *Batch) error {
	return s.refuse("write batch")
}
