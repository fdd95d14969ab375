package fold

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/foldproxy/foldproxy/fold/memory"
	"github.com/foldproxy/foldproxy/policy"
)

// createArgs are branch_create's arguments.
type createArgs struct {
	Description    string
	Prompt         string
	Budget         *int
	TimeoutSeconds *float64
	ParentBranchID string // parent_branch_id, or its alias parent_id
	DependsOn      []string
	InjectMemories *bool // inject_memories; nil: inject when memories are on
}

// createAnswer is branch_create's answer. The parent receives it and is
// charged its tokens, so it says only what the agent needs and nothing
// twice: empty and unlimited fields are left out.
type createAnswer struct {
	BranchID string `json:"branch_id"`
	// Seal ties the answer to the session it was made for (modelseal.go).
	Seal   string `json:"seal,omitempty"`
	Depth  int    `json:"depth"`
	Budget int    `json:"budget"`
	// BudgetFrom says where a learned budget came from ("7 similar
	// branches"); absent: the budget asked for, or the default.
	BudgetFrom      string `json:"budget_from,omitempty"`
	ParentRemaining *int   `json:"parent_remaining,omitempty"` // absent: unlimited
	// TimeoutSeconds is the time to the deadline: an agent cannot use a
	// clock time it does not know (branch_status gives both).
	TimeoutSeconds float64 `json:"timeout_seconds"`
	// InjectedContext holds the memories given to the branch
	// (inject_memories), which the new branch pays for.
	InjectedContext []memory.Brief `json:"injected_context,omitempty"`
	// Memory is "unavailable" when memories were asked for and this proxy
	// has none.
	Memory       string       `json:"memory,omitempty"`
	Dependencies []dependency `json:"dependencies,omitempty"`

	text string // the answer as rendered for its record, once final (toolResult)
}

func (a *createAnswer) rendered() string { return a.text }

// dependency is what a new branch learns of a branch it depended on.
type dependency struct {
	BranchID    string          `json:"branch_id"`
	Description string          `json:"description,omitempty"`
	Status      Status          `json:"status"`
	Reason      string          `json:"reason,omitempty"`
	Message     string          `json:"message,omitempty"`
	ReturnValue json.RawMessage `json:"return_value,omitempty"`
	Summary     string          `json:"summary,omitempty"`
}

// create is branch_create.
func (m *Manager) create(ctx context.Context, sess string, a createArgs) (*createAnswer, error) {
	s, err := m.sessionOf(sess)
	if err != nil {
		return nil, err
	}
	desc, prompt, err := createTexts(a)
	if err != nil {
		return nil, err
	}
	clamp := a.Budget == nil // the default is clamped to what the parent has left
	budget, budgetFrom, err := m.createBudget(a, desc, prompt)
	if err != nil {
		return nil, err
	}
	timeout, err := m.createTimeout(a)
	if err != nil {
		return nil, err
	}

	parent, err := m.createParent(s, a.ParentBranchID)
	if err != nil {
		return nil, err
	}
	if err := m.checkParentBudget(parent.cur.Load(), &budget, clamp); err != nil {
		return nil, err
	}
	m.mu.Lock()
	err = m.checkCreateLocked(s, m.now(), false)
	m.mu.Unlock()
	if err != nil {
		return nil, err
	}
	deps, err := m.dependencies(s, parent, a.DependsOn)
	if err != nil {
		return nil, err
	}
	if desc, err = m.scanText(ctx, "description", desc); err != nil {
		return nil, err
	}
	if prompt, err = m.scanText(ctx, "prompt", prompt); err != nil {
		return nil, err
	}
	if err := m.waitDependencies(ctx, deps); err != nil {
		return nil, err
	}
	injected, injectedTokens := []memory.Brief{}, 0
	if a.InjectMemories == nil || *a.InjectMemories {
		injected, injectedTokens = m.injectMemories(ctx, desc, prompt, budget)
	}

	if err := parent.lock(ctx); err != nil {
		return nil, err
	}
	defer parent.unlock()
	pb := parent.cur.Load()
	if pb.Status != StatusActive {
		return nil, closedErr(pb)
	}
	if err := m.checkParentBudget(pb, &budget, clamp); err != nil {
		return nil, err
	}
	now := m.now()
	m.mu.Lock()
	err = m.checkCreateLocked(s, now, true)
	m.mu.Unlock()
	if err != nil {
		return nil, err
	}
	registered := false
	defer func() { m.release(s, registered) }()

	b := &Branch{
		ID: newID("b-", 8), Session: s.id, Parent: parent.id, Depth: parent.depth + 1,
		Description: desc, Prompt: prompt, Status: StatusActive, Budget: budget,
		Level: policy.Normal.String(), Created: now, Deadline: now.Add(timeout),
		Used: injectedTokens, Ord: len(m.children(parent)) + 1,
	}
	b.Level = policy.LevelOf(b.Used, b.Budget, m.set.Thresholds).String()
	for _, it := range injected {
		b.Injected = append(b.Injected, it.ID)
	}
	b.DependsOn = nodeIDs(deps)
	ans := &createAnswer{
		BranchID: b.ID, Depth: b.Depth, Budget: budget, BudgetFrom: budgetFrom, TimeoutSeconds: timeout.Seconds(),
		Seal: m.seal(ctx, s.id, b.ID),
	}
	ans.Dependencies = dependencyAnswers(deps)
	if a.InjectMemories != nil && *a.InjectMemories && m.mem == nil {
		ans.Memory = memoryUnavailable
	}
	// The parent receives the answer and pays for it, but for the injected
	// memories, which the new branch paid for.
	tokens, text, err := m.chargeAnswer(ans, remaining(pb), func(p *int) { ans.ParentRemaining = p })
	if err != nil {
		return nil, err
	}
	if len(injected) > 0 {
		ans.InjectedContext = injected
		if text, err = answerText(ans); err != nil { // the answer with them
			return nil, err
		}
	}
	if err := answerFits(pb, tokens); err != nil {
		return nil, err
	}

	// Once decided, the writes complete even if the caller goes away, so
	// that the store never holds half a creation.
	wctx := context.WithoutCancel(ctx)
	npb, err := m.commitCreate(wctx, parent.id, pb, b, desc, text, tokens, now)
	if err != nil {
		return nil, err
	}
	ans.text = text // what the parent was charged for is what it receives
	parent.cur.Store(npb)
	m.registerCreated(ctx, s, parent, b)
	registered = true
	m.announceCreated(ctx, wctx, b, pb, npb, tokens)
	return ans, nil
}

// announceCreated tells of the created branch b, whose parent went from pb
// to npb paying tokens for the answer, and records the memories injected
// into it as used.
func (m *Manager) announceCreated(ctx, wctx context.Context, b, pb, npb *Branch, tokens int) {
	cev := branchEvent("created", b)
	cev.Tokens = tokens // the create answer, charged to the parent
	m.emit(ctx, cev)
	m.levelEvent(ctx, pb, npb)
	if len(b.Injected) > 0 {
		if err := m.mem.MarkUsed(wctx, b.Injected, true); err != nil {
			m.log.Warn("memory: could not record an injection", "branch", b.ID, "err", err)
		}
	}
}

// nodeIDs lists the ids of ns, nil for none.
func nodeIDs(ns []*node) []string {
	var ids []string
	for _, d := range ns {
		ids = append(ids, d.id)
	}
	return ids
}

// createTexts checks the description and the prompt of a new branch.
func createTexts(a createArgs) (desc, prompt string, err error) {
	desc, err = cleanText("description", a.Description, MaxDescription)
	if err != nil {
		return "", "", err
	}
	if strings.TrimSpace(desc) == "" {
		return "", "", fmt.Errorf("%w: description is required: say in a few words what the branch is for", ErrInvalidArgument)
	}
	prompt, err = cleanText("prompt", a.Prompt, MaxPrompt)
	if err != nil {
		return "", "", err
	}
	return desc, prompt, nil
}

// createParent is the parent of a new branch, refused when the new branch
// would be too deep.
func (m *Manager) createParent(s *session, explicit string) (*node, error) {
	parent, err := m.parentFor(s, explicit)
	if err != nil {
		return nil, err
	}
	if depth := parent.depth + 1; depth > m.set.MaxDepth {
		return nil, fmt.Errorf("%w: a branch under %s would be at depth %d, beyond the maximum depth of %d; do this work in the current branch, or create the branch from a shallower one", ErrMaxDepthExceeded, parent.id, depth, m.set.MaxDepth)
	}
	return parent, nil
}

// createBudget is the budget of a new branch: the one asked for, else one
// proposed from similar branches, else the default; and where a proposed
// one came from.
func (m *Manager) createBudget(a createArgs, desc, prompt string) (budget int, budgetFrom string, err error) {
	budget = m.set.DefaultBudget
	if a.Budget == nil {
		if b, from := m.proposeBudget(desc + "\n" + prompt); b > 0 {
			budget, budgetFrom = b, from
		}
	}
	if a.Budget != nil {
		if *a.Budget < 1 {
			return 0, "", fmt.Errorf("%w: budget %d must be at least 1 token (omit it for the default of %d)", ErrInvalidArgument, *a.Budget, m.set.DefaultBudget)
		}
		budget = *a.Budget
	}
	if budget > m.set.MaxBudget {
		return 0, "", fmt.Errorf("%w: budget %d is above the maximum of %d tokens; ask for %d or less", ErrBudgetExceeded, budget, m.set.MaxBudget, m.set.MaxBudget)
	}
	return budget, budgetFrom, nil
}

// createTimeout is the timeout of a new branch: the one asked for, within
// the maximum, else the default.
func (m *Manager) createTimeout(a createArgs) (time.Duration, error) {
	timeout := m.set.DefaultTimeout.D()
	if a.TimeoutSeconds != nil {
		v := *a.TimeoutSeconds
		if !(v > 0) || v > 1e9 {
			return 0, fmt.Errorf("%w: timeout_seconds %v must be a positive number of seconds (omit it for the default of %v)", ErrInvalidArgument, v, m.set.DefaultTimeout.D().Seconds())
		}
		timeout = time.Duration(v * float64(time.Second))
		if timeout > m.set.MaxTimeout.D() {
			return 0, fmt.Errorf("%w: timeout_seconds %v is above the maximum of %v seconds; ask for %v or less", ErrInvalidArgument, v, m.set.MaxTimeout.D().Seconds(), m.set.MaxTimeout.D().Seconds())
		}
	}
	return timeout, nil
}

// dependencyAnswers is what branch_create tells of the branches a new one
// waited for.
func dependencyAnswers(deps []*node) []dependency {
	var out []dependency
	for _, d := range deps {
		db := d.cur.Load()
		out = append(out, dependency{
			BranchID: db.ID, Description: db.Description, Status: db.Status, Reason: db.Reason,
			Message: db.Message, ReturnValue: rawValue(db.ReturnValue), Summary: db.Summary,
		})
	}
	return out
}

// answerFits refuses a create answer of tokens that the parent pb has not
// the budget left to receive.
func answerFits(pb *Branch, tokens int) error {
	if rem := remaining(pb); rem >= 0 && tokens > rem {
		if pb.Depth == 0 {
			return fmt.Errorf("%w: the main thread has %d tokens left of its budget of %d (fold.rootBudget), fewer than the %d of this answer: it is at its limit. Finish with what you have; to go on, the user can raise fold.rootBudget or start a new session", ErrBudgetExceeded, rem, pb.Budget, tokens)
		}
		return fmt.Errorf("%w: parent %s has %d tokens left, fewer than the %d of this answer; return the parent and work from a branch with budget left", ErrBudgetExceeded, pb.ID, rem, tokens)
	}
	return nil
}

// commitCreate writes the new branch b and its parent pb charged for the
// create answer text of tokens in one batch, and returns the parent as
// written.
func (m *Manager) commitCreate(wctx context.Context, parentID string, pb, b *Branch, desc, text string, tokens int, now time.Time) (*Branch, error) {
	npb := pb.Clone()
	npb.Used += tokens
	npb.Calls++
	addUsage(npb, "foldproxy", ToolCreate, tokens)
	npb.Level = policy.LevelOf(npb.Used, npb.Budget, m.set.Thresholds).String()
	cargs, _ := json.Marshal(struct {
		Description string `json:"description"`
	}{desc})
	batch := &Batch{
		Calls: []BatchCall{{Branch: parentID, Rec: &CallRecord{
			Time: now, Upstream: "foldproxy", Method: "tools/call", Name: ToolCreate,
			Args: string(cargs), Result: text, Tokens: tokens,
		}}},
		Branches: []*Branch{b, npb},
	}
	if err := m.commit(wctx, batch); err != nil {
		return nil, fmt.Errorf("fold: create branch: %w", err)
	}
	return npb, nil
}

// registerCreated makes the written branch b known under parent in s and
// arms its timers.
func (m *Manager) registerCreated(ctx context.Context, s *session, parent *node, b *Branch) {
	n := m.newNode(b)
	m.mu.Lock()
	parent.kids = append(parent.kids, b.ID)
	m.nodes[b.ID] = n
	s.nodes[b.ID] = n
	s.active[b.ID] = n
	m.mu.Unlock()
	if err := n.lock(ctx); err == nil { // uncontended: nobody else knows n yet
		m.armLocked(n)
		n.unlock()
	}
}

// createAnswerReserve is what a parent must keep, beyond a clamped child
// budget, to pay for the create and return answers.
const createAnswerReserve = 120

// checkParentBudget refuses a child budget above what a limited parent has
// left; a default budget (clamp) is lowered to it instead, keeping enough
// for the answers the parent will receive.
func (m *Manager) checkParentBudget(pb *Branch, budget *int, clamp bool) error {
	rem := remaining(pb)
	if rem < 0 {
		return nil
	}
	if clamp && *budget > rem-createAnswerReserve && rem > 2*createAnswerReserve {
		*budget = rem - createAnswerReserve
		return nil
	}
	if *budget <= rem {
		return nil
	}
	if pb.Depth == 0 {
		return fmt.Errorf("%w: budget %d is above the %d tokens the main thread has left (used %d of its budget of %d, fold.rootBudget); ask for %d or less, or finish with what you have (the user can raise fold.rootBudget)", ErrBudgetExceeded, *budget, rem, pb.Used, pb.Budget, max(rem-createAnswerReserve, 0))
	}
	return fmt.Errorf("%w: budget %d is above the %d tokens left in parent %s (used %d of %d); ask for %d or less, or return the parent and work from a branch with more budget left", ErrBudgetExceeded, *budget, rem, pb.ID, pb.Used, pb.Budget, max(rem-createAnswerReserve, 0))
}

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
