package fold

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// Orphans are branches that ended without a return because their session
// went away: closed as "proxy restarted" after a crash, or at the end of
// their session. branch_status of a later session of the same principal
// lists them in its tree, so that the agent can pick the work up again
// (or resume a checkpoint), until it acknowledges them (branch_status with
// acknowledge) or they are older than fold.orphanMaxAge.

// orphan is one orphaned branch, as the Manager keeps it.
type orphan struct {
	id, session, principal string
	closed                 time.Time
}

// listedOrphans bounds the orphans branch_status lists (the latest).
const listedOrphans = 10

// orphanView is an orphan as branch_status shows it.
type orphanView struct {
	BranchID    string `json:"branch_id"`
	Description string `json:"description,omitempty"`
	Reason      string `json:"reason"`
	Closed      string `json:"closed"`
	BudgetUsed  int    `json:"budget_used"`
}

// isOrphan reports whether b ended because its session went away.
func isOrphan(b *Branch) bool {
	return b.Depth > 0 && b.Status != StatusActive && b.Status != StatusReturned && !b.Acknowledged &&
		(b.Reason == ReasonProxyRestarted || b.Reason == ReasonSessionEnd)
}

func (m *Manager) addOrphan(b *Branch, principal string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.orphans = append(m.orphans, orphan{id: b.ID, session: b.Session, principal: principal, closed: b.Closed})
}

// orphansFor returns the orphans that session s is shown: of other
// sessions of the same principal, not acknowledged, not aged out; latest
// first. Aged-out ones are dropped.
func (m *Manager) orphansFor(s *session) []orphan {
	cutoff := m.now().Add(-m.set.OrphanMaxAge.D())
	m.mu.Lock()
	defer m.mu.Unlock()
	m.orphans = slices.DeleteFunc(m.orphans, func(o orphan) bool { return o.closed.Before(cutoff) })
	var out []orphan
	for _, o := range m.orphans {
		if o.session != s.id && o.principal == m.principal {
			out = append(out, o)
		}
	}
	slices.SortStableFunc(out, func(x, y orphan) int { return y.closed.Compare(x.closed) })
	return out
}

// orphanViews renders the orphans of os for branch_status, reading their
// records.
func (m *Manager) orphanViews(ctx context.Context, os []orphan) ([]orphanView, error) {
	var out []orphanView
	for _, o := range os[:min(len(os), listedOrphans)] {
		b, err := m.store.GetBranch(ctx, o.id)
		if err != nil {
			continue // pruned meanwhile
		}
		desc := b.Description
		if r := []rune(desc); len(r) > treeDescription {
			desc = string(r[:treeDescription-1]) + "…"
		}
		out = append(out, orphanView{BranchID: b.ID, Description: desc, Reason: b.Reason, Closed: b.Closed.UTC().Format(time.RFC3339), BudgetUsed: b.Used})
	}
	return out, nil
}

// acknowledge marks the orphans os acknowledged, in their records, and
// forgets them.
func (m *Manager) acknowledge(ctx context.Context, os []orphan) error {
	done := map[string]bool{}
	for _, o := range os {
		b, err := m.store.GetBranch(ctx, o.id)
		if err == nil && !b.Acknowledged {
			nb := b.Clone()
			nb.Acknowledged = true
			// The orphan's session is gone: nothing else writes its record.
			if err := m.store.PutBranch(context.WithoutCancel(ctx), nb); err != nil {
				return fmt.Errorf("fold: acknowledge orphan %s: %w", o.id, err)
			}
		}
		done[o.id] = true
	}
	m.mu.Lock()
	m.orphans = slices.DeleteFunc(m.orphans, func(o orphan) bool { return done[o.id] })
	m.mu.Unlock()
	return nil
}
