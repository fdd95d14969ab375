package fold

import (
	"context"
	"time"
)

// armLocked starts n's deadline timer; a deadline already past fires at
// once. The caller holds n's lock.
func (m *Manager) armLocked(n *node) {
	b := n.cur.Load()
	if b.Status != StatusActive || b.Deadline.IsZero() {
		return
	}
	if n.timer != nil {
		n.timer.Stop()
	}
	d := max(b.Deadline.Sub(m.now()), 0)
	n.timer = time.AfterFunc(d, func() { m.onDeadline(n) })
}

// onDeadline force-returns n with ReasonDeadline, unless it closed in the
// meantime or the Manager is closing.
func (m *Manager) onDeadline(n *node) {
	if !m.enter() {
		return
	}
	defer m.wg.Done()
	ctx := m.bg
	if err := n.lock(ctx); err != nil {
		return
	}
	defer n.unlock()
	if ctx.Err() != nil {
		return // Close won the race for the lock
	}
	b := n.cur.Load()
	if b.Status != StatusActive {
		return
	}
	if now := m.now(); now.Before(b.Deadline) {
		// The runtime's timer and the Manager's clock disagree: wait for
		// the clock.
		n.timer = time.AfterFunc(b.Deadline.Sub(now), func() { m.onDeadline(n) })
		return
	}
	if _, err := m.closeLocked(context.WithoutCancel(ctx), n, StatusForced, ReasonDeadline, nil); err != nil {
		m.log.Warn("fold: force-returning a branch at its deadline failed; it will be failed at the next start", "branch", n.id, "err", err)
	}
}
