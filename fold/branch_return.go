package fold

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/foldproxy/foldproxy/policy"
)

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

// ret is branch_return.
func (m *Manager) ret(ctx context.Context, sess string, a returnArgs) (*returnAnswer, error) {
	s, err := m.sessionOf(sess)
	if err != nil {
		return nil, err
	}
	msg, err := returnMessage(a)
	if err != nil {
		return nil, err
	}
	n, err := m.returnTarget(s, sess, a.BranchID)
	if err != nil {
		return nil, err
	}
	if b := n.cur.Load(); b.Status != StatusActive {
		return nil, closedErr(b)
	}
	msg, rv, err := m.scanReturn(ctx, msg, a.ReturnValue)
	if err != nil {
		return nil, err
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
	asked, extract, quiet := m.extractModes(a, msg)
	if asked && m.mem == nil {
		ans.Memory = memoryUnavailable
	}
	ans.MemoryQueued = extract // at most what the answer will say
	pb := parent.cur.Load()
	// text is the answer as it stands: rendered again whenever it changes.
	tokens, text, err := m.chargeReturn(ans, pb, parent.depth)
	if err != nil {
		return nil, err
	}

	// Charge the parent what it receives, and archive it there: nothing a
	// branch received is lost (returnCharge). Without a memory extraction, which may shorten the answer once the
	// branch is closed, the parent's charge is written with the return:
	// one write, all or nothing.
	var batch *Batch
	var npb *Branch
	var forceParent bool
	if !extract {
		batch, npb, forceParent = m.returnCharge(pb, parent, n.id, ans, text, tokens)
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
		batch, npb, forceParent = m.returnCharge(pb, parent, n.id, ans, text, tokens)
		if err := m.commit(wctx, batch); err != nil {
			return nil, fmt.Errorf("fold: charge parent %s for the return of %s: %w", parent.id, n.id, err)
		}
	}
	if err := m.settleParent(wctx, parent, npb, forceParent); err != nil {
		return nil, err
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

// extractModes says whether a branch_return asked for a memory, whether
// one is extracted with the answer saying so (shown: the answer says
// whether a memory was queued, which may change it once the branch is
// closed), and whether a candidate is extracted quietly after the return
// (memory.autoExtract), the answer the same either way.
func (m *Manager) extractModes(a returnArgs, msg string) (asked, shown, quiet bool) {
	asked = a.ExtractMemory != nil && *a.ExtractMemory
	shown = m.mem != nil && (asked || (a.ExtractMemory == nil && m.mem.Settings().ExtractAll))
	quiet = !shown && m.mem != nil && a.ExtractMemory == nil && m.mem.Settings().AutoExtractEnabled() && lessonWorthy(msg)
	return asked, shown, quiet
}

// settleParent stores the parent as charged for a return, npb, or closes
// it, force-returned, when the return spent its budget.
func (m *Manager) settleParent(wctx context.Context, parent *node, npb *Branch, forceParent bool) error {
	if forceParent {
		if _, err := m.closeLocked(wctx, parent, StatusForced, ReasonBudget, func(b *Branch) { *b = *npb }); err != nil {
			return fmt.Errorf("fold: force-return parent %s: %w", parent.id, err)
		}
		return nil
	}
	parent.cur.Store(npb)
	return nil
}

// returnMessage checks the message and the size of the return value of a
// branch_return.
func returnMessage(a returnArgs) (string, error) {
	msg, err := cleanText("message", a.Message, MaxMessage)
	if err != nil {
		return "", err
	}
	if strings.TrimSpace(msg) == "" {
		return "", fmt.Errorf("%w: message is required: give the parent a concise account of the findings", ErrInvalidArgument)
	}
	if n := utf8.RuneCountInString(a.ReturnValue); n > MaxMessage {
		return "", fmt.Errorf("%w: return_value is %d characters of JSON; the maximum is %d: shorten it", ErrInvalidArgument, n, MaxMessage)
	}
	return msg, nil
}

// returnTarget is the branch of session s (sess) that a branch_return
// returns: the one named id, else the innermost active one; never the main
// thread.
func (m *Manager) returnTarget(s *session, sess, id string) (*node, error) {
	switch id {
	case "":
		m.mu.Lock()
		n := innermostLocked(s)
		m.mu.Unlock()
		if n == nil {
			return nil, fmt.Errorf("%w: there is no active branch to return in this session; the main thread cannot be returned", ErrBranchNotFound)
		}
		return n, nil
	case s.root.id:
		return nil, fmt.Errorf("%w: %s is the main thread of the session and cannot be returned; return a branch created with branch_create", ErrInvalidArgument, id)
	default:
		_, n, err := m.branchField(sess, "branch_id", id)
		return n, err
	}
}

// scanReturn scrubs the message and the return value of a branch_return.
func (m *Manager) scanReturn(ctx context.Context, msg, returnValue string) (string, string, error) {
	msg, err := m.scanText(ctx, "message", msg)
	if err != nil {
		return "", "", err
	}
	rv, err := m.scanText(ctx, "return_value", returnValue)
	if err != nil {
		return "", "", err
	}
	if rv != "" && !json.Valid([]byte(rv)) {
		// A redaction broke the JSON (a secret spanning a quote): keep
		// the scrubbed text, as a JSON string.
		q, _ := marshal(rv, false)
		rv = string(q)
	}
	return msg, rv, nil
}

// chargeReturn renders the return answer and counts it against the parent
// pb, at parentDepth; an answer that spends the parent's last tokens says
// so. It refuses an answer the parent cannot receive.
func (m *Manager) chargeReturn(ans *returnAnswer, pb *Branch, parentDepth int) (tokens int, text string, err error) {
	tokens, text, err = m.chargeAnswer(ans, remaining(pb), func(p *int) { ans.ParentRemaining = p })
	if err != nil {
		return 0, "", err
	}
	if rem := remaining(pb); rem >= 0 && tokens >= rem && parentDepth > 0 {
		// The answer spends the parent's last tokens: it says so.
		ans.ParentForceReturned = true
		if tokens, text, err = m.chargeAnswer(ans, rem, func(p *int) { ans.ParentRemaining = p }); err != nil {
			return 0, "", err
		}
	}
	if rem := remaining(pb); rem >= 0 && tokens > rem {
		return 0, "", fmt.Errorf("%w: the return answer is %d tokens but parent %s has %d left; shorten the message to the essentials and return again", ErrBudgetExceeded, tokens, pb.ID, rem)
	}
	return tokens, text, nil
}

// returnCharge charges the parent (pb, in memory parent) the return answer
// text of tokens for the return of branch id, and archives it there. It
// returns the batch to write, the parent as written, and whether the
// parent is force-returned (out of budget), in which case the batch leaves
// the parent to that close.
func (m *Manager) returnCharge(pb *Branch, parent *node, id string, ans *returnAnswer, text string, tokens int) (batch *Batch, npb *Branch, forceParent bool) {
	npb = pb.Clone()
	npb.Used += tokens
	npb.Calls++
	addUsage(npb, "foldproxy", ToolReturn, tokens)
	npb.Level = policy.LevelOf(npb.Used, npb.Budget, m.set.Thresholds).String()
	args, _ := json.Marshal(struct {
		BranchID string `json:"branch_id"`
	}{id})
	ans.text = text // the last rendering is the answer sent
	batch = &Batch{Calls: []BatchCall{{Branch: parent.id, Rec: &CallRecord{
		Time: m.now(), Upstream: "foldproxy", Method: "tools/call", Name: ToolReturn,
		Args: string(args), Result: text, Tokens: tokens,
	}}}}
	forceParent = parent.depth > 0 && (ans.ParentForceReturned || npb.Budget > 0 && npb.Used >= npb.Budget)
	if !forceParent {
		batch.Branches = []*Branch{npb}
	}
	return batch, npb, forceParent
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
