package fold

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/foldproxy/foldproxy/policy"
)

// Checkpoints (checkpoint_save, checkpoint_list, checkpoint_resume): a
// named snapshot of a session that a later session, after a crash, a
// restart of the client or /clear, continues. A checkpoint holds the
// session's branch tree with budgets and status, the main thread's
// model-wire figures, the summary and context the agent gave, and the ids
// of the memories the session left. It is scrubbed (the agent's texts pass
// the fold-time scan; the branches' were scrubbed when they were stored),
// durable (in the store before the agent hears of it), bounded
// (MaxCheckpointBytes), and seen by sessions of its principal only.
// Resuming it re-creates its open branches under the new session with the
// budget and the time they had left when it was saved.

// The checkpoint tools' names.
const (
	ToolCheckpointSave   = "checkpoint_save"
	ToolCheckpointList   = "checkpoint_list"
	ToolCheckpointResume = "checkpoint_resume"
)

// KindCheckpoint is the Store record kind of checkpoints.
const KindCheckpoint = "checkpoint"

// Bounds of a checkpoint.
const (
	// MaxCheckpointBytes bounds a checkpoint's stored record: a save past
	// it is refused.
	MaxCheckpointBytes = 256 << 10
	maxCheckpointName  = 200
	// checkpointClosed bounds the closed branches a checkpoint lists (the
	// latest); open ones are all listed.
	checkpointClosed = 100
	// listedCheckpoints bounds checkpoint_list's answer (the latest).
	listedCheckpoints = 20
)

// Checkpoint is a checkpoint as stored. The session's id is not kept (it
// is a credential): its root's id stands for it.
type Checkpoint struct {
	ID           string             `json:"id"`
	Name         string             `json:"name"`
	Principal    string             `json:"principal"`
	Root         string             `json:"root"`
	Created      time.Time          `json:"created"`
	Summary      string             `json:"summary"`
	Context      string             `json:"context,omitempty"`
	ModelContext *ModelContext      `json:"modelContext,omitempty"`
	Branches     []CheckpointBranch `json:"branches"`
	Memories     []string           `json:"memories,omitempty"`
	// Resumed counts the sessions that resumed it.
	Resumed int `json:"resumed,omitempty"`
}

// CheckpointBranch is one branch of a checkpoint's tree.
type CheckpointBranch struct {
	ID          string `json:"id"`
	Parent      string `json:"parent,omitempty"`
	Depth       int    `json:"depth"`
	Description string `json:"description,omitempty"`
	Prompt      string `json:"prompt,omitempty"`
	Status      Status `json:"status"`
	Reason      string `json:"reason,omitempty"`
	Budget      int    `json:"budget"`
	Used        int    `json:"used"`
	// TimeLeft is the time to the deadline when the checkpoint was saved
	// (open branches).
	TimeLeft policy.Duration `json:"timeLeft,omitempty"`
	Message  string          `json:"message,omitempty"`
	Summary  string          `json:"summary,omitempty"`
}

// Open reports whether the branch was open when the checkpoint was saved.
func (b CheckpointBranch) Open() bool { return b.Status == StatusActive && b.Depth > 0 }

// OpenBranches counts the checkpoint's open branches.
func (c *Checkpoint) OpenBranches() int {
	n := 0
	for _, b := range c.Branches {
		if b.Open() {
			n++
		}
	}
	return n
}

func checkpointToolDefs() []toolDef {
	return []toolDef{
		{
			Name:        ToolCheckpointSave,
			deferred:    true,
			Description: "Save this session (branch tree, open branches' budgets and time, your summary and context) for a later session to resume.",
			InputSchema: schema([]string{"name", "summary"}, map[string]any{
				"name":    prop("string", ""),
				"summary": prop("string", ""),
				"context": prop("string", ""),
			}),
		},
		{
			Name:        ToolCheckpointList,
			deferred:    true,
			Description: "List saved checkpoints, latest first.",
			InputSchema: schema(nil, map[string]any{}),
		},
		{
			Name:        ToolCheckpointResume,
			deferred:    true,
			Description: "Continue a checkpoint: returns its summary (level context: and context); its open branches are re-created here.",
			InputSchema: schema([]string{"checkpoint_id"}, map[string]any{
				"checkpoint_id": prop("string", ""),
				"level":         map[string]any{"type": "string", "enum": []string{"summary", "context"}},
			}),
		},
	}
}

type checkpointSaveArgs struct{ Name, Summary, Context string }

type checkpointResumeArgs struct{ ID, Level string }

func parseCheckpointSaveArgs(session string, raw json.RawMessage) (checkpointSaveArgs, error) {
	var c checkpointSaveArgs
	a, err := readArgs(ToolCheckpointSave, raw, "name", "summary", "context", "session_id")
	if err != nil {
		return c, err
	}
	if err = a.sessionArg(session); err != nil {
		return c, err
	}
	if c.Name, err = a.str("name", true); err != nil {
		return c, err
	}
	if c.Summary, err = a.str("summary", true); err != nil {
		return c, err
	}
	c.Context, err = a.str("context", false)
	return c, err
}

func parseCheckpointListArgs(session string, raw json.RawMessage) error {
	a, err := readArgs(ToolCheckpointList, raw, "session_id")
	if err != nil {
		return err
	}
	return a.sessionArg(session)
}

func parseCheckpointResumeArgs(session string, raw json.RawMessage) (checkpointResumeArgs, error) {
	var c checkpointResumeArgs
	a, err := readArgs(ToolCheckpointResume, raw, "checkpoint_id", "level", "session_id")
	if err != nil {
		return c, err
	}
	if err = a.sessionArg(session); err != nil {
		return c, err
	}
	if c.ID, err = a.id("checkpoint_id"); err != nil {
		return c, err
	}
	if c.ID == "" {
		return c, fmt.Errorf("%w: %s: field \"checkpoint_id\" is required; checkpoint_list lists them", ErrInvalidArgument, ToolCheckpointResume)
	}
	if c.Level, err = a.str("level", false); err != nil {
		return c, err
	}
	switch c.Level {
	case "":
		c.Level = "summary"
	case "summary", "context":
	default:
		return c, fmt.Errorf("%w: %s: field \"level\": %q is not summary or context", ErrInvalidArgument, ToolCheckpointResume, c.Level)
	}
	return c, nil
}

type checkpointSaveAnswer struct {
	CheckpointID string `json:"checkpoint_id"`
	OpenBranches int    `json:"open_branches"`
	Bytes        int    `json:"bytes"`
}

type checkpointListItem struct {
	CheckpointID string `json:"checkpoint_id"`
	Name         string `json:"name"`
	Created      string `json:"created"`
	OpenBranches int    `json:"open_branches,omitempty"`
}

type checkpointListAnswer struct {
	Checkpoints []checkpointListItem `json:"checkpoints"`
	More        int                  `json:"more,omitempty"`
}

type resumedBranch struct {
	BranchID       string  `json:"branch_id"`
	Was            string  `json:"was"`
	Description    string  `json:"description,omitempty"`
	Budget         int     `json:"budget"`
	TimeoutSeconds float64 `json:"timeout_seconds"`
}

type checkpointResumeAnswer struct {
	Name     string          `json:"name"`
	Summary  string          `json:"summary"`
	Context  string          `json:"context,omitempty"`
	Branches []resumedBranch `json:"branches,omitempty"`
}

// checkpointSave is checkpoint_save.
func (m *Manager) checkpointSave(ctx context.Context, sess string, a checkpointSaveArgs) (*checkpointSaveAnswer, error) {
	s, err := m.sessionOf(sess)
	if err != nil {
		return nil, err
	}
	name, err := cleanText("name", a.Name, maxCheckpointName)
	if err != nil {
		return nil, err
	}
	summary, err := cleanText("summary", a.Summary, MaxPrompt)
	if err != nil {
		return nil, err
	}
	cctx, err := cleanText("context", a.Context, MaxMessage)
	if err != nil {
		return nil, err
	}
	if strings.TrimSpace(name) == "" || strings.TrimSpace(summary) == "" {
		return nil, fmt.Errorf("%w: %s: name and summary must not be empty: say what the session was doing and where it stands", ErrInvalidArgument, ToolCheckpointSave)
	}
	for _, f := range []struct {
		field string
		v     *string
	}{{"name", &name}, {"summary", &summary}, {"context", &cctx}} {
		if *f.v, err = m.scanText(ctx, f.field, *f.v); err != nil {
			return nil, err
		}
	}
	now := m.now()
	m.mu.Lock()
	nodes := make([]*node, 0, len(s.nodes))
	for _, n := range s.nodes {
		nodes = append(nodes, n)
	}
	mems := slices.Clone(s.memories)
	m.mu.Unlock()
	root := s.root.cur.Load()
	c := &Checkpoint{
		ID: newID("ck-", 8), Name: name, Principal: m.principal, Root: root.ID, Created: now,
		Summary: summary, Context: cctx, ModelContext: root.ModelContext, Memories: mems,
	}
	var closed []*Branch
	for _, n := range nodes {
		b := n.cur.Load()
		if b.Status != StatusActive {
			closed = append(closed, b)
			continue
		}
		c.Branches = append(c.Branches, checkpointBranch(b, now))
	}
	slices.SortFunc(closed, func(x, y *Branch) int { return y.Closed.Compare(x.Closed) })
	for _, b := range closed[:min(len(closed), checkpointClosed)] {
		c.Branches = append(c.Branches, checkpointBranch(b, now))
	}
	slices.SortStableFunc(c.Branches, func(x, y CheckpointBranch) int { return cmp.Or(cmp.Compare(x.Depth, y.Depth), cmp.Compare(x.ID, y.ID)) })
	for _, b := range c.Branches {
		for _, id := range nodesInjected(nodes, b.ID) {
			if !slices.Contains(c.Memories, id) {
				c.Memories = append(c.Memories, id)
			}
		}
	}
	data, err := json.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("fold: encode checkpoint: %w", err)
	}
	if len(data) > MaxCheckpointBytes {
		return nil, fmt.Errorf("%w: %s: the checkpoint is %d bytes, over the %d a checkpoint may take; shorten the context or the summary", ErrInvalidArgument, ToolCheckpointSave, len(data), MaxCheckpointBytes)
	}
	if err := m.store.PutRecord(context.WithoutCancel(ctx), KindCheckpoint, c.ID, data); err != nil {
		return nil, fmt.Errorf("fold: store checkpoint: %w", err)
	}
	return &checkpointSaveAnswer{CheckpointID: c.ID, OpenBranches: c.OpenBranches(), Bytes: len(data)}, nil
}

// nodesInjected returns the memories injected into branch id.
func nodesInjected(nodes []*node, id string) []string {
	for _, n := range nodes {
		if n.id == id {
			return n.cur.Load().Injected
		}
	}
	return nil
}

func checkpointBranch(b *Branch, now time.Time) CheckpointBranch {
	cb := CheckpointBranch{
		ID: b.ID, Parent: b.Parent, Depth: b.Depth, Description: b.Description, Prompt: b.Prompt,
		Status: b.Status, Reason: b.Reason, Budget: b.Budget, Used: b.Used, Message: b.Message, Summary: b.Summary,
	}
	if b.Status == StatusActive && !b.Deadline.IsZero() {
		cb.TimeLeft = policy.Duration(max(b.Deadline.Sub(now), 0))
	}
	return cb
}

// Checkpoints lists the stored checkpoints, latest first, of principal
// (all of them when principal is "").
func Checkpoints(ctx context.Context, st Store, principal string) ([]*Checkpoint, error) {
	recs, err := st.Records(ctx, KindCheckpoint)
	if err != nil {
		return nil, fmt.Errorf("fold: list checkpoints: %w", err)
	}
	var out []*Checkpoint
	for _, r := range recs {
		var c Checkpoint
		if err := json.Unmarshal(r.Data, &c); err != nil {
			return nil, fmt.Errorf("fold: checkpoint %s: %w", r.ID, err)
		}
		if principal == "" || c.Principal == principal {
			out = append(out, &c)
		}
	}
	slices.SortStableFunc(out, func(x, y *Checkpoint) int { return cmp.Or(y.Created.Compare(x.Created), cmp.Compare(x.ID, y.ID)) })
	return out, nil
}

// GetCheckpoint reads one checkpoint; ErrCheckpointNotFound when absent.
func GetCheckpoint(ctx context.Context, st Store, id string) (*Checkpoint, error) {
	data, err := st.GetRecord(ctx, KindCheckpoint, id)
	if errors.Is(err, ErrRecordNotFound) {
		return nil, fmt.Errorf("%w: no checkpoint %q", ErrCheckpointNotFound, id)
	}
	if err != nil {
		return nil, err
	}
	var c Checkpoint
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("fold: checkpoint %s: %w", id, err)
	}
	return &c, nil
}

// checkpointList is checkpoint_list.
func (m *Manager) checkpointList(ctx context.Context, sess string) (*checkpointListAnswer, error) {
	if _, err := m.sessionOf(sess); err != nil {
		return nil, err
	}
	cs, err := Checkpoints(ctx, m.store, m.principal)
	if err != nil {
		return nil, err
	}
	ans := &checkpointListAnswer{Checkpoints: []checkpointListItem{}}
	for i, c := range cs {
		if i == listedCheckpoints {
			ans.More = len(cs) - i
			break
		}
		ans.Checkpoints = append(ans.Checkpoints, checkpointListItem{
			CheckpointID: c.ID, Name: c.Name, Created: c.Created.UTC().Format(time.RFC3339), OpenBranches: c.OpenBranches(),
		})
	}
	return ans, nil
}

// checkpointResume is checkpoint_resume: the checkpoint's summary (and
// context) as the answer, and its open branches re-created in this
// session, parents before children, each with the budget and time it had
// left, under the branch re-created for its parent or else this session's
// main thread. A checkpoint of another principal is refused as not found.
func (m *Manager) checkpointResume(ctx context.Context, sess string, a checkpointResumeArgs) (*checkpointResumeAnswer, error) {
	s, err := m.sessionOf(sess)
	if err != nil {
		return nil, err
	}
	c, err := GetCheckpoint(ctx, m.store, a.ID)
	if err != nil {
		return nil, err
	}
	if c.Principal != m.principal {
		return nil, fmt.Errorf("%w: checkpoint %q is not one of this principal's; checkpoint_list lists them", ErrCheckpointNotFound, a.ID)
	}
	ans := &checkpointResumeAnswer{Name: c.Name, Summary: c.Summary}
	if a.Level == "context" {
		ans.Context = c.Context
	}
	made := map[string]*node{}
	for _, cb := range c.Branches { // sorted by depth: parents first
		if !cb.Open() {
			continue
		}
		parent := made[cb.Parent]
		if parent == nil {
			parent = s.root
		}
		budget := max(cb.Budget-cb.Used, 1)
		if cb.Budget <= 0 {
			budget = 0
		}
		left := cb.TimeLeft.D()
		if left <= 0 {
			left = time.Second // its deadline had come: it ends at once, with its summary
		}
		n, err := m.restore(ctx, s, parent, cb, budget, left)
		if err != nil {
			return nil, fmt.Errorf("re-creating branch %s of checkpoint %s: %w", cb.ID, c.ID, err)
		}
		made[cb.ID] = n
		ans.Branches = append(ans.Branches, resumedBranch{
			BranchID: n.id, Was: cb.ID, Description: cb.Description, Budget: budget, TimeoutSeconds: left.Seconds(),
		})
	}
	c.Resumed++
	if data, err := json.Marshal(c); err == nil {
		if err := m.store.PutRecord(context.WithoutCancel(ctx), KindCheckpoint, c.ID, data); err != nil {
			m.log.Warn("fold: recording a checkpoint's resumption", "checkpoint", c.ID, "err", err)
		}
	}
	return ans, nil
}

// restore creates a branch of session s under parent for a checkpoint's
// open branch cb, with budget and the time left, as branch_create does
// but without charging its parent an answer (the resume answer is
// charged to the session) or injecting memories, and within the session's
// limits of active branches.
func (m *Manager) restore(ctx context.Context, s *session, parent *node, cb CheckpointBranch, budget int, left time.Duration) (*node, error) {
	if depth := parent.depth + 1; depth > m.set.MaxDepth {
		return nil, fmt.Errorf("%w: at depth %d, beyond the maximum of %d", ErrMaxDepthExceeded, depth, m.set.MaxDepth)
	}
	if err := parent.lock(ctx); err != nil {
		return nil, err
	}
	defer parent.unlock()
	pb := parent.cur.Load()
	if pb.Status != StatusActive {
		return nil, closedErr(pb)
	}
	now := m.now()
	m.mu.Lock()
	err := m.checkCreateLocked(s, now, true)
	if errors.Is(err, ErrRateLimited) {
		// Re-creating a checkpoint's branches is not a burst of new
		// work: past every other limit (checked before the rate), the
		// slot is reserved as checkCreateLocked would have.
		s.creates = append(s.creates, now)
		s.reserved++
		m.active++
		err = nil
	}
	m.mu.Unlock()
	if err != nil {
		return nil, err
	}
	registered := false
	defer func() { m.release(s, registered) }()
	b := &Branch{
		ID: newID("b-", 8), Session: s.id, Parent: parent.id, Depth: parent.depth + 1,
		Description: cb.Description, Prompt: cb.Prompt, Status: StatusActive, Budget: budget,
		Level: policy.Normal.String(), Created: now, Deadline: now.Add(left), Ord: len(m.children(parent)) + 1,
	}
	if err := m.commit(context.WithoutCancel(ctx), &Batch{Branches: []*Branch{b}}); err != nil {
		return nil, fmt.Errorf("fold: create branch: %w", err)
	}
	n := m.newNode(b)
	m.mu.Lock()
	parent.kids = append(parent.kids, b.ID)
	m.nodes[b.ID] = n
	s.nodes[b.ID] = n
	s.active[b.ID] = n
	m.mu.Unlock()
	registered = true
	if err := n.lock(ctx); err == nil {
		m.armLocked(n)
		n.unlock()
	}
	m.emit(ctx, branchEvent("created", b))
	return n, nil
}

// innermostID returns the id of the session's innermost active branch, or
// its root; "" when the session is not open.
func (m *Manager) innermostID(sess string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.sessions[sess]
	if s == nil {
		return ""
	}
	if n := innermostLocked(s); n != nil {
		return n.id
	}
	return s.root.id
}
