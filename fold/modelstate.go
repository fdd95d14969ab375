package fold

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/foldproxy/foldproxy/fold/modelwire"
)

// The model wire's view of the Manager (modelwire.State).
//
// Charges. A tool result the model wire charges is archived in its branch as
// a call record with Method MethodModelResult and Args the tool-use id; its
// Result holds the decision (bytes kept, notice) and the full text. That
// record is written in the same commit as the charge, so the decision
// survives a restart, and it is the index that makes charges once-only:
// the decisions of a branch are read back from its archive the first time
// the branch is seen, then kept in memory. A cut's remainder is stored under
// the recall handle named in its notice, as on the MCP wire, and the branch
// is force-returned.

// MethodModelResult is the Method of archived calls charged on the model wire.
const MethodModelResult = "model/tool_result"

// MethodModelEnd is the Method of the archive record that says which result
// showed the model a closure the conversation did not show (MarkEnd).
const MethodModelEnd = "model/end"

// modelRecord is the Result of an archived model-wire charge.
type modelRecord struct {
	ToolUseID string `json:"tool_use_id"`
	Keep      int    `json:"keep"`
	Notice    string `json:"notice,omitempty"`
	Forced    bool   `json:"forced,omitempty"` // this charge force-returned the branch
	Text      string `json:"text"`
}

// modelDecisions are a branch's model-wire decisions by tool-use id.
type modelDecisions struct {
	mu      sync.Mutex // held while deciding, so a result is charged once
	loaded  bool
	byID    map[string]modelwire.Decision
	endCall string // the tool-use id whose cut force-returned the branch
	endMark bool   // endCall was set by MarkEnd (it carries the notice)
}

// Observe records the context size of a model request in the root of the
// session its branches belong to (modelwire.Observer). The root's record
// is written when the figures change, and at most every touchEvery
// otherwise, so that report sees them after a restart.
func (s modelState) Observe(ctx context.Context, r modelwire.Result) error {
	m := s.m
	var sess string
	for _, id := range r.Branches {
		if n := m.lookup(id); n != nil {
			sess = n.session
			break
		}
	}
	if sess == "" {
		return nil // a session not open here: nothing to show it to
	}
	ls := m.loaded(sess)
	if ls == nil {
		return nil
	}
	root := ls.root
	if err := root.lock(ctx); err != nil {
		return err
	}
	defer root.unlock()
	b := root.cur.Load()
	prev := b.ModelContext
	mc := ModelContext{TokensBefore: r.TokensBefore, TokensAfter: r.TokensAfter, Folded: len(r.Folded), Requests: 1, At: m.now()}
	if prev != nil {
		mc.Requests = prev.Requests + 1
		if prev.TokensBefore == mc.TokensBefore && prev.TokensAfter == mc.TokensAfter && prev.Folded == mc.Folded && mc.At.Sub(prev.At) < touchEvery {
			return nil
		}
	}
	nb := b.Clone()
	nb.ModelContext = &mc
	if err := m.put(context.WithoutCancel(ctx), root, nb); err != nil {
		return fmt.Errorf("fold: record the model context of %s: %w", sess, err)
	}
	return nil
}

// modelState is the Manager seen by the context manager on the model wire.
type modelState struct{ m *Manager }

var (
	_ modelwire.State    = modelState{}
	_ modelwire.Observer = modelState{}
	_ modelwire.Ender    = modelState{}
)

// ModelState returns the fold state as the context manager of the model
// wire (package modelwire) sees it.
func (m *Manager) ModelState() modelwire.State { return modelState{m} }

// decisions returns branch id's decision table (not loaded).
func (m *Manager) decisions(id string) *modelDecisions {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.model == nil {
		m.model = map[string]*modelDecisions{}
	}
	d := m.model[id]
	if d == nil {
		d = &modelDecisions{byID: map[string]modelwire.Decision{}}
		m.model[id] = d
	}
	return d
}

// loadLocked reads the branch's model-wire decisions from its archive once.
// The caller holds d.mu.
func (m *Manager) loadLocked(ctx context.Context, id string, d *modelDecisions) error {
	if d.loaded {
		return nil
	}
	const page = 500
	for from := 0; ; {
		recs, err := m.store.Calls(ctx, id, from, page)
		if err != nil {
			if errors.Is(err, ErrBranchNotFound) {
				break
			}
			return fmt.Errorf("fold: read the archive of %s: %w", id, err)
		}
		for _, r := range recs {
			from = r.Seq + 1
			if r.Method == MethodModelEnd && d.endCall == "" {
				d.endCall, d.endMark = r.Args, true
				continue
			}
			if r.Method != MethodModelResult {
				continue
			}
			var mr modelRecord
			if err := json.Unmarshal([]byte(r.Result), &mr); err != nil {
				return fmt.Errorf("fold: archived model result %s#%d: %w", id, r.Seq, err)
			}
			d.byID[mr.ToolUseID] = modelwire.Decision{Keep: mr.Keep, Notice: mr.Notice}
			if mr.Forced {
				d.endCall = mr.ToolUseID
			}
		}
		if len(recs) < page {
			break
		}
	}
	d.loaded = true
	return nil
}

// Branch looks a branch up by id in any session (branch ids are unique).
func (s modelState) Branch(ctx context.Context, id string) (modelwire.Branch, bool, error) {
	m := s.m
	var b *Branch
	if n := m.lookup(id); n != nil {
		b = n.cur.Load()
	} else {
		got, err := m.store.GetBranch(ctx, id)
		if err != nil {
			if errors.Is(err, ErrBranchNotFound) {
				return modelwire.Branch{}, false, nil
			}
			return modelwire.Branch{}, false, fmt.Errorf("fold: look up branch %q: %w", id, err)
		}
		b = got
	}
	out := modelwire.Branch{ID: b.ID, Closed: b.Status != StatusActive, Budget: b.Budget, Used: b.Used}
	if out.Closed {
		out.Summary = foldSummary(b)
		if b.Status != StatusReturned {
			d := m.decisions(id)
			d.mu.Lock()
			err := m.loadLocked(ctx, id, d)
			out.EndCall = d.endCall
			if d.endMark {
				out.EndNotice = endNotice(b)
			}
			d.mu.Unlock()
			if err != nil {
				return modelwire.Branch{}, false, err
			}
		}
	}
	return out, true, nil
}

// foldSummary is what the model sees in place of a closed branch's span.
func foldSummary(b *Branch) string {
	var sb strings.Builder
	if b.Status == StatusReturned {
		fmt.Fprintf(&sb, "[foldproxy] Branch %s (%q) returned; its work is folded out of this conversation (branch_recall with branch_id %s reads what it received).\nMessage: %s",
			b.ID, b.Description, b.ID, b.Message)
		if b.ReturnValue != "" {
			fmt.Fprintf(&sb, "\nReturn value: %s", b.ReturnValue)
		}
		return sb.String()
	}
	if b.Summary != "" {
		return "[foldproxy] " + b.Summary
	}
	return fmt.Sprintf("[foldproxy] Branch %s (%q) is %s: %s. branch_recall with branch_id %s reads what it received.", b.ID, b.Description, b.Status, b.Reason, b.ID)
}

// endNotice tells the agent, with a result of its span, that a branch it
// is working in was closed.
func endNotice(b *Branch) string {
	return foldSummary(b) + " Continue in the parent."
}

// MarkEnd records once that toolUseID's result shows the model the closure
// of branch id (modelwire.Ender): an archive record of the branch, read
// back with its decisions after a restart.
func (s modelState) MarkEnd(ctx context.Context, id, toolUseID string) (string, string, error) {
	m := s.m
	b, err := m.store.GetBranch(ctx, id)
	if err != nil {
		return "", "", fmt.Errorf("fold: look up branch %q: %w", id, err)
	}
	if n := m.lookup(id); n != nil {
		b = n.cur.Load()
	}
	if b.Status == StatusActive || b.Status == StatusReturned {
		return "", "", nil
	}
	d := m.decisions(id)
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := m.loadLocked(ctx, id, d); err != nil {
		return "", "", err
	}
	if d.endCall == "" {
		rec := &CallRecord{Time: m.now(), Upstream: "model", Method: MethodModelEnd, Name: "end", Args: toolUseID, Result: "{}"}
		if err := m.commit(context.WithoutCancel(ctx), &Batch{Calls: []BatchCall{{Branch: id, Rec: rec}}}); err != nil {
			return "", "", fmt.Errorf("fold: record the end of %s: %w", id, err)
		}
		d.endCall, d.endMark = toolUseID, true
	}
	if !d.endMark {
		return d.endCall, "", nil
	}
	return d.endCall, endNotice(b), nil
}

// ChargeResult charges a tool result seen on the model wire to its branch,
// once per tool-use id; see the comment at the top of this file.
func (s modelState) ChargeResult(ctx context.Context, branchID, toolUseID, toolName, text string) (modelwire.Decision, error) {
	m := s.m
	d := m.decisions(branchID)
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := m.loadLocked(ctx, branchID, d); err != nil {
		return modelwire.Decision{}, err
	}
	if dec, ok := d.byID[toolUseID]; ok {
		return dec, nil
	}
	whole := modelwire.Decision{Keep: len(text)}
	n := m.lookup(branchID)
	if n == nil || !n.active() {
		return whole, nil // a closed branch is charged nothing
	}
	var dec modelwire.Decision
	res, err := m.Charge(ctx, n.session, branchID, func(bud Budget) (Charge, error) {
		var ch Charge
		dec, ch = m.fitModel(bud, n.depth == 0, toolUseID, toolName, text)
		if n.depth > 0 && (ch.Cut || (bud.Total > 0 && bud.Used+ch.Tokens >= bud.Total)) {
			// Charge force-returns the branch: say so in the record.
			var mr modelRecord
			if json.Unmarshal(ch.Result, &mr) == nil {
				mr.Forced = true
				ch.Result, _ = json.Marshal(mr)
			}
		}
		return ch, nil
	})
	if err != nil {
		if errors.Is(err, ErrBranchClosed) {
			return whole, nil
		}
		return modelwire.Decision{}, err
	}
	d.byID[toolUseID] = dec
	if res.Forced {
		d.endCall = toolUseID
	}
	return dec, nil
}

// fitModel decides what of a model-wire result fits the branch's budget:
// Fit decides, and the text is cut at its head (cutText), with notices
// appended to what is kept, each after a blank line. A result refused with
// the spent notice keeps nothing and shows the notice instead, uncharged.
// Forced summaries of children (bud.Summaries) are not shown with it: the
// fold shows them in place of the children's spans.
func (m *Manager) fitModel(bud Budget, root bool, toolUseID, toolName, text string) (modelwire.Decision, Charge) {
	bud.Summaries = nil
	d := Fit(bud, Measured[int]{Result: len(text), Tokens: m.count.CountText(text), Notices: true}, // Bytes 0: the count is exact
		modelText{m: m, text: text}, FitOptions[int]{Root: root, Thresholds: m.set.Thresholds})

	ch := Charge{Upstream: "model", Method: MethodModelResult, Name: toolName, Args: toolUseID,
		Tokens: d.Tokens, Level: d.Level.String()}
	rec := modelRecord{ToolUseID: toolUseID, Keep: d.Result, Notice: strings.Join(d.Notices, "\n\n"), Forced: d.Forced, Text: text}
	switch d.Verdict {
	case FitCut:
		ch.Cut = true
		ch.Rest = []byte(text[rec.Keep:])
	case FitSpent, FitRefused:
		// Nothing of the result is shown; the spent notice says why. (Fit
		// refuses no text: every text can be cut and carry a notice.)
		ch.Cut = true
		ch.Rest = []byte(text)
		rec.Keep, rec.Forced = 0, !root
		rec.Notice = SpentNotice(bud.Branch, bud.Handle, root, max(bud.Remaining, 0), bud.Total)
	}
	ch.Result, _ = json.Marshal(rec)
	return modelwire.Decision{Keep: rec.Keep, Notice: rec.Notice}, ch
}

// modelText is the model wire for Fit: a result is the bytes of its text
// kept (a prefix), and notices go after it, each after a blank line (the
// model wire appends them: modelwire.Decision), costing what Fit adds.
type modelText struct {
	m    *Manager
	text string
}

func (w modelText) NoticeTokens(n string) int { return w.m.count.CountText("\n\n" + n) }

func (w modelText) Attach(keep, tokens int, _ []string) (int, int, error) { return keep, tokens, nil }

func (w modelText) Cut(limit int) (int, Piece, error) {
	keep := 0
	if limit > 0 {
		keep = w.m.cutText(w.text, limit)
	}
	return keep, Piece{Kept: w.m.count.CountText(w.text[:keep]), Bytes: keep, RestBytes: len(w.text) - keep}, nil
}

// cutText returns the length of the longest prefix of s with at most limit
// tokens, at a rune boundary: the Counter's own CutText when it has one
// (clean boundaries), else a binary search.
func (m *Manager) cutText(s string, limit int) int {
	if c, ok := m.count.(interface{ CutText(string, int) int }); ok {
		return c.CutText(s, limit)
	}
	align := func(n int) int {
		for n > 0 && n < len(s) && !utf8.RuneStart(s[n]) {
			n--
		}
		return n
	}
	lo, hi := 0, len(s)
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if m.count.CountText(s[:align(mid)]) <= limit {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return align(lo)
}
