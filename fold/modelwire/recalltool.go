package modelwire

import (
	"bytes"
	"encoding/json"
	"fmt"

	"strings"

	"github.com/foldproxy/foldproxy/policy/jsonscan"
)

// The recall tool. A stub names its handle the way a cut notice does
// ("branch_recall with handle H"). An agent that has foldproxy's MCP entry
// has branch_recall among its tools and reads folds through it. One that
// talks to the model wire alone (no MCP entry, transparent mode) has no
// such tool: Apply then adds one named branch_recall to the request's
// tools, from the first request on (the tool list is the start of the
// cached prefix, so it is there before anything is folded and never
// moves), and answers its calls itself. The agent's client does not know
// the tool: it answers the call with an error of its own ("No such tool
// available"), and Apply puts the recalled page in place of that answer on
// every request that carries it, the same bytes each time (the archive
// does not change), so the model reads what it asked for.

// recallDescription is the added tool's description.
const recallDescription = "Read back a tool result that foldproxy folded out of this conversation: pass the handle its stub names; offset reads on from where a page ended."

// recallSchema is the added tool's input schema.
const recallSchema = `{"type":"object","properties":{"handle":{"type":"string"},"offset":{"type":"integer","minimum":0},"max_tokens":{"type":"integer","minimum":1}},"required":["handle"]}`

// recallToolJSON is the added tool's definition in dialect d.
func recallToolJSON(d Dialect) []byte {
	desc := string(jsonscan.Quote(recallDescription))
	switch d {
	case Anthropic:
		return []byte(`{"name":"` + toolRecall + `","description":` + desc + `,"input_schema":` + recallSchema + `}`)
	case OpenAIChat:
		return []byte(`{"type":"function","function":{"name":"` + toolRecall + `","description":` + desc + `,"parameters":` + recallSchema + `}}`)
	default:
		return []byte(`{"type":"function","name":"` + toolRecall + `","description":` + desc + `,"parameters":` + recallSchema + `}`)
	}
}

// planRecallTool decides whether this request gets the recall tool: when
// automatic folding is on, and the request offers tools but none that
// reads folds.
func (a *applier) planRecallTool() {
	if _, ok := a.afActive(); !ok || a.observing() {
		return
	}
	tools, ok := a.c.top.get("tools")
	if !ok || a.c.body[tools.s] != '[' {
		return
	}
	els, err := elements(a.c.body, tools)
	if err != nil || len(els) == 0 {
		return
	}
	for _, el := range els {
		if toolNameOf(a.c.body, el, a.c.d) == "" {
			continue
		}
		if hasSuffixTool(toolNameOf(a.c.body, el, a.c.d), toolRecall) {
			return
		}
	}
	a.recallTool = true
	a.res.AutoFold.RecallTool = true
	a.edits = append(a.edits, edit{tools.e - 1, tools.e - 1, append([]byte{','}, recallToolJSON(a.c.d)...)})
}

// toolNameOf is the name of a tool definition.
func toolNameOf(b []byte, el span, d Dialect) string {
	if b[el.s] != '{' {
		return ""
	}
	o, err := parseObj(b, el)
	if err != nil {
		return ""
	}
	if n := o.str("name"); n != "" {
		return n
	}
	if fv, ok := o.get("function"); ok && b[fv.s] == '{' {
		if fo, err := parseObj(b, fv); err == nil {
			return fo.str("name")
		}
	}
	return ""
}

// rewrittenRecalls finds the calls of the added recall tool that the
// client rewrote: calls of tools the request does not offer, which the
// State remembers as recall calls. It restores each as the model made it
// (name and input) and returns them by id.
func (a *applier) rewrittenRecalls() (map[string]bool, error) {
	rc, ok := a.st.(RecallCaller)
	if !ok || !a.recallTool {
		return nil, nil
	}
	offered := a.offeredTools()
	var ids []string
	for i := range a.c.msgs {
		for _, cl := range a.c.msgs[i].calls {
			if cl.id != "" && cl.name != toolRecall && !offered[cl.name] {
				ids = append(ids, cl.id)
			}
		}
	}
	if len(ids) == 0 {
		return nil, nil
	}
	got, err := rc.RecallCalls(a.ctx, ids)
	if err != nil {
		return nil, fmt.Errorf("modelwire: read the recall calls: %w", err)
	}
	out := map[string]bool{}
	for id, call := range got {
		ref := a.c.calls[id]
		cl := &a.c.msgs[ref.msg].calls[ref.idx]
		if !cl.nameSp.ok() || !cl.inputSp.ok() || !jsonscan.Valid([]byte(call.Input)) {
			continue
		}
		a.edits = append(a.edits, edit{cl.nameSp.s, cl.nameSp.e, jsonscan.Quote(toolRecall)})
		if a.c.body[cl.inputSp.s] == '"' {
			a.edits = append(a.edits, edit{cl.inputSp.s, cl.inputSp.e, jsonscan.Quote(call.Input)})
		} else {
			a.edits = append(a.edits, edit{cl.inputSp.s, cl.inputSp.e, []byte(call.Input)})
		}
		cl.name, cl.input = toolRecall, call.Input
		out[id] = true
	}
	return out, nil
}

// offeredTools are the names of the request's tools.
func (a *applier) offeredTools() map[string]bool {
	out := map[string]bool{}
	tools, ok := a.c.top.get("tools")
	if !ok || a.c.body[tools.s] != '[' {
		return out
	}
	els, err := elements(a.c.body, tools)
	if err != nil {
		return out
	}
	for _, el := range els {
		if n := toolNameOf(a.c.body, el, a.c.d); n != "" {
			out[n] = true
		}
	}
	return out
}

// recallCall answers a call of the added recall tool: the page it asks for
// replaces whatever the client answered.
func (a *applier) recallCall(d *delivery) error {
	if !a.recallTool || d.name != toolRecall {
		return nil
	}
	fo, ok := a.afActive()
	if !ok {
		return nil
	}
	var in struct {
		Handle    string `json:"handle"`
		Offset    *int   `json:"offset"`
		MaxTokens *int   `json:"max_tokens"`
	}
	input := a.callInput(d.r.callID)
	var text string
	if err := json.Unmarshal([]byte(input), &in); err != nil || strings.TrimSpace(in.Handle) == "" {
		text = `[foldproxy] branch_recall needs a "handle": the one a folded result's stub names.`
	} else {
		off, max := 0, 0
		if in.Offset != nil {
			off = *in.Offset
		}
		if in.MaxTokens != nil {
			max = *in.MaxTokens
		}
		page, err := fo.RecallFold(a.ctx, strings.TrimSpace(in.Handle), off, max)
		if err != nil {
			text = "[foldproxy] branch_recall: " + err.Error()
		} else {
			text = page
		}
	}
	d.setValue(text)
	d.clearError = d.r.isError
	a.res.AutoFold.Recalls++
	return nil
}

// clearErrorFlag sets an Anthropic tool_result's is_error to false.
func (a *applier) clearErrorFlag(r *result) {
	o, err := parseObj(a.c.body, r.obj)
	if err != nil {
		return
	}
	if v, ok := o.get("is_error"); ok && bytes.Equal(a.c.body[v.s:v.e], []byte("true")) {
		a.edits = append(a.edits, edit{v.s, v.e, []byte("false")})
	}
}
