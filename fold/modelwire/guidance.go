package modelwire

import (
	"bytes"
	"fmt"
	"regexp"

	"github.com/foldproxy/foldproxy/policy/jsonscan"
)

// Guidance, the process-reward heuristics of the folding method on the wire:
// a short reminder suggesting a branch when the main thread takes in a lot
// of tool output without folding, or repeats a call that failed.
//
// Placement keeps prompt caching working: a reminder is a pure function of
// the conversation up to the message it sits on, so it is put back, byte
// for byte, on every later request; it goes after the last block of that
// message, which was the newest message when it first appeared, so it never
// changes bytes that were sent before. Anthropic: a text block appended to
// the user message. OpenAI dialects: appended to the text of the last tool
// result of the message run.

// reminderTokens and reminderRepeat are the reminders' texts.
func reminderTokens(n int) string {
	return fmt.Sprintf("[foldproxy] The main thread has taken in about %d tokens of tool output since the last fold. Do exploration (reading, searching, trying commands) inside a branch: branch_create, work, then branch_return with a short summary, so the output folds out of the context.", n)
}

const reminderRepeat = "[foldproxy] This call failed before with the same input. Investigate the failure inside a branch (branch_create ... branch_return with what you learn) instead of repeating it in the main thread."

var reFailed = regexp.MustCompile(`(?i)(exit code:?\s*[1-9]|returncode:?\s*[1-9]|^error\b|^traceback)`)

// failed reports whether a result reports a failure: the client's error
// flag, or a non-zero exit code / error at the start of the text.
func failed(r *result) bool {
	if r.isError {
		return true
	}
	t := r.text
	if len(t) > 200 {
		t = t[:200]
	}
	return reFailed.MatchString(t)
}

func (a *applier) guidance(removed []bool) {
	g := a.opt.Guidance
	// Only agents that have the fold tools are told to use them. The tool
	// list is the same on every request of a session, so this keeps the
	// placement stable.
	tools, ok := a.c.top.get("tools")
	if g.Off || !ok || !bytes.Contains(a.c.body[tools.s:tools.e], []byte(toolCreate)) {
		return
	}
	after := g.AfterTokens
	if after <= 0 {
		after = DefaultAfterTokens
	}
	c := a.c
	// Messages inside any span (open or closed) are not the main thread;
	// span starts and ends are folds.
	inSpan := make([]bool, len(c.msgs))
	foldAt := make([]bool, len(c.msgs)+1)
	for _, sp := range a.spans {
		foldAt[sp.createMsg] = true
		// The results of the turn that created the branch are not
		// counted: the agent has just folded.
		for i := sp.createMsg; i < sp.start; i++ {
			inSpan[i] = true
		}
		end := sp.end
		if end < 0 {
			end = len(c.msgs) - 1
		} else {
			foldAt[end] = true
		}
		for i := sp.start; i <= end; i++ {
			inSpan[i] = true
		}
	}
	failedCalls := map[string]bool{}
	since := 0
	repeat := false
	for i := range c.msgs {
		if foldAt[i] {
			since, repeat = 0, false
		}
		m := &c.msgs[i]
		if inSpan[i] || removed[i] || len(m.results) == 0 {
			continue
		}
		for j := range m.results {
			r := &m.results[j]
			name := c.callName(r.callID)
			if isFoldTool(name) {
				continue
			}
			since += a.count(r.text)
			key := name + "\x00"
			if cr, ok := c.calls[r.callID]; ok {
				key += c.msgs[cr.msg].calls[cr.idx].input
			}
			if failedCalls[key] && !g.NoRepeats {
				repeat = true
			}
			if failed(r) {
				failedCalls[key] = true
			}
		}
		// Evaluate at the end of a run of result messages.
		if i+1 < len(c.msgs) && len(c.msgs[i+1].results) > 0 && !inSpan[i+1] {
			continue
		}
		var text string
		switch {
		case since > after:
			text = reminderTokens(since)
		case repeat:
			text = reminderRepeat
		default:
			continue
		}
		since, repeat = 0, false
		if a.remind(i, text) {
			a.res.Reminders++
			if i == len(c.msgs)-1 {
				a.res.Guidance = true
			}
		}
	}
}

// remind places a reminder on message i.
func (a *applier) remind(i int, text string) bool {
	c := a.c
	m := &c.msgs[i]
	if c.d == Anthropic {
		if !m.array || m.role != "user" {
			return false
		}
		b := append(append([]byte(`,{"type":"text","text":`), jsonscan.Quote(text)...), '}')
		a.edits = append(a.edits, edit{m.content.e - 1, m.content.e - 1, b})
		return true
	}
	// OpenAI dialects: the last result of the run that is not a fold
	// tool's (whose text the fold may replace).
	var r *result
	for x := i; x >= 0 && r == nil && len(c.msgs[x].results) > 0; x-- {
		rs := c.msgs[x].results
		for y := len(rs) - 1; y >= 0; y-- {
			if !isFoldTool(c.callName(rs[y].callID)) && !rs[y].nested {
				r = &rs[y]
				break
			}
		}
	}
	if r == nil {
		return false
	}
	if r.single || !r.val.ok() {
		// The result's own edits (scrub, cut) replace the value; add to
		// the text they produce.
		for x := range a.edits {
			e := &a.edits[x]
			if e.s == r.val.s && e.e == r.val.e && r.val.ok() {
				s, _ := unquote(e.b)
				e.b = jsonscan.Quote(joinNotice(s, text))
				return true
			}
		}
		a.replaceValue(r, joinNotice(r.text, text))
		return true
	}
	if c.body[r.val.s] == '[' {
		a.appendPart(r, text)
		return true
	}
	return false
}
