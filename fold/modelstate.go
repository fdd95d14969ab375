package fold

import (
	"context"
	"errors"
	"fmt"

	"github.com/foldproxy/foldproxy/fold/modelwire"
)

// modelState is the Manager seen by the context manager on the model wire.
type modelState struct{ m *Manager }

var _ modelwire.State = modelState{}

// ModelState returns the fold state as the context manager of the model
// wire (package modelwire) sees it.
func (m *Manager) ModelState() modelwire.State { return modelState{m} }

// Branch looks a branch up by id in any session (branch ids are unique).
func (s modelState) Branch(ctx context.Context, id string) (modelwire.Branch, bool, error) {
	var b *Branch
	if n := s.m.lookup(id); n != nil {
		b = n.cur.Load()
	} else {
		got, err := s.m.store.GetBranch(ctx, id)
		if err != nil {
			if errors.Is(err, ErrBranchNotFound) {
				return modelwire.Branch{}, false, nil
			}
			return modelwire.Branch{}, false, fmt.Errorf("fold: look up branch %q: %w", id, err)
		}
		b = got
	}
	return modelwire.Branch{
		ID:     b.ID,
		Closed: b.Status != StatusActive,
		Budget: b.Budget,
		Used:   b.Used,
	}, true, nil
}

// ChargeResult charges a tool result seen on the model wire.
func (s modelState) ChargeResult(ctx context.Context, branchID, toolUseID, toolName, text string) (modelwire.Decision, error) {
	return modelwire.Decision{Keep: len(text)}, nil
}
