package modelwire

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// Branch spans: where each branch's span starts and ends in the
// conversation, and which spans fold.

var (
	reBranchID = regexp.MustCompile(`"branch_id"\s*:\s*"([^"\\]+)"`)
	// reSuccess recognises a successful branch_return answer however the
	// client wraps the MCP result for its model: as it is; after a
	// header on lines of its own (Codex 0.169: a first text part "Wall
	// time: 0.002 seconds\nOutput:", or one text "...Output:\n{...}");
	// or inside the JSON of the MCP content array (Codex before, whose
	// output was the serialized [{"type":"text","text":"{...}"}]).
	reSuccess = regexp.MustCompile(`"success"\s*:\s*true|(?m:^)\s*\{"tokens_used"\s*:|"text"\s*:\s*"\{"tokens_used"\s*:`)
)

// createdID finds the new branch's id in branch_create's answer: the first
// "branch_id" of its JSON (escaped or not, as clients may wrap MCP results
// in JSON of their own).
func createdID(text string) string {
	t := strings.ReplaceAll(text, `\"`, `"`)
	if m := reBranchID.FindStringSubmatch(t); m != nil {
		return m[1]
	}
	return ""
}

var reSeal = regexp.MustCompile(`"seal"\s*:\s*"([0-9]{12})"`)

// createdSeal finds the seal in branch_create's answer ("" when none).
func createdSeal(text string) string {
	t := strings.ReplaceAll(text, `\"`, `"`)
	if m := reSeal.FindStringSubmatch(t); m != nil {
		return m[1]
	}
	return ""
}

// returnedID is the branch a successful branch_return answer closed: the
// answer's "branch_id" when it has one, else the call's branch_id
// argument (input); ok reports a successful answer, whose branch is the
// innermost open one when neither names it. The compact answer
// ({"tokens_used":...}) does not repeat the id the caller named.
func returnedID(text, input string) (id string, ok bool) {
	t := strings.ReplaceAll(text, `\"`, `"`)
	if !reSuccess.MatchString(t) {
		return "", false
	}
	if m := reBranchID.FindStringSubmatch(t); m != nil {
		return m[1], true
	}
	if m := reBranchID.FindStringSubmatch(strings.ReplaceAll(input, `\"`, `"`)); m != nil {
		return m[1], true
	}
	return "", true
}

// forcedNotice reports whether a result carries the notice of branch id's
// forced return (its automatic summary or a cut notice).
func forcedNotice(text, id string) bool {
	return strings.Contains(text, id) && (strings.Contains(text, "force-returned") || strings.Contains(text, "closed as failed"))
}

// discover finds the branch spans: each starts after the results of the
// turn that called branch_create and ends with the results of the turn
// whose branch_return closed it (or whose result carried its
// forced-return notice). Closing a span closes the spans nested in it.
func (a *applier) discover() error {
	c := a.c
	a.owner = map[resRef]int{}
	var stack []int
	pending := map[int][]int{}
	for i := range c.msgs {
		for _, k := range pending[i] {
			if len(stack) > 0 {
				a.spans[k].parent = stack[len(stack)-1]
			}
			stack = append(stack, k)
		}
		m := &c.msgs[i]
		for j := range m.results {
			r := &m.results[j]
			top := -1
			if len(stack) > 0 {
				top = stack[len(stack)-1]
			}
			a.owner[resRef{i, j}] = top
			if len(stack) == 0 {
				continue
			}
			name := c.callName(r.callID)
			k := -1
			if hasSuffixTool(name, toolReturn) && !r.isError {
				input := ""
				if cr, ok := c.calls[r.callID]; ok {
					input = c.msgs[cr.msg].calls[cr.idx].input
				}
				if id, ok := returnedID(r.text, input); id != "" {
					k = slices.IndexFunc(stack, func(x int) bool { return a.spans[x].id == id })
				} else if ok {
					k = len(stack) - 1 // the innermost open branch returned
				}
			}
			// branch_create answers may quote other branches' summaries
			// (dependencies): they end nothing.
			for x := len(stack) - 1; k < 0 && x >= 0 && !hasSuffixTool(name, toolCreate); x-- {
				sp := &a.spans[stack[x]]
				if sp.br.EndCall != "" && sp.br.EndCall == r.callID {
					k, sp.cutEnd = x, true
				} else if forcedNotice(r.text, sp.id) {
					k = x
				}
			}
			if k < 0 {
				continue
			}
			end := i
			if cr, ok := c.calls[r.callID]; ok {
				lo, hi := c.turn(cr.msg)
				if last, ok := c.lastResultOf(lo, hi); ok {
					end = max(end, last)
				}
				if c.createsBranch(lo, hi) {
					// The turn that ends the span also starts a new
					// branch in the parent: it stays, and the fold ends
					// before it.
					end = lo - 1
				}
			}
			for _, x := range stack[k:] {
				a.spans[x].end = end
			}
			stack = stack[:k]
		}
		for _, cl := range m.calls {
			if !hasSuffixTool(cl.name, toolCreate) {
				continue
			}
			r, ri, ok := c.result(cl.id)
			if !ok || r.isError {
				continue
			}
			id := createdID(r.text)
			if id == "" {
				continue
			}
			if bd, ok := a.st.(Binder); ok {
				// Only the session the branch was made for sees its span.
				ok, err := bd.BindSpan(a.ctx, a.opt.Session, id, createdSeal(r.text))
				if err != nil {
					return fmt.Errorf("modelwire: bind branch %s to its session: %w", id, err)
				}
				if !ok {
					continue
				}
			}
			lo, hi := c.turn(i)
			last, ok := c.lastResultOf(lo, hi)
			if !ok {
				continue
			}
			sp := spanInfo{id: id, createMsg: i, createCall: cl.id, resMsg: ri, start: last + 1, end: -1, parent: -1}
			br, known, err := a.st.Branch(a.ctx, id)
			if err != nil {
				return fmt.Errorf("modelwire: look up branch %s: %w", id, err)
			}
			sp.br, sp.known = br, known
			a.spans = append(a.spans, sp)
			a.res.Branches = append(a.res.Branches, id)
			pending[sp.start] = append(pending[sp.start], len(a.spans)-1)
		}
	}
	return nil
}

// markEnds gives a closed span that the conversation does not end an end:
// the newest result inside it (see Ender).
func (a *applier) markEnds() error {
	en, ok := a.st.(Ender)
	if !ok || len(a.c.msgs) == 0 {
		return nil
	}
	last := len(a.c.msgs) - 1
	m := &a.c.msgs[last]
	for j := len(m.results) - 1; j >= 0; j-- {
		k := a.owner[resRef{last, j}]
		if k < 0 {
			continue
		}
		sp := &a.spans[k]
		if !sp.known || !sp.br.Closed || sp.end >= 0 || sp.br.EndCall != "" {
			continue
		}
		r := &m.results[j]
		name := a.c.callName(r.callID)
		if isFoldTool(name) || a.chargedOnMCP(name) {
			continue // the MCP wire delivers the notice with its own results
		}
		endCall, notice, err := en.MarkEnd(a.ctx, sp.id, r.callID)
		if err != nil {
			return fmt.Errorf("modelwire: mark the end of branch %s: %w", sp.id, err)
		}
		sp.br.EndCall, sp.br.EndNotice = endCall, notice
		if endCall == r.callID {
			sp.end, sp.cutEnd = last, true
			for x := k + 1; x < len(a.spans); x++ {
				if a.spans[x].end < 0 && a.spans[x].start <= last && a.isInside(x, k) {
					a.spans[x].end = last
				}
			}
		}
	}
	return nil
}

// isInside reports whether span x is nested in span k.
func (a *applier) isInside(x, k int) bool {
	for p := a.spans[x].parent; p >= 0; p = a.spans[p].parent {
		if p == k {
			return true
		}
	}
	return false
}

// createsBranch reports whether the turn lo..hi calls branch_create.
func (c *conv) createsBranch(lo, hi int) bool {
	for i := lo; i <= hi; i++ {
		for _, cl := range c.msgs[i].calls {
			if hasSuffixTool(cl.name, toolCreate) {
				return true
			}
		}
	}
	return false
}

// decideFolds marks the outermost closed spans that have an end in the
// conversation.
func (a *applier) decideFolds() {
	for k := range a.spans {
		sp := &a.spans[k]
		if sp.parent >= 0 && a.spans[sp.parent].covered {
			sp.covered = true
			continue
		}
		// A span that ends at the model-wire cut that closed it folds once
		// the model has answered the request that carried the cut: a
		// resend of that request gets the same cut, byte for byte.
		if sp.cutEnd && sp.end == len(a.c.msgs)-1 {
			continue
		}
		if sp.known && sp.br.Closed && sp.end >= sp.start {
			sp.fold, sp.covered = true, true
			a.res.Folded = append(a.res.Folded, sp.id)
		}
	}
}

// removedMsgs marks the messages that folds remove.
func (a *applier) removedMsgs() []bool {
	rm := make([]bool, len(a.c.msgs))
	for _, sp := range a.spans {
		if sp.fold {
			for i := sp.start; i <= sp.end; i++ {
				rm[i] = true
			}
		}
	}
	return rm
}
