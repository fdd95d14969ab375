package modelwire

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/foldproxy/foldproxy/policy/jsonscan"
)

// Names of the fold tools, matched as suffixes of the names a client gives
// them (see hasSuffixTool).
const (
	toolCreate = "branch_create"
	toolReturn = "branch_return"
	toolStatus = "branch_status"
	toolRecall = "branch_recall"
)

func isFoldTool(name string) bool {
	return hasSuffixTool(name, toolCreate) || hasSuffixTool(name, toolReturn) ||
		hasSuffixTool(name, toolStatus) || hasSuffixTool(name, toolRecall)
}

// withheld replaces a tool result that could not be scanned for secrets.
const withheld = "[foldproxy] This tool result was withheld: it could not be scanned for secrets, so it was not sent to the model. Run the tool again, or read the output in smaller parts."

// ErrNotJSON is Apply's error for a body that is not valid JSON.
var ErrNotJSON = errors.New("modelwire: the request body is not valid JSON")

// Apply is the context manager F: a pure function of the request and the
// state. It folds every closed branch span to its summary, charges the
// tool results of open spans once each (cutting one that overruns its
// branch's budget), scrubs tool results through opt.Scrub, and adds
// guidance. Only the bytes it changes differ from body; when it changes
// nothing, Result.Body is body itself.
//
// An error means the request could not be read as the dialect's request or
// the state failed; the caller should not forward the request as is when
// the state failed (budgets would not hold), and may when the body is not a
// request it understands (the API will answer the client's error).
func Apply(ctx context.Context, d Dialect, body []byte, st State, opt Options) (Result, error) {
	switch d {
	case Anthropic, OpenAIChat, OpenAIResponses:
	default:
		return Result{}, fmt.Errorf("modelwire: unknown dialect %q", d)
	}
	if !jsonscan.Valid(body) { // as encoding/json.Valid, faster
		return Result{}, ErrNotJSON
	}
	if err := opt.Memo.duplicateKey(body); err != nil {
		return Result{}, err
	}
	c, err := parseConv(d, body)
	if err != nil {
		return Result{}, err
	}
	a := &applier{c: c, st: st, opt: opt, ctx: ctx}
	res, err := a.run()
	if err != nil {
		return Result{}, err
	}
	return res, a.observe(res)
}

// spanInfo is one branch span found in the conversation.
type spanInfo struct {
	id         string
	createMsg  int    // the message holding the branch_create call
	createCall string // its tool-use id
	resMsg     int    // the message holding its result
	start      int    // first message of the span's body
	end        int    // last message of the span's body; -1 while open
	parent     int    // index of the enclosing span, -1 for the main thread
	br         Branch
	known      bool // the state knows the branch
	cutEnd     bool // the span ends at the model-wire cut that force-returned it
	fold       bool
	covered    bool // folded, or inside a folded span
}

type applier struct {
	c   *conv
	st  State
	opt Options
	ctx context.Context

	spans []spanInfo
	owner map[resRef]int // result -> innermost span (-1: main thread)
	dels  []delivery     // the results that stay, in order
	edits []edit

	// Automatic folding (autofold.go, recalltool.go).
	af         *afConfig // resolved configuration
	afSkip     bool      // the request is managed by the API's own context_management
	msgTok     []int     // tokens of each message as received
	recallTool bool      // the recall tool was added to this request
	inPieces   []Piece   // the request's layout as received
	res        Result
	// userScrubbed are the user texts scrubbing changed, by the start
	// of their JSON string (scrubtext.go).
	userScrubbed map[int]string
}

type edit struct {
	s, e int
	b    []byte
}

func (a *applier) run() (Result, error) {
	c := a.c
	a.res.Body = c.body
	a.res.TokensBefore = a.countContext(c)
	if clearsToolResults(c) {
		// The API clears tool results itself: automatic folding stands
		// aside (it repeats what it decided before, and adds nothing).
		a.afSkip = true
	}
	a.res.AutoFold.Observe = a.observing()
	a.planRecallTool()
	if len(c.msgs) > 0 {
		if err := a.discover(); err != nil {
			return Result{}, err
		}
		if err := a.markEnds(); err != nil {
			return Result{}, err
		}
		a.decideFolds()
		removed := a.removedMsgs()
		if err := a.results(removed); err != nil {
			return Result{}, err
		}
		if err := a.userText(removed); err != nil {
			return Result{}, err
		}
		a.guidance(removed)
		a.foldEdits()
	}
	if len(a.edits) == 0 {
		a.res.TokensAfter = a.res.TokensBefore
		a.res.Pieces = a.inPieces
		return a.res, nil
	}
	out, err := applyEdits(c.body, a.edits)
	if err != nil {
		return Result{}, err
	}
	a.res.Body, a.res.Changed = out, true
	if err := a.countForwarded(out); err != nil {
		return Result{}, err
	}
	return a.res, nil
}

// countForwarded counts the forwarded request and lays it out (Pieces)
// without parsing its messages again: one pass over its top level, and a
// message it carries unchanged is counted from the Memo.
func (a *applier) countForwarded(out []byte) error {
	top, err := parseObj(out, span{0, len(out)})
	if err != nil {
		return fmt.Errorf("modelwire: internal error: the folded request is not an object: %w", err)
	}
	n := 0
	for _, key := range []string{"system", "instructions"} {
		if v, ok := top.get(key); ok {
			n += a.countRaw(out, v)
		}
	}
	key := "messages"
	if a.c.d == OpenAIResponses {
		key = "input"
	}
	arr, ok := top.get(key)
	if !ok || out[arr.s] != '[' {
		a.res.TokensAfter = n
		a.res.Pieces = []Piece{{0, a.opt.Memo.sum(out)}}
		return nil
	}
	els, err := elements(out, arr)
	if err != nil {
		return fmt.Errorf("modelwire: internal error: the folded request's %s is not an array: %w", key, err)
	}
	head := len(out)
	if len(els) > 0 {
		head = els[0].s
	}
	ps := make([]Piece, 0, len(els)+1)
	ps = append(ps, Piece{0, a.opt.Memo.sum(out[:head])})
	for _, el := range els {
		sum := a.opt.Memo.sum(out[el.s:el.e])
		ps = append(ps, Piece{el.s, sum})
		n += a.countSum(out, el, sum)
	}
	a.res.TokensAfter, a.res.Pieces = n, ps
	return nil
}

// countRaw counts the text of the JSON value at v, from the Memo when it
// saw these bytes before.
func (a *applier) countRaw(b []byte, v span) int {
	return a.countSum(b, v, a.opt.Memo.sum(b[v.s:v.e]))
}

func (a *applier) countSum(b []byte, v span, sum uint64) int {
	if n, ok := a.opt.Memo.getTokens(sum); ok {
		return n
	}
	var sb strings.Builder
	collect(b, v, &sb)
	n := a.count(sb.String())
	a.opt.Memo.putTokens(sum, n)
	return n
}

// countContext counts the conversation as received, keeping each
// message's tokens for the planner of automatic folds and its digest for
// Pieces (a request forwarded unchanged is laid out from these).
func (a *applier) countContext(c *conv) int {
	n := 0
	for _, key := range []string{"system", "instructions"} {
		if v, ok := c.top.get(key); ok {
			n += a.countRaw(c.body, v)
		}
	}
	a.msgTok = make([]int, len(c.msgs))
	a.inPieces = make([]Piece, 0, len(c.msgs)+1)
	head := len(c.body)
	if len(c.msgs) > 0 {
		head = c.msgs[0].sp.s
	}
	a.inPieces = append(a.inPieces, Piece{0, a.opt.Memo.sum(c.body[:head])})
	for i, m := range c.msgs {
		sum := a.opt.Memo.sum(c.body[m.sp.s:m.sp.e])
		a.inPieces = append(a.inPieces, Piece{m.sp.s, sum})
		a.msgTok[i] = a.countSum(c.body, m.sp, sum)
		n += a.msgTok[i]
	}
	return n
}

// clearsToolResults reports whether the request asks the API to clear
// tool results itself (Anthropic's context_management with a
// clear_tool_uses edit; Claude Code's clear_thinking edit is not one).
func clearsToolResults(c *conv) bool {
	cm, ok := c.top.get("context_management")
	if !ok || c.body[cm.s] != '{' {
		return false
	}
	o, err := parseObj(c.body, cm)
	if err != nil {
		return false
	}
	ev, ok := o.get("edits")
	if !ok || c.body[ev.s] != '[' {
		return false
	}
	els, err := elements(c.body, ev)
	if err != nil {
		return false
	}
	for _, el := range els {
		if c.body[el.s] != '{' {
			continue
		}
		if eo, err := parseObj(c.body, el); err == nil && strings.HasPrefix(eo.str("type"), "clear_tool_uses") {
			return true
		}
	}
	return false
}

// observe hands the result to the State when it is an Observer.
func (a *applier) observe(res Result) error {
	if o, ok := a.st.(Observer); ok && len(res.Branches) > 0 {
		if err := o.Observe(a.ctx, res); err != nil {
			return fmt.Errorf("modelwire: record the context size: %w", err)
		}
	}
	return nil
}

func (a *applier) countAll(pieces []string) int {
	n := 0
	for _, p := range pieces {
		n += a.count(p)
	}
	return n
}

func (a *applier) count(s string) int {
	if a.opt.Count == nil {
		return (len(s) + 3) / 4
	}
	return a.opt.Count(s)
}

func (a *applier) chargedOnMCP(name string) bool {
	if a.opt.ChargedOnMCP != nil {
		return a.opt.ChargedOnMCP(name)
	}
	return strings.HasPrefix(name, "mcp__")
}

// delivery is what the model is to read of one tool result that stays in
// the request, decided before any edit is made: scrubbed, cut to its
// oversize or its branch's budget, with notices, or folded to a stub.
type delivery struct {
	r    *result
	msg  int
	name string
	k    int // the innermost span holding it, -1 for the main thread
	// text is the result as the model reads it (text parts joined by
	// "\n"), after every change below.
	text string
	// The change to make when it is not folded: a new value (a string),
	// or text parts scrubbed (parts) with a notice as a last part.
	value    *string
	parts    []string
	notice   string
	withheld bool
	// handled: the model wire scrubbed and charged it (not a fold tool's
	// result, nor one the MCP wire handled).
	handled bool
	// clearError: an answer of the added recall tool replaced the
	// client's error; the result is no longer an error.
	clearError bool
	// stub, when set, replaces the result: an automatic fold.
	stub string
}

func (d *delivery) setValue(v string) { d.value, d.parts, d.notice, d.text = &v, nil, "", v }

// results scrubs, charges and cuts the results that stay, folds them
// automatically when that is on, then makes the edits.
func (a *applier) results(removed []bool) error {
	c := a.c
	if _, err := a.rewrittenRecalls(); err != nil {
		return err
	}
	for i := range c.msgs {
		if removed[i] {
			continue
		}
		m := &c.msgs[i]
		for j := range m.results {
			r := &m.results[j]
			name := c.callName(r.callID)
			if name == "" {
				name = r.name
			}
			d := delivery{r: r, msg: i, name: name, k: a.owner[resRef{i, j}], text: r.text}
			switch {
			case isFoldTool(name):
				if err := a.recallCall(&d); err != nil {
					return err
				}
				if d.value == nil {
					// A fold tool's answer is clean; an upstream tool
					// named like one may not be.
					a.scrub(&d)
				}
			case a.chargedOnMCP(name):
				// Charged on the MCP wire; scrubbed again all the same,
				// since a name cannot prove it passed through foldproxy.
				a.scrub(&d)
			default:
				d.handled = true
				if err := a.deliver(&d); err != nil {
					return err
				}
			}
			a.dels = append(a.dels, d)
		}
	}
	if err := a.autoFold(); err != nil {
		return err
	}
	for x := range a.dels {
		a.emit(&a.dels[x])
	}
	return nil
}

// deliver decides one tool result that stays in the request: scrub, cut
// an oversized result to its head and tail, then charge it to span k when
// it is open.
func (a *applier) deliver(d *delivery) error {
	r, name, k := d.r, d.name, d.k
	if !a.scrub(d) {
		return nil
	}
	if err := a.oversize(d); err != nil {
		return err
	}
	text := d.text
	dec := Decision{Keep: len(text)}
	// Closed spans are asked too: a result cut before its branch closed
	// keeps its cut (the state remembers decisions; it charges a closed
	// branch nothing).
	if k >= 0 && a.spans[k].known {
		var err error
		dec, err = a.st.ChargeResult(a.ctx, a.spans[k].id, r.callID, name, text)
		if err != nil {
			return fmt.Errorf("modelwire: charge the result of %s (%s) to branch %s: %w", name, r.callID, a.spans[k].id, err)
		}
		dec.Keep = max(0, dec.Keep)
		if br := a.spans[k].br; br.EndNotice != "" && br.EndCall == r.callID {
			dec.Notice = joinNotice(dec.Notice, br.EndNotice)
		}
	}
	switch {
	case dec.Keep < len(text):
		a.res.Cut++
		kept := text[:alignRune(text, dec.Keep)]
		d.setValue(joinNotice(kept, dec.Notice))
	case dec.Notice != "":
		if d.parts == nil || d.value != nil || r.single || r.nested || len(r.texts) == 0 {
			d.setValue(joinNotice(text, dec.Notice))
		} else {
			d.notice, d.text = dec.Notice, joinNotice(text, dec.Notice)
		}
	}
	return nil
}

// scrub scrubs a result that stays, its parts as one text; it reports
// false when the result could not be scanned and is withheld (fail closed:
// nothing of it reaches the model, nor the budget).
func (a *applier) scrub(d *delivery) bool {
	r := d.r
	text := r.text
	if a.opt.Scrub != nil && text != "" {
		var err error
		if r.single || len(r.texts) == 0 {
			var s string
			s, err = a.opt.Scrub(a.ctx, text)
			if err == nil && s != text {
				d.setValue(s)
			}
		} else {
			ps := make([]string, len(r.texts))
			for x, v := range r.texts {
				ps[x], _ = unquote(a.c.body[v.s:v.e])
			}
			var changed bool
			if ps, changed, err = a.scrubParts(ps); err == nil && changed {
				d.parts, d.text = ps, strings.Join(ps, "\n")
			}
		}
		if err != nil {
			// Fail closed: nothing of it reaches the model, nor the budget.
			d.setValue(withheld)
			d.withheld = true
			return false
		}
	}
	return true
}

// emit makes the edits a delivery decided.
func (a *applier) emit(d *delivery) {
	r := d.r
	switch {
	case d.stub != "":
		a.replaceValue(r, d.stub)
	case d.clearError:
		a.replaceValue(r, *d.value)
		a.clearErrorFlag(r)
	case d.value != nil:
		a.replaceValue(r, *d.value)
	case d.parts != nil && !r.single && len(r.texts) > 0:
		a.replaceParts(r, d.parts)
		if d.notice != "" {
			a.appendPart(r, d.notice)
		}
	case d.parts != nil:
		a.replaceValue(r, strings.Join(d.parts, "\n"))
	}
}

func joinNotice(text, notice string) string {
	if notice == "" {
		return text
	}
	if text == "" {
		return notice
	}
	return text + "\n\n" + notice
}

// replaceValue replaces a result's content with one string.
func (a *applier) replaceValue(r *result, text string) {
	if r.val.ok() {
		a.edits = append(a.edits, edit{r.val.s, r.val.e, jsonscan.Quote(text)})
		return
	}
	// No content at all: add it before the object's closing brace.
	b := []byte(`,"` + r.key + `":`)
	if isEmptyObject(a.c.body, r.obj) {
		b = b[1:]
	}
	a.edits = append(a.edits, edit{r.obj.e - 1, r.obj.e - 1, append(b, jsonscan.Quote(text)...)})
}

func isEmptyObject(b []byte, o span) bool {
	return jsonscan.SkipSpace(b, o.s+1) == o.e-1
}

func (a *applier) replaceParts(r *result, parts []string) {
	for x, v := range r.texts {
		if s, _ := unquote(a.c.body[v.s:v.e]); s != parts[x] {
			a.edits = append(a.edits, edit{v.s, v.e, jsonscan.Quote(parts[x])})
		}
	}
}

// appendPart adds a text part at the end of an array content.
func (a *applier) appendPart(r *result, text string) {
	typ := "text"
	if a.c.d == OpenAIResponses {
		typ = "input_text"
	}
	b := []byte(`,{"type":"` + typ + `","text":`)
	b = append(append(b, jsonscan.Quote(text)...), '}')
	a.edits = append(a.edits, edit{r.val.e - 1, r.val.e - 1, b})
}

// foldEdits replaces each folded span: the branch_create result becomes
// the branch's summary and the span's messages go.
func (a *applier) foldEdits() {
	c := a.c
	for _, sp := range a.spans {
		if !sp.fold {
			continue
		}
		r, _, _ := c.result(sp.createCall)
		sum := sp.br.Summary
		if strings.TrimSpace(sum) == "" {
			sum = "[foldproxy] Branch " + sp.id + " is closed and folded; branch_recall with branch_id " + sp.id + " reads what it received."
		}
		a.replaceValue(r, sum)
		if c.d == Anthropic {
			a.mergeTail(sp)
		}
		// Items of the span that are not the conversation's (roleItem)
		// stay, in order.
		var kept []byte
		for i := sp.start; i <= sp.end; i++ {
			if m := &c.msgs[i]; m.role == roleItem {
				kept = append(append(kept, ','), c.body[m.sp.s:m.sp.e]...)
			}
		}
		a.edits = append(a.edits, edit{c.msgs[sp.start-1].sp.e, c.msgs[sp.end].sp.e, kept})
	}
}

// mergeTail moves what the span's last user message holds besides tool
// results (text the user typed, reminders) to the message holding
// branch_create's result, and keeps a cache breakpoint that the removed
// messages carried on the last block that stays.
func (a *applier) mergeTail(sp spanInfo) {
	c := a.c
	dst := &c.msgs[sp.resMsg]
	last := &c.msgs[sp.end]
	if !dst.array || last.role != "user" {
		return
	}
	var tail [][]byte
	if last.array {
		for _, blk := range last.blocks {
			if blk.result < 0 {
				tail = append(tail, a.userBytes(blk.sp))
			}
		}
	} else if last.content.ok() && c.body[last.content.s] == '"' {
		s, _ := unquote(c.body[last.content.s:last.content.e])
		if v, ok := a.userScrubbed[last.content.s]; ok {
			s = v
		}
		if s != "" {
			tail = append(tail, append(append([]byte(`{"type":"text","text":`), jsonscan.Quote(s)...), '}'))
		}
	}
	// A cache breakpoint that goes with the removed blocks.
	var marker []byte
	for i := sp.start; i <= sp.end && marker == nil; i++ {
		for bi, blk := range c.msgs[i].blocks {
			if blk.cache && (i != sp.end || blk.result >= 0) {
				o, err := parseObj(c.body, blk.sp)
				if err == nil {
					if v, ok := o.get("cache_control"); ok {
						marker = c.body[v.s:v.e]
					}
				}
				_ = bi
				break
			}
		}
	}
	if marker != nil {
		if n := len(tail); n > 0 {
			if !bytes.Contains(tail[n-1], []byte(`"cache_control"`)) {
				tail[n-1] = addMember(tail[n-1], "cache_control", marker)
			}
		} else if nb := len(dst.blocks); nb > 0 && !dst.blocks[nb-1].cache {
			blk := dst.blocks[nb-1]
			a.edits = append(a.edits, edit{blk.sp.e - 1, blk.sp.e - 1, []byte(`,"cache_control":` + string(marker))})
		}
	}
	if len(tail) == 0 {
		return
	}
	var b []byte
	for _, t := range tail {
		b = append(append(b, ','), t...)
	}
	if len(dst.blocks) == 0 {
		b = b[1:]
	}
	a.edits = append(a.edits, edit{dst.content.e - 1, dst.content.e - 1, b})
}

// addMember returns a copy of the object raw with key: val added last.
func addMember(raw []byte, key string, val []byte) []byte {
	end := bytes.LastIndexByte(raw, '}')
	out := append([]byte(nil), raw[:end]...)
	if !isEmptyObject(raw, span{0, len(raw)}) {
		out = append(out, ',')
	}
	out = append(out, jsonscan.Quote(key)...)
	out = append(out, ':')
	out = append(out, val...)
	return append(out, raw[end:]...)
}

// applyEdits applies non-overlapping edits to body.
func applyEdits(body []byte, edits []edit) ([]byte, error) {
	slices.SortStableFunc(edits, func(x, y edit) int {
		if x.s != y.s {
			return x.s - y.s
		}
		return x.e - y.e
	})
	// Drop edits inside removed ranges (results of removed messages).
	var keep []edit
	for _, e := range edits {
		if len(keep) > 0 {
			p := keep[len(keep)-1]
			if p.b == nil && p.e > p.s && e.s >= p.s && e.s < p.e && e.e <= p.e {
				continue
			}
		}
		keep = append(keep, e)
	}
	out := make([]byte, 0, len(body))
	at := 0
	for _, e := range keep {
		if e.s < at {
			return nil, fmt.Errorf("modelwire: internal error: overlapping edits at byte %d (%d-%d %q)", e.s, e.s, e.e, e.b)
		}
		out = append(out, body[at:e.s]...)
		out = append(out, e.b...)
		at = e.e
	}
	return append(out, body[at:]...), nil
}
