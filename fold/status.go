package fold

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/foldproxy/foldproxy/policy"
)

// statusArgs are branch_status's arguments.
type statusArgs struct {
	BranchID string
	Detailed bool
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
	Children         []string       `json:"children"`
	DependsOn        []string       `json:"depends_on,omitempty"`
	Created          string         `json:"created"`
	Deadline         string         `json:"deadline,omitempty"`
	TimeoutRemaining *int           `json:"timeout_remaining_seconds,omitempty"`
	Closed           string         `json:"closed,omitempty"`
	UsageByTool      map[string]int `json:"usage_by_tool"`
	UsageByUpstream  map[string]int `json:"usage_by_upstream"`
	Calls            int            `json:"calls"`
	Cuts             []string       `json:"cuts"`
	Summary          string         `json:"summary,omitempty"`
	Message          string         `json:"message,omitempty"`
	ReturnValue      string         `json:"return_value,omitempty"`
	ArchivedCalls    []callView     `json:"archived_calls,omitempty"`
	MoreCalls        bool           `json:"more_calls,omitempty"` // the list stops short; page with branch_recall
	Branches         []*branchView  `json:"branches,omitempty"`   // the tree: children, nested
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
	Session        string      `json:"session"`
	Innermost      string      `json:"innermost_branch"`
	ActiveBranches int         `json:"active_branches"`
	Tree           *branchView `json:"tree"`
	// ModelContext is the main thread's context as the model last saw it
	// on the model wire, before and after folding (absent until a model
	// request of the session went through foldproxy).
	ModelContext *ModelContext `json:"model_context,omitempty"`
}

// Calls listed per branch by a detailed status.
const (
	detailCalls     = 200
	detailTreeCalls = 20
)

// callHandle names an archived call, for branch_recall.
func callHandle(branch string, seq int) string { return branch + "#" + strconv.Itoa(seq) }

func (m *Manager) view(b *Branch, full bool) *branchView {
	v := &branchView{
		BranchID: b.ID, Description: b.Description, Status: b.Status, Reason: b.Reason,
		BudgetTotal: b.Budget, BudgetUsed: b.Used, BudgetRemaining: remaining(b),
		WarningLevel: policy.LevelOf(b.Used, b.Budget, m.set.Thresholds).String(),
		Depth:        b.Depth, Parent: b.Parent, Children: b.Children, DependsOn: b.DependsOn,
		Created:     b.Created.UTC().Format(time.RFC3339),
		UsageByTool: b.ByTool, UsageByUpstream: b.ByUpstream, Calls: b.Calls, Cuts: b.Cuts,
		Summary: b.Summary,
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
		v.Message, v.ReturnValue = b.Message, b.ReturnValue
	}
	if v.Children == nil {
		v.Children = []string{}
	}
	if v.Cuts == nil {
		v.Cuts = []string{}
	}
	if v.UsageByTool == nil {
		v.UsageByTool = map[string]int{}
	}
	if v.UsageByUpstream == nil {
		v.UsageByUpstream = map[string]int{}
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
		v := m.view(n.cur.Load(), true)
		if a.Detailed {
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
	var walk func(n *node, depth int) (*branchView, error)
	walk = func(n *node, depth int) (*branchView, error) {
		v := m.view(n.cur.Load(), false)
		if a.Detailed {
			if err := m.addCalls(ctx, v, detailTreeCalls); err != nil {
				return nil, err
			}
		}
		if depth > m.set.MaxDepth+1 { // a corrupt store cannot make the walk loop
			return v, nil
		}
		for _, id := range v.Children {
			if c := nodes[id]; c != nil {
				cv, err := walk(c, depth+1)
				if err != nil {
					return nil, err
				}
				v.Branches = append(v.Branches, cv)
			}
		}
		return v, nil
	}
	if ans.Tree, err = walk(s.root, 0); err != nil {
		return nil, err
	}
	return ans, nil
}
