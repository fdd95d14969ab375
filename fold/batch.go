package fold

import (
	"context"
	"fmt"
	"strings"
)

// Batcher is an optional extension of Store: Batch applies the writes of
// one operation in a single durable commit, all or nothing. The Manager
// uses it when its store has it (both stores of this package do), so that
// a charge or a creation costs one fsync, and otherwise makes the writes
// one by one in the order cuts, calls, branches.
type Batcher interface {
	Batch(ctx context.Context, b *Batch) error
}

// Batch holds the writes of one operation.
type Batch struct {
	Cuts     []BatchCut
	Calls    []BatchCall // each record's Seq is set once written
	Branches []*Branch
	// Records are records as Store.PutRecord keeps them, written with
	// the rest; unless Keep, they are pruned with the archive, by age and
	// size (automatic folds of the model wire, with their texts as Cuts).
	Records []BatchRecord
}

// BatchRecord is a record of kind (a short name: "af", "ms") under id.
type BatchRecord struct {
	Kind, ID string
	Value    []byte
	// Keep exempts the record from pruning (a key that must outlive the
	// records it keys).
	Keep bool
}

// RecordReader is implemented by the stores that keep Batch.Records (both
// stores of this package): the records of Store.PutRecord, read many at
// once (Store.Records lists a kind's).
type RecordReader interface {
	// GetRecords returns the records of kind among ids that exist, by id.
	GetRecords(ctx context.Context, kind string, ids []string) (map[string][]byte, error)
}

// BatchCut is a cut remainder to store.
type BatchCut struct {
	Handle string
	Rest   []byte
}

// BatchCall is a call to archive in a branch.
type BatchCall struct {
	Branch string
	Rec    *CallRecord
}

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

// validate refuses a batch with missing parts.
func (b *Batch) validate() error {
	for _, c := range b.Cuts {
		if c.Handle == "" {
			return fmt.Errorf("%w: fold: a batch holds a cut without a handle", ErrInvalidArgument)
		}
	}
	for _, c := range b.Calls {
		if c.Rec == nil {
			return fmt.Errorf("%w: fold: a batch holds a call without a record", ErrInvalidArgument)
		}
	}
	for _, br := range b.Branches {
		if br == nil || br.ID == "" {
			return fmt.Errorf("%w: fold: a batch holds a branch without an id", ErrInvalidArgument)
		}
	}
	for _, r := range b.Records {
		if r.Kind == "" || r.ID == "" || strings.Contains(r.Kind, "/") {
			return fmt.Errorf("%w: fold: a batch holds a record without a kind or an id (%q, %q)", ErrInvalidArgument, r.Kind, r.ID)
		}
	}
	return nil
}
