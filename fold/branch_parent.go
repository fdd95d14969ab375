package fold

import (
	"context"
	"fmt"
	"time"
)

// parentFor resolves the parent of a new branch: the explicit id, else the
// innermost active branch, else the root.
func (m *Manager) parentFor(s *session, explicit string) (*node, error) {
	if explicit == "" {
		m.mu.Lock()
		n := innermostLocked(s)
		m.mu.Unlock()
		if n == nil {
			n = s.root
		}
		if !n.active() {
			return nil, closedErr(n.cur.Load())
		}
		return n, nil
	}
	_, n, err := m.branchField(s.id, "parent_branch_id", explicit)
	if err != nil {
		return nil, err
	}
	if b := n.cur.Load(); b.Status != StatusActive {
		return nil, closedErr(b)
	}
	return n, nil
}

// dependencies resolves depends_on: branches of the same session that are
// not ancestors of the new branch (an ancestor cannot close before it).
func (m *Manager) dependencies(s *session, parent *node, ids []string) ([]*node, error) {
	if len(ids) > maxDependsOn {
		return nil, fmt.Errorf("%w: depends_on lists %d branches; the maximum is %d", ErrInvalidArgument, len(ids), maxDependsOn)
	}
	if len(ids) == 0 {
		return nil, nil // most creations: no maps, no walk up the tree
	}
	ancestors := map[string]bool{}
	for p := parent; p != nil; p = m.lookup(p.parent) {
		ancestors[p.id] = true
		if p.parent == "" {
			break
		}
	}
	var out []*node
	seen := map[string]bool{}
	for _, id := range ids {
		if seen[id] {
			continue
		}
		seen[id] = true
		_, n, err := m.branchField(s.id, "depends_on", id)
		if err != nil {
			return nil, err
		}
		if ancestors[id] {
			return nil, fmt.Errorf("%w: depends_on: %s is an ancestor of the new branch and cannot return before it; drop it from depends_on", ErrInvalidArgument, id)
		}
		out = append(out, n)
	}
	return out, nil
}

// waitDependencies waits until every dependency is closed, for at most
// Settings.DependsOnWait.
func (m *Manager) waitDependencies(ctx context.Context, deps []*node) error {
	if len(deps) == 0 {
		return nil
	}
	wait := m.set.DependsOnWait.D()
	t := time.NewTimer(wait)
	defer t.Stop()
	for _, d := range deps {
		select {
		case <-d.done:
		case <-t.C:
			return fmt.Errorf("%w: depends_on: branch %s is still active after %s; check it with branch_status and retry, or drop it from depends_on", ErrDependencyFailed, d.id, wait)
		case <-ctx.Done():
			return fmt.Errorf("%w: depends_on: the request was cancelled while waiting for branch %s: %v", ErrDependencyFailed, d.id, ctx.Err())
		}
	}
	return nil
}
