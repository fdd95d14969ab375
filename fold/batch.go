package fold

import (
	"context"
	"fmt"

	"github.com/foldproxy/foldproxy/fold/store"
)

// Batcher is an optional extension of Store: Batch applies the writes of
// one operation in a single durable commit, all or nothing. The Manager
// uses it when its store has it (both stores of fold/store do), so that
// a charge or a creation costs one fsync, and otherwise makes the writes
// one by one in the order cuts, calls, branches.
type Batcher interface {
	Batch(ctx context.Context, b *Batch) error
}

// RecordReader is implemented by the stores that keep Batch.Records (both
// stores of fold/store): the records of Store.PutRecord, read many at
// once (Store.Records lists a kind's).
type RecordReader interface {
	// GetRecords returns the records of kind among ids that exist, by id.
	GetRecords(ctx context.Context, kind string, ids []string) (map[string][]byte, error)
}

var (
	_ Store        = (*store.BadgerStore)(nil)
	_ Batcher      = (*store.BadgerStore)(nil)
	_ RecordReader = (*store.BadgerStore)(nil)
	_ Store        = (*store.MemStore)(nil)
	_ Batcher      = (*store.MemStore)(nil)
	_ RecordReader = (*store.MemStore)(nil)
	_ Store        = (*store.UnwritableStore)(nil)
)

// commit writes b through the store's Batcher, or one write at a time.
func (m *Manager) commit(ctx context.Context, b *Batch) error {
	if bs, ok := m.store.(Batcher); ok {
		return bs.Batch(ctx, b)
	}
	for _, c := range b.Cuts {
		if err := m.store.PutCut(ctx, c.Handle, c.Rest); err != nil {
			return err
		}
	}
	for _, c := range b.Calls {
		seq, err := m.store.AppendCall(ctx, c.Branch, c.Rec)
		if err != nil {
			return err
		}
		c.Rec.Seq = seq
	}
	for _, br := range b.Branches {
		if err := m.store.PutBranch(ctx, br); err != nil {
			return err
		}
	}
	if len(b.Records) > 0 {
		return fmt.Errorf("fold: the store keeps no records (it has no Batch)")
	}
	return nil
}
