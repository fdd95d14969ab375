package fold

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"slices"
	"unsafe"

	"github.com/foldproxy/foldproxy/fold/store"
	"github.com/foldproxy/foldproxy/policy"
)

// Charge is the atomic budget seam between the budget interceptor and the
// branch manager. Under the branch's lock it builds the branch's Budget,
// calls fit, checks that the charge fits the remaining budget, and persists
// everything before returning: the branch's usage and level, the archived
// call (the full scrubbed result), the cut remainder under Budget.Handle,
// the delivery of the children's summaries handed to fit, and, when the
// result was cut or the budget is spent, the forced return of the branch
// (ReasonBudget). The root is counted and may be cut, but never
// force-returned.
//
// Charges to one branch serialize; charges to different branches run in
// parallel. fit runs under the lock and must be quick. When fit fails, or
// its charge does not fit, nothing is charged and the summaries stay
// pending.
func (m *Manager) Charge(ctx context.Context, session, branch string, fit func(Budget) (Charge, error)) (*ChargeResult, error) {
	if fit == nil {
		return nil, fmt.Errorf("%w: fold: Charge needs a fit function", ErrInvalidArgument)
	}
	_, n, err := m.branchOf(session, branch)
	if err != nil {
		return nil, err
	}
	if err := n.lock(ctx); err != nil {
		return nil, err
	}
	defer n.unlock()
	b := n.cur.Load()
	if b.Status != StatusActive {
		return nil, closedErr(b)
	}

	kids, summaries := m.pendingSummaries(n)
	rem := remaining(b)
	if b.Depth == 0 && rem >= 0 {
		// The main thread keeps enough for the answers of a branch it
		// starts once its results no longer fit (see CutNotice).
		rem = max(rem-rootAnswerReserve, 0)
	}
	bud := Budget{
		Branch: b.ID, Used: b.Used, Total: b.Budget, Remaining: rem, Level: b.Level,
		Handle: newCallHandle(b.ID), Summaries: summaries,
	}
	// The reserve is worded and counted once per branch (and budget): the
	// handles of its calls differ only in their random digits, which
	// NoticeReserve already allows for.
	if n.reserve[0] != b.Budget {
		n.reserve = [2]int{b.Budget, NoticeReserve(m.count.CountText, b.ID, bud.Handle, b.Depth == 0, b.Budget)}
	}
	bud.Reserve = n.reserve[1]
	ch, err := fit(bud)
	if err != nil {
		return nil, err
	}
	if ch.Tokens < 0 || ch.ArgTokens < 0 {
		return nil, fmt.Errorf("%w: fold: charge of %d tokens (%d for arguments) to branch %s is negative", ErrInvalidArgument, ch.Tokens, ch.ArgTokens, b.ID)
	}
	if rem >= 0 && ch.Tokens > rem {
		return nil, fmt.Errorf("%w: a charge of %d tokens exceeds the %d left in branch %s; the result must be cut to fit", ErrBudgetExceeded, ch.Tokens, rem, b.ID)
	}

	// Decided: write it all, even if the caller goes away meanwhile.
	wctx := context.WithoutCancel(ctx)
	// The record's result is a view of ch.Result, not a copy of it: it
	// lives only until commit returns, and both stores copy what they keep
	// (the Badger store into its write-ahead log record or its encoded
	// record, the in-memory store into its encoded record). A result is
	// never written to once its upstream has answered.
	rec := &CallRecord{
		Time: m.now(), Upstream: ch.Upstream, Method: ch.Method, Name: ch.Name,
		Args: ch.Args, Result: unsafe.String(unsafe.SliceData(ch.Result), len(ch.Result)), Tokens: ch.Tokens,
	}
	batch := &Batch{Calls: []BatchCall{{Branch: b.ID, Rec: rec}}}
	if ch.Cut {
		rec.Handle = bud.Handle
		batch.Cuts = []BatchCut{{Handle: bud.Handle, Rest: ch.Rest}}
	}
	delivered := make([]*Branch, len(kids))
	for i, c := range kids {
		delivered[i] = c.cur.Load().Clone()
		delivered[i].SummaryDelivered = true
		batch.Branches = append(batch.Branches, delivered[i])
	}
	nb := m.charged(b, ch, bud.Handle)
	forced := b.Depth > 0 && (ch.Cut || (nb.Budget > 0 && nb.Used >= nb.Budget))
	if forced {
		// The branch's record is written once, closed, with the charge.
		if _, err := m.closeWithLocked(wctx, n, StatusForced, ReasonBudget, func(x *Branch) { *x = *nb }, batch); err != nil {
			return nil, fmt.Errorf("fold: charge %s and force-return it: %w", b.ID, err)
		}
	} else {
		batch.Branches = append(batch.Branches, nb)
		if err := m.commit(wctx, batch); err != nil {
			return nil, fmt.Errorf("fold: charge %s: %w", b.ID, err)
		}
	}
	m.markDelivered(n, kids, delivered)
	if !forced {
		n.cur.Store(nb)
	}

	m.levelEvent(ctx, b, nb)
	if ch.Cut {
		ev := branchEvent("cut", nb)
		ev.Tokens = m.estimateTokens(ch.Rest)
		m.emit(ctx, ev)
	}
	res := &ChargeResult{Used: nb.Used, Total: nb.Budget, Level: nb.Level, Forced: forced}
	if ch.Cut {
		res.Handle = bud.Handle
	}
	return res, nil
}

// pendingSummaries lists the children of n whose forced summaries are not
// yet delivered, and those summaries. Closed children only change under
// their parent's lock, which the caller holds.
func (m *Manager) pendingSummaries(n *node) (kids []*node, summaries []string) {
	m.mu.Lock()
	pendingIDs := slices.Clone(n.pending)
	m.mu.Unlock()
	for _, id := range pendingIDs {
		c := m.lookup(id)
		if c == nil {
			continue
		}
		if cb := c.cur.Load(); !cb.SummaryDelivered && cb.Summary != "" {
			kids = append(kids, c)
			summaries = append(summaries, cb.Summary)
		}
	}
	return kids, summaries
}

// charged is branch b once charged ch, its cut remainder (if any) under
// handle.
func (m *Manager) charged(b *Branch, ch Charge, handle string) *Branch {
	nb := b.Clone()
	nb.Used += ch.Tokens
	nb.Calls++
	addUsage(nb, ch.Upstream, ch.Name, ch.Tokens)
	nb.Level = ch.Level
	if levelRank(nb.Level) < 0 {
		nb.Level = policy.LevelOf(nb.Used, nb.Budget, m.set.Thresholds).String()
	}
	if ch.Cut {
		nb.Cuts = addCut(nb.Cuts, handle)
		nb.CutCount++
	}
	return nb
}

// markDelivered stores the children kids of n as written with their
// summaries delivered, and drops them from n's pending list.
func (m *Manager) markDelivered(n *node, kids []*node, delivered []*Branch) {
	if len(kids) == 0 {
		return
	}
	done := make(map[string]bool, len(kids))
	for i, c := range kids {
		c.cur.Store(delivered[i])
		done[c.id] = true
	}
	m.mu.Lock()
	n.pending = slices.DeleteFunc(n.pending, func(id string) bool { return done[id] })
	m.mu.Unlock()
}

// listedCuts is how many handles of its latest cut results a branch's
// record lists (store.ListedCuts, the store trims older records to it).
const listedCuts = store.ListedCuts

// addCut returns the list of a branch's latest cut handles with handle
// added, the oldest dropped past listedCuts. cuts is the branch's clone's
// own list.
func addCut(cuts []string, handle string) []string {
	if len(cuts) >= listedCuts {
		cuts = append(cuts[:0], cuts[len(cuts)-listedCuts+1:]...)
	}
	return append(cuts, handle)
}

// newCallHandle returns a fresh handle for a cut of branch's next result,
// as newID(branch+"~", 6) does. Every charge makes one and few are ever
// used (only a cut keeps it), so its six random bytes come from the
// runtime's generator (ChaCha8, seeded from the operating system's
// entropy, per thread, no system call) rather than crypto/rand: a handle
// must only not repeat, across restarts too; it grants nothing, since
// branch_recall checks that its branch is the caller's session's.
func newCallHandle(branch string) string {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], rand.Uint64())
	var h [12]byte
	hex.Encode(h[:], b[:6])
	return branch + "~" + string(h[:])
}

// rootAnswerReserve is what a limited main thread keeps, beyond the
// results it receives, to pay for the answers of a branch (create and
// return) once its results no longer fit: its last result tells it to work
// in branches, so it must be able to start one.
const rootAnswerReserve = createAnswerReserve

// estimateTokens counts the tokens of a cut remainder for its event; past
// 256 KiB it estimates four bytes a token rather than hold the branch's
// lock while counting megabytes.
func (m *Manager) estimateTokens(rest []byte) int {
	if len(rest) > 256<<10 {
		return len(rest) / 4
	}
	return m.count.CountText(string(rest))
}

// ArchiveLate keeps a result that arrived after its branch closed (its
// deadline passed while the call ran, say) in the closed branch's archive,
// charged to nobody, and returns the call handle that branch_recall reads
// it back with. ch is what Charge's fit would have been given: its
// Upstream, Method, Name, Args and Result are kept.
func (m *Manager) ArchiveLate(ctx context.Context, session, branch string, ch Charge) (string, error) {
	_, n, err := m.branchOf(session, branch)
	if err != nil {
		return "", err
	}
	if err := n.lock(ctx); err != nil {
		return "", err
	}
	defer n.unlock()
	b := n.cur.Load()
	if b.Status == StatusActive {
		return "", fmt.Errorf("%w: fold: branch %s is active: charge the result instead", ErrInvalidArgument, b.ID)
	}
	rec := &CallRecord{
		Time: m.now(), Upstream: ch.Upstream, Method: ch.Method, Name: ch.Name,
		Args: ch.Args, Result: string(ch.Result),
	}
	if err := m.commit(context.WithoutCancel(ctx), &Batch{Calls: []BatchCall{{Branch: b.ID, Rec: rec}}}); err != nil {
		return "", fmt.Errorf("fold: archive the late result of %s: %w", b.ID, err)
	}
	return callHandle(b.ID, rec.Seq), nil
}
