package fold

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/foldproxy/foldproxy/policy"
)

// session is the in-memory state of one open session.
type session struct {
	id   string
	root *node

	// Guarded by Manager.mu.
	rec      SessionRecord
	nodes    map[string]*node // every branch of the session, the root included
	active   map[string]*node // active non-root branches
	reserved int              // creations between their limit check and registration
	creates  []time.Time      // creation times within the last minute
	touched  time.Time        // when LastSeen was last written
	ending   bool
	// memories are the ids of the memories this session's branches left
	// (extracted, recorded), the latest sessionMemories of them, for its
	// checkpoints.
	memories []string
}

// touchEvery bounds how often TouchSession writes LastSeen.
const touchEvery = 30 * time.Second

// loaded returns the open session id, or nil.
func (m *Manager) loaded(id string) *session {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.sessions[id]
}

// sessionOf returns the open session id or an error wrapping
// ErrSessionNotFound.
func (m *Manager) sessionOf(id string) (*session, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.sessions[id]
	if s == nil || s.ending {
		return nil, fmt.Errorf("%w: session %q is not open in this proxy; reconnect to start a new session", ErrSessionNotFound, id)
	}
	return s, nil
}

// innermostLocked returns the session's deepest, most recently created
// active non-root branch, or nil. The caller holds m.mu.
func innermostLocked(s *session) *node {
	var best *node
	for _, n := range s.active {
		if !n.active() {
			continue
		}
		if best == nil || n.depth > best.depth || (n.depth == best.depth && n.seq > best.seq) {
			best = n
		}
	}
	return best
}

// OpenSession stores a new session's record and creates its root branch
// (depth 0, budget Settings.RootBudget) unless it exists. Opening a session
// whose root was closed reopens the root, keeping its history.
func (m *Manager) OpenSession(ctx context.Context, rec SessionRecord) error {
	if rec.ID == "" {
		return fmt.Errorf("%w: fold: OpenSession needs a session id", ErrInvalidArgument)
	}
	now := m.now()
	if rec.Created.IsZero() {
		rec.Created = now
	}
	rec.LastSeen = now
	if err := m.store.PutSession(ctx, &rec); err != nil {
		if !storeFull(err) {
			return fmt.Errorf("fold: open session %s: %w", rec.ID, err)
		}
		// The session still opens: the agent can list and read, and every
		// call that needs the store says why it cannot be served.
		m.log.Error("fold: the session's record could not be stored: it will not resume after a restart", "session", rec.ID, "err", err)
	}
	s, err := m.loadSession(ctx, &rec)
	if err != nil {
		return err
	}
	m.mu.Lock()
	s.rec = rec
	s.touched = now
	m.mu.Unlock()
	return nil
}

// ResumeSession returns the stored record of session id (an HTTP session
// resuming after a restart, say) and loads its branches, re-arming their
// deadlines. It returns an error wrapping ErrSessionNotFound when there is
// no such session.
func (m *Manager) ResumeSession(ctx context.Context, id string) (*SessionRecord, error) {
	if s := m.loaded(id); s != nil {
		m.mu.Lock()
		defer m.mu.Unlock()
		if s.ending {
			return nil, fmt.Errorf("%w: session %q is ending", ErrSessionNotFound, id)
		}
		rec := s.rec
		return &rec, nil
	}
	rec, err := m.store.GetSession(ctx, id)
	if err != nil {
		return nil, err
	}
	s, err := m.loadSession(ctx, rec)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	out := s.rec
	return &out, nil
}

// TouchSession records that the session was seen now. It is cheap: the
// record is written at most every 30 seconds, and a failed write is only
// logged.
func (m *Manager) TouchSession(ctx context.Context, id string) {
	now := m.now()
	m.mu.Lock()
	s := m.sessions[id]
	if s == nil {
		m.mu.Unlock()
		return
	}
	s.rec.LastSeen = now
	if now.Sub(s.touched) < touchEvery {
		m.mu.Unlock()
		return
	}
	s.touched = now
	rec := s.rec
	m.mu.Unlock()
	if err := m.store.PutSession(ctx, &rec); err != nil {
		m.log.Warn("fold: recording session activity failed", "session", id, "err", err)
	}
}

// loadSession loads the branches of a session from the store into memory,
// making sure it has an active root, and arms the deadlines of its active
// branches (a deadline already past fires at once).
func (m *Manager) loadSession(ctx context.Context, rec *SessionRecord) (*session, error) {
	m.loadMu.Lock()
	defer m.loadMu.Unlock()
	if s := m.loaded(rec.ID); s != nil {
		return s, nil
	}
	bs, err := m.store.Branches(ctx, rec.ID)
	if err != nil {
		return nil, fmt.Errorf("fold: load session %s: %w", rec.ID, err)
	}
	rootID := RootID(rec.ID)
	var root *Branch
	for _, b := range bs {
		if b.ID == rootID || (b.Depth == 0 && b.ID == legacyRootID(rec.ID) && root == nil) {
			root = b
		}
	}
	if root != nil {
		rootID = root.ID // a store written before root ids were hashed keeps its root
	}
	switch {
	case root == nil:
		root = &Branch{
			ID: rootID, Session: rec.ID, Status: StatusActive, Budget: m.set.RootBudget,
			Level: policy.Normal.String(), Created: m.now(), Principal: m.principal,
		}
		bs = append([]*Branch{root}, bs...)
	case root.Status != StatusActive:
		root.Status, root.Reason, root.Closed = StatusActive, "", time.Time{}
		root.Summary, root.SummaryDelivered = "", false
		root.Budget = m.set.RootBudget
		root.Principal = m.principal
	default:
		root = nil // nothing to write
	}
	if root != nil {
		if err := m.store.PutBranch(ctx, root); err != nil {
			if !storeFull(err) {
				return nil, fmt.Errorf("fold: create the root of session %s: %w", rec.ID, err)
			}
			m.log.Error("fold: the session's root could not be stored", "session", rec.ID, "err", err)
		}
	}

	s := &session{
		id: rec.ID, rec: *rec,
		nodes:  make(map[string]*node, len(bs)),
		active: make(map[string]*node),
	}
	kids := childrenFromParents(bs)
	for _, b := range bs {
		n := m.newNode(b)
		n.kids = kids[b.ID]
		s.nodes[b.ID] = n
	}
	s.root = s.nodes[rootID]
	for _, b := range bs {
		p := s.nodes[b.Parent]
		if p != nil && p.active() && b.Status != StatusActive && b.Status != StatusReturned &&
			b.Summary != "" && !b.SummaryDelivered {
			p.pending = append(p.pending, b.ID)
		}
	}

	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, fmt.Errorf("fold: load session %s: the manager is closed", rec.ID)
	}
	m.sessions[rec.ID] = s
	var arm []*node
	for id, n := range s.nodes {
		m.nodes[id] = n
		if n.active() && n != s.root {
			s.active[id] = n
			m.active++
			arm = append(arm, n)
		}
	}
	m.mu.Unlock()
	for _, n := range arm {
		if err := n.lock(ctx); err != nil {
			return nil, err
		}
		m.armLocked(n)
		n.unlock()
	}
	return s, nil
}

// EndSession force-returns the session's active branches, deepest first,
// with ReasonSessionEnd, closes its root and deletes the session record.
// Branches and archives stay in the store for reports and recall. It takes
// at most Settings.SessionEndGrace; branches still active after it (work
// in flight holds them) are marked failed with ReasonSessionEnd as soon as
// that work lets go (FR-010), or at the next Recover if foldproxy stops
// first.
func (m *Manager) EndSession(ctx context.Context, id string) error {
	s := m.loaded(id)
	if s == nil {
		rec, err := m.store.GetSession(ctx, id)
		if err != nil {
			return err
		}
		if s, err = m.loadSession(ctx, rec); err != nil {
			return err
		}
	}
	m.mu.Lock()
	s.ending = true
	m.mu.Unlock()

	gctx, cancel := context.WithTimeout(ctx, m.set.SessionEndGrace.D())
	defer cancel()
	if err := s.root.lock(gctx); err != nil {
		m.failAfterGrace(s)
		return fmt.Errorf("fold: end session %s within %s: %w; its active branches are marked failed once the work holding them ends", id, m.set.SessionEndGrace.D(), err)
	}
	_, err := m.closeLocked(gctx, s.root, StatusForced, ReasonSessionEnd, nil)
	s.root.unlock()
	if err != nil {
		m.failAfterGrace(s)
		return fmt.Errorf("fold: end session %s: %w; its branches still active are marked failed once the work holding them ends", id, err)
	}
	return m.forgetSession(ctx, s)
}

// failAfterGrace closes, in the background, the branches of an ending
// session still active after the grace as StatusFailed with
// ReasonSessionEnd, deepest first, once the work holding them lets go,
// then forgets the session.
func (m *Manager) failAfterGrace(s *session) {
	if !m.enter() {
		return
	}
	go func() {
		defer m.wg.Done()
		ctx := m.bg
		if err := s.root.lock(ctx); err != nil {
			return // closing: Recover fails them at the next start
		}
		_, err := m.closeLocked(context.WithoutCancel(ctx), s.root, StatusFailed, ReasonSessionEnd, nil)
		s.root.unlock()
		if err == nil {
			err = m.forgetSession(context.WithoutCancel(ctx), s)
		}
		if err != nil {
			m.log.Warn("fold: failing the branches of an ended session; they are failed at the next start", "session", s.id, "err", err)
		}
	}()
}

// forgetSession deletes an ended session's record and its in-memory state.
func (m *Manager) forgetSession(ctx context.Context, s *session) error {
	if err := m.store.DeleteSession(ctx, s.id); err != nil {
		return fmt.Errorf("fold: end session %s: %w", s.id, err)
	}
	m.mu.Lock()
	delete(m.sessions, s.id)
	for bid := range s.nodes {
		delete(m.nodes, bid)
		delete(m.model, bid) // reloaded from the archive if asked again
	}
	m.mu.Unlock()
	return nil
}

// Recover prepares the Manager after a start. For every stored session
// with active branches: when resumable reports that the session can resume
// (an HTTP session whose record is stored), its branches are loaded and
// their deadlines re-armed, a deadline already past firing at once;
// otherwise (a stdio session: its process is gone) its active branches are
// closed as StatusFailed with ReasonProxyRestarted, deepest first, and its
// record is deleted. A nil resumable resumes nothing.
func (m *Manager) Recover(ctx context.Context, resumable func(session string) bool) error {
	recs, err := m.store.Sessions(ctx)
	if err != nil {
		return fmt.Errorf("fold: recover: %w", err)
	}
	all, err := m.store.Branches(ctx, "")
	if err != nil {
		return fmt.Errorf("fold: recover: %w", err)
	}
	bySession := make(map[string][]*Branch)
	principals := map[string]string{}
	for _, b := range all {
		if b.Status == StatusActive {
			bySession[b.Session] = append(bySession[b.Session], b)
		}
		if b.Depth == 0 {
			principals[b.Session] = b.Principal
		}
	}
	for _, b := range all {
		if isOrphan(b) {
			m.addOrphan(b, principals[b.Session])
		}
	}
	m.learnFrom(all)
	records := make(map[string]*SessionRecord, len(recs))
	for _, r := range recs {
		records[r.ID] = r
		if _, ok := bySession[r.ID]; !ok {
			bySession[r.ID] = nil
		}
	}
	ids := slices.Sorted(maps.Keys(bySession))
	var errs []error
	for _, id := range ids {
		if m.loaded(id) != nil {
			continue
		}
		if rec := records[id]; rec != nil && resumable != nil && resumable(id) {
			if _, err := m.loadSession(ctx, rec); err != nil {
				errs = append(errs, err)
			}
			continue
		}
		if err := m.failSession(ctx, id, bySession[id], records[id] != nil, principals[id]); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// failSession closes the active branches of a session that cannot resume
// as failed, deepest first, and deletes its record.
func (m *Manager) failSession(ctx context.Context, id string, active []*Branch, hasRecord bool, principal string) error {
	sort.SliceStable(active, func(i, j int) bool { return active[i].Depth > active[j].Depth })
	now := m.now()
	for _, b := range active {
		nb := b.Clone()
		nb.Status, nb.Reason, nb.Closed = StatusFailed, ReasonProxyRestarted, now
		if nb.Depth > 0 {
			nb.Summary = m.summarize(nb, nil)
		}
		if err := m.store.PutBranch(ctx, nb); err != nil {
			return fmt.Errorf("fold: recover session %s: %w", id, err)
		}
		m.emit(ctx, branchEvent("failed", nb))
		if isOrphan(nb) {
			m.addOrphan(nb, principal)
		}
	}
	if hasRecord {
		if err := m.store.DeleteSession(ctx, id); err != nil {
			return fmt.Errorf("fold: recover session %s: %w", id, err)
		}
	}
	return nil
}
