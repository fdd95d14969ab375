package fold

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/foldproxy/foldproxy/fold/memory"
	"github.com/foldproxy/foldproxy/policy"
)

// Budget accounting between a parent and its children. A child's budget is
// not reserved out of its parent's: it must only be no larger than what the
// parent has left when the child is created. While the child works, its
// tool results are charged to the child alone; when it returns, the parent
// is charged the tokens of what it receives, the return message and return
// value as the parent sees them. A forced return charges the parent nothing
// at once: its automatic summary is appended to the parent's next result,
// whose tokens the parent pays.

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

// returnArgs are branch_return's arguments.
type returnArgs struct {
	BranchID    string
	Message     string
	ReturnValue string // compact JSON text; "" when absent
	// ExtractMemory is extract_memory: true makes the branch a memory
	// candidate and the answer says whether it was queued; false opts it
	// out; nil leaves it to memory.autoExtract and memory.extractAll.
	ExtractMemory *bool
}

// returnAnswer is branch_return's answer, which the parent receives and is
// charged for: the message (and return value) as the parent keeps them,
// after the fold-time scan, and the branch's own figures.
// The branch's id is not repeated: the caller named it, or returned the
// innermost branch, which branch_create answered.
type returnAnswer struct {
	TokensUsed            int             `json:"tokens_used"`
	Message               string          `json:"message"`
	ReturnValue           json.RawMessage `json:"return_value,omitempty"`
	ChildrenForceReturned []string        `json:"children_force_returned,omitempty"`
	ParentRemaining       *int            `json:"parent_remaining,omitempty"` // absent: unlimited
	// ParentForceReturned is set when this answer spent the parent's last
	// tokens, so that the parent, a branch, was force-returned with it.
	ParentForceReturned bool   `json:"parent_force_returned,omitempty"`
	MemoryQueued        bool   `json:"memory_queued,omitempty"`
	Memory              string `json:"memory,omitempty"` // "unavailable": no memories in this proxy

	text string // the answer as rendered for its record, once final (toolResult)
}

func (a *returnAnswer) rendered() string { return a.text }

// memoryUnavailable is the answer's memory field when memories were asked
// for and the Manager has no Memories.
const memoryUnavailable = "unavailable"

// rawValue turns a stored return value (compact JSON text) into the JSON
// value it was.
func rawValue(s string) json.RawMessage {
	if s == "" {
		return nil
	}
	return json.RawMessage(s)
}

// chargeAnswer fixes an answer's figure of what its receiver has left
// after paying for the answer itself: it renders the answer with set
// called on the remaining budget (nil when unlimited) until the figure and
// the tokens agree, and returns the tokens and the last rendering, which
// is the answer as it stands (the caller sends it unless it changes the
// answer again). rem is what the receiver had before, -1 when unlimited.
func (m *Manager) chargeAnswer(v any, rem int, set func(*int)) (int, string, error) {
	if rem < 0 {
		// Unlimited (the main thread by default): the answer holds no
		// figure that depends on its own tokens, so that one count is
		// exact.
		text, err := answerText(v)
		if err != nil {
			return 0, "", err
		}
		return m.count.CountText(text), text, nil
	}
	tokens := 0
	var text string
	for range 4 {
		if rem >= 0 {
			left := max(rem-tokens, 0)
			set(&left)
		}
		var err error
		if text, err = answerText(v); err != nil {
			return 0, "", err
		}
		n := m.count.CountText(text)
		if n == tokens {
			break
		}
		tokens = n
	}
	return tokens, text, nil
}

func remaining(b *Branch) int {
	if b.Budget <= 0 {
		return -1
	}
	return max(b.Budget-b.Used, 0)
}

// create is branch_create.
func (m *Manager) create(ctx context.Context, sess string, a createArgs) (*createAnswer, error) {
	s, err := m.sessionOf(sess)
	if err != nil {
		return nil, err
	}
	desc, err := cleanText("description", a.Description, MaxDescription)
	if err != nil {
		return nil, err
	}
	if strings.TrimSpace(desc) == "" {
		return nil, fmt.Errorf("%w: description is required: say in a few words what the branch is for", ErrInvalidArgument)
	}
	prompt, err := cleanText("prompt", a.Prompt, MaxPrompt)
	if err != nil {
		return nil, err
	}
	budget := m.set.DefaultBudget
	clamp := a.Budget == nil // the default is clamped to what the parent has left
	budgetFrom := ""
	if a.Budget == nil {
		if b, from := m.proposeBudget(desc + "\n" + prompt); b > 0 {
			budget, budgetFrom = b, from
		}
	}
	if a.Budget != nil {
		if *a.Budget < 1 {
			return nil, fmt.Errorf("%w: budget %d must be at least 1 token (omit it for the default of %d)", ErrInvalidArgument, *a.Budget, m.set.DefaultBudget)
		}
		budget = *a.Budget
	}
	if budget > m.set.MaxBudget {
		return nil, fmt.Errorf("%w: budget %d is above the maximum of %d tokens; ask for %d or less", ErrBudgetExceeded, budget, m.set.MaxBudget, m.set.MaxBudget)
	}
	timeout := m.set.DefaultTimeout.D()
	if a.TimeoutSeconds != nil {
		v := *a.TimeoutSeconds
		if !(v > 0) || v > 1e9 {
			return nil, fmt.Errorf("%w: timeout_seconds %v must be a positive number of seconds (omit it for the default of %v)", ErrInvalidArgument, v, m.set.DefaultTimeout.D().Seconds())
		}
		timeout = time.Duration(v * float64(time.Second))
		if timeout > m.set.MaxTimeout.D() {
			return nil, fmt.Errorf("%w: timeout_seconds %v is above the maximum of %v seconds; ask for %v or less", ErrInvalidArgument, v, m.set.MaxTimeout.D().Seconds(), m.set.MaxTimeout.D().Seconds())
		}
	}

	parent, err := m.parentFor(s, a.ParentBranchID)
	if err != nil {
		return nil, err
	}
	if depth := parent.depth + 1; depth > m.set.MaxDepth {
		return nil, fmt.Errorf("%w: a branch under %s would be at depth %d, beyond the maximum depth of %d; do this work in the current branch, or create the branch from a shallower one", ErrMaxDepthExceeded, parent.id, depth, m.set.MaxDepth)
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
	for _, d := range deps {
		b.DependsOn = append(b.DependsOn, d.id)
	}
	ans := &createAnswer{
		BranchID: b.ID, Depth: b.Depth, Budget: budget, BudgetFrom: budgetFrom, TimeoutSeconds: timeout.Seconds(),
		Seal: m.seal(ctx, s.id, b.ID),
	}
	for _, d := range deps {
		db := d.cur.Load()
		ans.Dependencies = append(ans.Dependencies, dependency{
			BranchID: db.ID, Description: db.Description, Status: db.Status, Reason: db.Reason,
			Message: db.Message, ReturnValue: rawValue(db.ReturnValue), Summary: db.Summary,
		})
	}
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
	if rem := remaining(pb); rem >= 0 && tokens > rem {
		if pb.Depth == 0 {
			return nil, fmt.Errorf("%w: the main thread has %d tokens left of its budget of %d (fold.rootBudget), fewer than the %d of this answer: it is at its limit. Finish with what you have; to go on, the user can raise fold.rootBudget or start a new session", ErrBudgetExceeded, rem, pb.Budget, tokens)
		}
		return nil, fmt.Errorf("%w: parent %s has %d tokens left, fewer than the %d of this answer; return the parent and work from a branch with budget left", ErrBudgetExceeded, pb.ID, rem, tokens)
	}

	// Once decided, the writes complete even if the caller goes away, so
	// that the store never holds half a creation.
	wctx := context.WithoutCancel(ctx)
	npb := pb.clone()
	npb.Used += tokens
	npb.Calls++
	addUsage(npb, "foldproxy", ToolCreate, tokens)
	npb.Level = policy.LevelOf(npb.Used, npb.Budget, m.set.Thresholds).String()
	cargs, _ := json.Marshal(struct {
		Description string `json:"description"`
	}{desc})
	batch := &Batch{
		Calls: []BatchCall{{Branch: parent.id, Rec: &CallRecord{
			Time: now, Upstream: "foldproxy", Method: "tools/call", Name: ToolCreate,
			Args: string(cargs), Result: text, Tokens: tokens,
		}}},
		Branches: []*Branch{b, npb},
	}
	if err := m.commit(wctx, batch); err != nil {
		return nil, fmt.Errorf("fold: create branch: %w", err)
	}
	ans.text = text // what the parent was charged for is what it receives
	parent.cur.Store(npb)
	n := m.newNode(b)
	m.mu.Lock()
	parent.kids = append(parent.kids, b.ID)
	m.nodes[b.ID] = n
	s.nodes[b.ID] = n
	s.active[b.ID] = n
	m.mu.Unlock()
	registered = true
	if err := n.lock(ctx); err == nil { // uncontended: nobody else knows n yet
		m.armLocked(n)
		n.unlock()
	}
	cev := branchEvent("created", b)
	cev.Tokens = tokens // the create answer, charged to the parent
	m.emit(ctx, cev)
	m.levelEvent(ctx, pb, npb)
	if len(b.Injected) > 0 {
		if err := m.mem.MarkUsed(wctx, b.Injected, true); err != nil {
			m.log.Warn("memory: could not record an injection", "branch", b.ID, "err", err)
		}
	}
	return ans, nil
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

// ret is branch_return.
func (m *Manager) ret(ctx context.Context, sess string, a returnArgs) (*returnAnswer, error) {
	s, err := m.sessionOf(sess)
	if err != nil {
		return nil, err
	}
	msg, err := cleanText("message", a.Message, MaxMessage)
	if err != nil {
		return nil, err
	}
	if strings.TrimSpace(msg) == "" {
		return nil, fmt.Errorf("%w: message is required: give the parent a concise account of the findings", ErrInvalidArgument)
	}
	if n := utf8.RuneCountInString(a.ReturnValue); n > MaxMessage {
		return nil, fmt.Errorf("%w: return_value is %d characters of JSON; the maximum is %d: shorten it", ErrInvalidArgument, n, MaxMessage)
	}
	var n *node
	switch a.BranchID {
	case "":
		m.mu.Lock()
		n = innermostLocked(s)
		m.mu.Unlock()
		if n == nil {
			return nil, fmt.Errorf("%w: there is no active branch to return in this session; the main thread cannot be returned", ErrBranchNotFound)
		}
	case s.root.id:
		return nil, fmt.Errorf("%w: %s is the main thread of the session and cannot be returned; return a branch created with branch_create", ErrInvalidArgument, a.BranchID)
	default:
		if _, n, err = m.branchField(sess, "branch_id", a.BranchID); err != nil {
			return nil, err
		}
	}
	if b := n.cur.Load(); b.Status != StatusActive {
		return nil, closedErr(b)
	}
	if msg, err = m.scanText(ctx, "message", msg); err != nil {
		return nil, err
	}
	rv, err := m.scanText(ctx, "return_value", a.ReturnValue)
	if err != nil {
		return nil, err
	}
	if rv != "" && !json.Valid([]byte(rv)) {
		// A redaction broke the JSON (a secret spanning a quote): keep
		// the scrubbed text, as a JSON string.
		q, _ := marshal(rv, false)
		rv = string(q)
	}

	parent := m.lookup(n.parent)
	if parent == nil {
		return nil, fmt.Errorf("fold: branch %s has no parent %s in memory", n.id, n.parent)
	}
	if err := parent.lock(ctx); err != nil {
		return nil, err
	}
	defer parent.unlock()
	if err := n.lock(ctx); err != nil {
		return nil, err
	}
	nUnlocked := false
	defer func() {
		if !nUnlocked {
			n.unlock()
		}
	}()
	b := n.cur.Load()
	if b.Status != StatusActive {
		return nil, closedErr(b)
	}

	// The answer is known before the branch closes: closing does not
	// change what it used, and its active descendants close in the order
	// activeDescendants lists them.
	ans := &returnAnswer{
		TokensUsed: b.Used, Message: msg, ReturnValue: rawValue(rv),
		ChildrenForceReturned: m.activeDescendants(n),
	}
	asked := a.ExtractMemory != nil && *a.ExtractMemory
	// shown: the answer says whether a memory was queued, which may change
	// it once the branch is closed; otherwise a candidate is extracted
	// quietly after the return (memory.autoExtract), and the answer is
	// the same either way.
	shown := m.mem != nil && (asked || (a.ExtractMemory == nil && m.mem.Settings().ExtractAll))
	quiet := !shown && m.mem != nil && a.ExtractMemory == nil && m.mem.Settings().AutoExtractEnabled() && lessonWorthy(msg)
	extract := shown
	if asked && m.mem == nil {
		ans.Memory = memoryUnavailable
	}
	ans.MemoryQueued = extract // at most what the answer will say
	pb := parent.cur.Load()
	// text is the answer as it stands: rendered again whenever it changes.
	tokens, text, err := m.chargeAnswer(ans, remaining(pb), func(p *int) { ans.ParentRemaining = p })
	if err != nil {
		return nil, err
	}
	if rem := remaining(pb); rem >= 0 && tokens >= rem && parent.depth > 0 {
		// The answer spends the parent's last tokens: it says so.
		ans.ParentForceReturned = true
		if tokens, text, err = m.chargeAnswer(ans, rem, func(p *int) { ans.ParentRemaining = p }); err != nil {
			return nil, err
		}
	}
	if rem := remaining(pb); rem >= 0 && tokens > rem {
		return nil, fmt.Errorf("%w: the return answer is %d tokens but parent %s has %d left; shorten the message to the essentials and return again", ErrBudgetExceeded, tokens, pb.ID, rem)
	}

	// Charge the parent what it receives, and archive it there: nothing a
	// branch received is lost.
	parentCharge := func(tokens int) (batch *Batch, npb *Branch, forceParent bool, err error) {
		npb = pb.clone()
		npb.Used += tokens
		npb.Calls++
		addUsage(npb, "foldproxy", ToolReturn, tokens)
		npb.Level = policy.LevelOf(npb.Used, npb.Budget, m.set.Thresholds).String()
		args, _ := json.Marshal(struct {
			BranchID string `json:"branch_id"`
		}{n.id})
		ans.text = text // the last rendering is the answer sent
		batch = &Batch{Calls: []BatchCall{{Branch: parent.id, Rec: &CallRecord{
			Time: m.now(), Upstream: "foldproxy", Method: "tools/call", Name: ToolReturn,
			Args: string(args), Result: text, Tokens: tokens,
		}}}}
		forceParent = parent.depth > 0 && (ans.ParentForceReturned || npb.Budget > 0 && npb.Used >= npb.Budget)
		if !forceParent {
			batch.Branches = []*Branch{npb}
		}
		return batch, npb, forceParent, nil
	}
	// Without a memory extraction, which may shorten the answer once the
	// branch is closed, the parent's charge is written with the return:
	// one write, all or nothing.
	var batch *Batch
	var npb *Branch
	var forceParent bool
	if !extract {
		if batch, npb, forceParent, err = parentCharge(tokens); err != nil {
			return nil, err
		}
	}
	wctx := context.WithoutCancel(ctx)
	if _, err := m.closeWithLocked(wctx, n, StatusReturned, "", func(b *Branch) {
		b.Message, b.ReturnValue = msg, rv
	}, batch); err != nil {
		return nil, fmt.Errorf("fold: return branch %s: %w", n.id, err)
	}
	n.unlock()
	nUnlocked = true
	b = n.cur.Load()
	if extract {
		if ans.MemoryQueued = m.extractMemory(wctx, b); !ans.MemoryQueued {
			// The answer is shorter than the one checked against the
			// parent's budget: count it again.
			if tokens, text, err = m.chargeAnswer(ans, remaining(pb), func(p *int) { ans.ParentRemaining = p }); err != nil {
				return nil, err
			}
		}
		if batch, npb, forceParent, err = parentCharge(tokens); err != nil {
			return nil, err
		}
		if err := m.commit(wctx, batch); err != nil {
			return nil, fmt.Errorf("fold: charge parent %s for the return of %s: %w", parent.id, n.id, err)
		}
	}
	if forceParent {
		if _, err := m.closeLocked(wctx, parent, StatusForced, ReasonBudget, func(b *Branch) { *b = *npb }); err != nil {
			return nil, fmt.Errorf("fold: force-return parent %s: %w", parent.id, err)
		}
	} else {
		parent.cur.Store(npb)
	}
	if quiet {
		m.extractMemory(wctx, b)
	}
	ev := branchEvent("returned", b)
	ev.Tokens = tokens
	m.emit(ctx, ev)
	m.levelEvent(ctx, pb, npb)
	return ans, nil
}

// activeDescendants lists the active descendants of n in the order
// closeLocked closes them: children last created first, each after its own
// descendants.
func (m *Manager) activeDescendants(n *node) []string {
	var out []string
	kids := m.children(n)
	for i := len(kids) - 1; i >= 0; i-- {
		c := m.lookup(kids[i])
		if c == nil || !c.active() {
			continue
		}
		out = append(out, m.activeDescendants(c)...)
		out = append(out, c.id)
	}
	return out
}

// addUsage adds tokens to a branch's usage by tool and upstream.
func addUsage(b *Branch, upstream, name string, tokens int) {
	if b.ByTool == nil {
		b.ByTool = make(map[string]int)
	}
	if b.ByUpstream == nil {
		b.ByUpstream = make(map[string]int)
	}
	b.ByTool[upstream+"/"+name] += tokens
	b.ByUpstream[upstream] += tokens
}

// levelRank orders warning level names; -1 for an unknown name.
func levelRank(name string) int {
	if l, ok := policy.ParseLevel(name); ok {
		return int(l)
	}
	return -1
}

// levelEvent emits a warning event when a branch's level rose.
func (m *Manager) levelEvent(ctx context.Context, before, after *Branch) {
	if levelRank(after.Level) > levelRank(before.Level) {
		m.emit(ctx, branchEvent("warning", after))
	}
}

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
	nb := b.clone()
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
