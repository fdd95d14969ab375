package fold

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// closeLocked closes n with status st and reason, after closing its active
// descendants deepest first (forced, "parent returning"; or, at session end
// and restart, with the same status and reason as n). apply, when not nil,
// amends n's record before it is written. The caller holds n's lock. It
// returns the ids of the branches it closed, in closing order, n last.
func (m *Manager) closeLocked(ctx context.Context, n *node, st Status, reason string, apply func(*Branch)) ([]string, error) {
	return m.closeWithLocked(ctx, n, st, reason, apply, nil)
}

// closeWithLocked is closeLocked that writes the writes of with, when not
// nil, together with n's closed record, in one commit.
func (m *Manager) closeWithLocked(ctx context.Context, n *node, st Status, reason string, apply func(*Branch), with *Batch) ([]string, error) {
	b := n.cur.Load()
	if b.Status != StatusActive {
		return nil, nil
	}
	cst, creason := StatusForced, ReasonParent
	if reason == ReasonSessionEnd || reason == ReasonProxyRestarted {
		cst, creason = st, reason
	}
	var closed []string
	kids := m.children(n)
	for i := len(kids) - 1; i >= 0; i-- {
		c := m.lookup(kids[i])
		if c == nil || !c.active() {
			continue
		}
		if err := c.lock(ctx); err != nil {
			return closed, err
		}
		sub, err := m.closeLocked(ctx, c, cst, creason, nil)
		c.unlock()
		closed = append(closed, sub...)
		if err != nil {
			return closed, err
		}
	}
	nb := b.Clone()
	if apply != nil {
		apply(nb)
	}
	nb.Status, nb.Reason, nb.Closed = st, reason, m.now()
	if st != StatusReturned && nb.Depth > 0 {
		nb.Summary = m.summarize(nb, closed)
	}
	if with == nil {
		with = &Batch{}
	}
	with.Branches = append(with.Branches, nb)
	if err := m.commit(ctx, with); err != nil {
		return closed, err
	}
	n.cur.Store(nb)
	if n.timer != nil {
		n.timer.Stop()
		n.timer = nil
	}
	n.markClosed()
	m.mu.Lock()
	if s := m.sessions[n.session]; s != nil {
		if _, ok := s.active[n.id]; ok {
			delete(s.active, n.id)
			m.active--
		}
	}
	if nb.Summary != "" {
		if p := m.nodes[n.parent]; p != nil && p.active() {
			p.pending = append(p.pending, n.id)
		}
	}
	m.mu.Unlock()
	kind := "forced"
	switch st {
	case StatusReturned:
		kind = "returned"
	case StatusFailed:
		kind = "failed"
	}
	if kind != "returned" { // the caller of a return emits it, with the message tokens
		m.emit(ctx, branchEvent(kind, nb))
	}
	if isOrphan(nb) {
		m.addOrphan(nb, m.principal)
	}
	m.learn(nb)
	m.memoryOutcome(ctx, nb)
	return append(closed, n.id), nil
}

// summarize writes the automatic summary of a forced or failed branch.
func (m *Manager) summarize(b *Branch, closed []string) string {
	var sb strings.Builder
	verb := "force-returned"
	if b.Status == StatusFailed {
		verb = "closed as failed"
	}
	fmt.Fprintf(&sb, "Branch %s (%q) was %s: %s.", b.ID, b.Description, verb, b.Reason)
	if b.Budget > 0 {
		fmt.Fprintf(&sb, " Calls made: %d; tokens used: %d of %d.", b.Calls, b.Used, b.Budget)
	} else {
		fmt.Fprintf(&sb, " Calls made: %d; tokens used: %d.", b.Calls, b.Used)
	}
	if len(b.ByTool) > 0 {
		tools := slices.SortedFunc(maps.Keys(b.ByTool), func(x, y string) int {
			return cmp.Or(cmp.Compare(b.ByTool[y], b.ByTool[x]), cmp.Compare(x, y))
		})
		parts := make([]string, 0, len(tools))
		for i, t := range tools {
			if i == 8 {
				parts = append(parts, fmt.Sprintf("and %d more", len(tools)-i))
				break
			}
			parts = append(parts, fmt.Sprintf("%s %d", t, b.ByTool[t]))
		}
		fmt.Fprintf(&sb, " By tool: %s.", strings.Join(parts, ", "))
	}
	if len(b.Cuts) > 0 {
		if b.CutCount > len(b.Cuts) {
			fmt.Fprintf(&sb, " Cut results: %d, the last %d of which branch_recall reads by handle: %s.", b.CutCount, len(b.Cuts), strings.Join(b.Cuts, ", "))
		} else {
			fmt.Fprintf(&sb, " Cut results, whose rest branch_recall reads by handle: %s.", strings.Join(b.Cuts, ", "))
		}
	}
	var kids []string
	for _, id := range closed {
		if id != b.ID {
			kids = append(kids, id)
		}
	}
	if len(kids) > 0 {
		fmt.Fprintf(&sb, " Sub-branches force-returned with it: %s.", strings.Join(kids, ", "))
	}
	fmt.Fprintf(&sb, " Everything it received is archived: branch_recall with branch_id %s.", b.ID)
	return sb.String()
}
