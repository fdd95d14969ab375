package fold

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/foldproxy/foldproxy/policy"
)

// statusArgs are branch_status's arguments.
type statusArgs struct {
	BranchID string
	Detailed bool
	// Acknowledge marks the orphans listed acknowledged: they are not
	// listed again.
	Acknowledge bool
	Offset      *int // the first closed branch listed in the tree, most recent first
}

// branchView is one branch as branch_status shows it.
type branchView struct {
	BranchID         string         `json:"branch_id"`
	Description      string         `json:"description,omitempty"`
	Status           Status         `json:"status"`
	Reason           string         `json:"reason,omitempty"`
	BudgetTotal      int            `json:"budget_total"` // 0: unlimited
	BudgetUsed       int            `json:"budget_used"`
	BudgetRemaining  int            `json:"budget_remaining"` // -1: unlimited
	BudgetPercent    float64        `json:"budget_percent"`
	WarningLevel     string         `json:"warning_level"`
	Depth            int            `json:"depth"`
	Parent           string         `json:"parent,omitempty"`
	Children         []string       `json:"children,omitempty"`    // the latest, at most listedChildren
	ChildCount       int            `json:"child_count,omitempty"` // all of them, when Children does not list all
	DependsOn        []string       `json:"depends_on,omitempty"`
	Created          string         `json:"created"`
	Deadline         string         `json:"deadline,omitempty"`
	TimeoutRemaining *int           `json:"timeout_remaining_seconds,omitempty"`
	Closed           string         `json:"closed,omitempty"`
	UsageByTool      map[string]int `json:"usage_by_tool,omitempty"`
	UsageByUpstream  map[string]int `json:"usage_by_upstream,omitempty"`
	// UsageByKind (detailed) is the usage in the design's categories:
	// file_reads, searches, tool_calls, reasoning (usage.go).
	UsageByKind   map[string]int  `json:"usage_by_kind,omitempty"`
	Calls         int             `json:"calls"`
	Cuts          []string        `json:"cuts,omitempty"`      // the latest, at most listedCuts
	CutCount      int             `json:"cut_count,omitempty"` // all of them, when Cuts does not list all
	Summary       string          `json:"summary,omitempty"`
	Message       string          `json:"message,omitempty"`
	ReturnValue   json.RawMessage `json:"return_value,omitempty"`
	ArchivedCalls []callView      `json:"archived_calls,omitempty"`
	MoreCalls     bool            `json:"more_calls,omitempty"` // the list stops short; page with branch_recall
	Branches      []*branchView   `json:"branches,omitempty"`   // the tree: children, nested
}

// closedView is a closed branch as the session's tree shows it: enough to
// find it; branch_status with its branch_id shows the rest.
type closedView struct {
	BranchID    string        `json:"branch_id"`
	Description string        `json:"description,omitempty"`
	Status      Status        `json:"status"`
	Reason      string        `json:"reason,omitempty"`
	BudgetUsed  int           `json:"budget_used"`
	Calls       int           `json:"calls"`
	Branches    []*closedView `json:"branches,omitempty"`
}

// callView is one archived call in a detailed status.
type callView struct {
	Seq        int    `json:"seq"`
	Time       string `json:"time"`
	Upstream   string `json:"upstream"`
	Name       string `json:"name"`
	Tokens     int    `json:"tokens"`
	CutHandle  string `json:"cut_handle,omitempty"`
	CallHandle string `json:"call_handle"`
}

// treeAnswer is branch_status without a branch: the session's tree.
type treeAnswer struct {
	Session        string      `json:"-"` // a session id is a credential: never shown to the model
	Innermost      string      `json:"innermost_branch"`
	ActiveBranches int         `json:"active_branches"`
	Tree           *branchView `json:"tree"`
	// ModelContext is the main thread's context as the model last saw it
	// on the model wire, before and after folding (absent until a model
	// request of the session went through foldproxy).
	ModelContext *ModelContext `json:"model_context,omitempty"`
	// Closed lists closed branches of the session, most recent first, one
	// page of treeClosedPage from the offset asked for; NextOffset is set
	// when there are more.
	Closed     []*closedView `json:"closed,omitempty"`
	NextOffset int           `json:"next_offset,omitempty"`
	// Orphans are branches of earlier sessions that ended without a
	// return (orphans.go), the latest listedOrphans; OrphanCount counts
	// them all when there are more.
	Orphans     []orphanView `json:"orphans,omitempty"`
	OrphanCount int          `json:"orphan_count,omitempty"`
	// Acknowledged counts the orphans acknowledged by this call.
	Acknowledged int `json:"acknowledged,omitempty"`
}

// Calls listed per branch by a detailed status.
const (
	detailCalls     = 200
	detailTreeCalls = 20
	// treeClosedPage bounds the closed branches the session's tree lists,
	// so that branch_status of a long session stays small.
	treeClosedPage = 20
	// treeDescription bounds a closed branch's description in the tree.
	treeDescription = 80
	// listedChildren bounds the children a branch lists (the latest), so
	// that the status of a main thread that ran hundreds of branches
	// stays small too: its active children are in the tree, and its closed
	// ones in the paged list.
	listedChildren = 20
)

// callHandle names an archived call, for branch_recall.
func callHandle(branch string, seq int) string { return branch + "#" + strconv.Itoa(seq) }

func (m *Manager) view(n *node, full bool) *branchView {
	b := n.cur.Load()
	v := &branchView{
		BranchID: b.ID, Description: b.Description, Status: b.Status, Reason: b.Reason,
		BudgetTotal: b.Budget, BudgetUsed: b.Used, BudgetRemaining: remaining(b),
		WarningLevel: policy.LevelOf(b.Used, b.Budget, m.set.Thresholds).String(),
		Depth:        b.Depth, Parent: b.Parent, DependsOn: b.DependsOn,
		Created:     b.Created.UTC().Format(time.RFC3339),
		UsageByTool: b.ByTool, UsageByUpstream: b.ByUpstream, Calls: b.Calls, Cuts: b.Cuts,
		Summary: b.Summary,
	}
	if b.CutCount > len(b.Cuts) {
		v.CutCount = b.CutCount
	}
	kids := m.children(n)
	v.Children = kids[max(len(kids)-listedChildren, 0):]
	if len(kids) > len(v.Children) {
		v.ChildCount = len(kids)
	}
	if b.Budget > 0 {
		v.BudgetPercent = math.Round(float64(b.Used)*1000/float64(b.Budget)) / 10
	}
	if !b.Deadline.IsZero() {
		v.Deadline = b.Deadline.UTC().Format(time.RFC3339)
		if b.Status == StatusActive {
			left := max(int(b.Deadline.Sub(m.now())/time.Second), 0)
			v.TimeoutRemaining = &left
		}
	}
	if !b.Closed.IsZero() {
		v.Closed = b.Closed.UTC().Format(time.RFC3339)
	}
	if full {
		v.Message, v.ReturnValue = b.Message, rawValue(b.ReturnValue)
	}
	return v
}

// addCalls lists up to limit archived calls of v's branch.
func (m *Manager) addCalls(ctx context.Context, v *branchView, limit int) error {
	calls, err := m.store.Calls(ctx, v.BranchID, 0, limit+1)
	if err != nil {
		return fmt.Errorf("fold: read the archive of %s: %w", v.BranchID, err)
	}
	if len(calls) > limit {
		calls, v.MoreCalls = calls[:limit], true
	}
	v.ArchivedCalls = make([]callView, 0, len(calls))
	for _, c := range calls {
		v.ArchivedCalls = append(v.ArchivedCalls, callView{
			Seq: c.Seq, Time: c.Time.UTC().Format(time.RFC3339), Upstream: c.Upstream, Name: c.Name,
			Tokens: c.Tokens, CutHandle: c.Handle, CallHandle: callHandle(v.BranchID, c.Seq),
		})
	}
	return nil
}

// status is branch_status.
func (m *Manager) status(ctx context.Context, sess string, a statusArgs) (any, error) {
	if a.BranchID != "" {
		_, n, err := m.branchField(sess, "branch_id", a.BranchID)
		if err != nil {
			return nil, err
		}
		v := m.view(n, true)
		if a.Detailed {
			v.UsageByKind = usageByKind(n.cur.Load())
			if err := m.addCalls(ctx, v, detailCalls); err != nil {
				return nil, err
			}
		}
		return v, nil
	}
	s, err := m.sessionOf(sess)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	inner := innermostLocked(s)
	nodes := make(map[string]*node, len(s.nodes))
	for id, n := range s.nodes {
		nodes[id] = n
	}
	active := len(s.active)
	m.mu.Unlock()
	if inner == nil {
		inner = s.root
	}
	ans := &treeAnswer{Session: s.id, Innermost: inner.id, ActiveBranches: active, ModelContext: s.root.cur.Load().ModelContext}

	// Active branches form the tree, in full. Closed branches are listed
	// apart, compact and paged, most recent first: a closed branch's own
	// closed descendants nest under it.
	var closedTops []*Branch
	var walk func(n *node, depth int) (*branchView, error)
	walk = func(n *node, depth int) (*branchView, error) {
		v := m.view(n, false)
		if a.Detailed {
			v.UsageByKind = usageByKind(n.cur.Load())
			if err := m.addCalls(ctx, v, detailTreeCalls); err != nil {
				return nil, err
			}
		}
		if depth > m.set.MaxDepth+1 { // a corrupt store cannot make the walk loop
			return v, nil
		}
		for _, id := range m.children(n) {
			c := nodes[id]
			if c == nil {
				continue
			}
			if cb := c.cur.Load(); cb.Status != StatusActive {
				closedTops = append(closedTops, cb)
				continue
			}
			cv, err := walk(c, depth+1)
			if err != nil {
				return nil, err
			}
			v.Branches = append(v.Branches, cv)
		}
		return v, nil
	}
	if ans.Tree, err = walk(s.root, 0); err != nil {
		return nil, err
	}
	slices.SortStableFunc(closedTops, func(x, y *Branch) int { return y.Created.Compare(x.Created) })
	off := 0
	if a.Offset != nil {
		off = min(*a.Offset, len(closedTops))
	}
	end := min(off+treeClosedPage, len(closedTops))
	var compact func(b *Branch, depth int) *closedView
	compact = func(b *Branch, depth int) *closedView {
		desc := b.Description
		if r := []rune(desc); len(r) > treeDescription {
			desc = string(r[:treeDescription-1]) + "…"
		}
		cv := &closedView{BranchID: b.ID, Description: desc, Status: b.Status, Reason: b.Reason, BudgetUsed: b.Used, Calls: b.Calls}
		if depth > m.set.MaxDepth+1 {
			return cv
		}
		var kids []string
		if n := nodes[b.ID]; n != nil {
			kids = m.children(n)
		}
		for _, id := range kids {
			if c := nodes[id]; c != nil {
				cv.Branches = append(cv.Branches, compact(c.cur.Load(), depth+1))
			}
		}
		return cv
	}
	for _, b := range closedTops[off:end] {
		ans.Closed = append(ans.Closed, compact(b, b.Depth))
	}
	if end < len(closedTops) {
		ans.NextOffset = end
	}
	orphans := m.orphansFor(s)
	if a.Acknowledge {
		if err := m.acknowledge(ctx, orphans); err != nil {
			return nil, err
		}
		ans.Acknowledged = len(orphans)
		return ans, nil
	}
	if ans.Orphans, err = m.orphanViews(ctx, orphans); err != nil {
		return nil, err
	}
	if len(orphans) > len(ans.Orphans) {
		ans.OrphanCount = len(orphans)
	}
	return ans, nil
}

// chargeOwn charges an answer of a fold tool to the branch it is for: the
// named branch when it is active, else the session's innermost active
// branch, else its root. The charge is capped at what the branch has left:
// a branch at its limit can still read its own state (the cap is recorded
// as the call's tokens, so the archive and the branch agree).
func (m *Manager) chargeOwn(ctx context.Context, sess, named, name, args, text string) error {
	s, err := m.sessionOf(sess)
	if err != nil {
		return err
	}
	full := m.count.CountText(text)
	for range 8 {
		m.mu.Lock()
		n := s.nodes[named]
		if n == nil || !n.active() {
			n = innermostLocked(s)
		}
		m.mu.Unlock()
		if n == nil {
			n = s.root
		}
		if err := n.lock(ctx); err != nil {
			return err
		}
		b := n.cur.Load()
		if b.Status != StatusActive {
			n.unlock()
			if n == s.root {
				return closedErr(b)
			}
			continue // it closed meanwhile: the next one pays
		}
		tokens := full
		if rem := remaining(b); rem >= 0 {
			tokens = min(tokens, rem)
		}
		nb := b.Clone()
		nb.Used += tokens
		nb.Calls++
		addUsage(nb, "foldproxy", name, tokens)
		nb.Level = policy.LevelOf(nb.Used, nb.Budget, m.set.Thresholds).String()
		err := m.commit(context.WithoutCancel(ctx), &Batch{
			Calls: []BatchCall{{Branch: b.ID, Rec: &CallRecord{
				Time: m.now(), Upstream: "foldproxy", Method: "tools/call", Name: name,
				Args: args, Result: text, Tokens: tokens,
			}}},
			Branches: []*Branch{nb},
		})
		if err == nil {
			n.cur.Store(nb)
		}
		n.unlock()
		if err != nil {
			return fmt.Errorf("fold: charge %s for its %s answer: %w", b.ID, name, err)
		}
		m.levelEvent(ctx, b, nb)
		return nil
	}
	return fmt.Errorf("fold: no active branch to charge the %s answer to", name)
}
