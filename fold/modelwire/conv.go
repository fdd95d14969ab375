package modelwire

import "fmt"

// conv is a request's conversation, dialect-neutral: messages (Anthropic,
// Chat Completions) or items (Responses) with the calls and results they
// hold and the byte spans needed to edit them.
type conv struct {
	d     Dialect
	body  []byte
	top   obj   // the request object
	arr   span  // the messages / input array
	msgs  []msg // in order
	calls map[string]callRef
	res   map[string]resRef
}

type callRef struct{ msg, idx int }
type resRef struct{ msg, idx int }

// msg is one message or item.
type msg struct {
	role    string // user, assistant, system, developer, tool
	sp      span   // the element
	content span   // Anthropic: the content value (array or string)
	array   bool   // content is an array of blocks (Anthropic)
	blocks  []block
	calls   []call
	results []result
	// legacyCall: a Chat assistant message with the legacy function_call,
	// answered by a message of role "function".
	legacyCall bool
}

// block is one content block of an Anthropic message.
type block struct {
	sp     span
	typ    string
	cache  bool // carries cache_control
	result int  // index into msg.results, -1 when not a tool_result
}

// call is one tool call.
type call struct {
	id, name string
	input    string // arguments as sent (raw JSON object or JSON-encoded string's content)
	// nameSp and inputSp are the spans of the name and input values (the
	// input is an object for Anthropic, a string for OpenAI).
	nameSp, inputSp span
}

// result is one tool result.
type result struct {
	callID  string
	obj     span   // the object holding the result
	key     string // "content" or "output"
	val     span   // the value of key; !ok when absent
	text    string // its text parts, joined by "\n"
	texts   []span // spans of the text values (array contents), in order
	single  bool   // the value is a string
	other   bool   // it holds non-text parts (images, ...)
	isError bool
	block   int // Anthropic: the block index in its message; -1 otherwise
	// nested: its text parts sit inside a structure (shapes.go) that
	// takes no added text part; a notice replaces the value instead.
	nested bool
	// name is the tool's name when the result names it itself (Chat's
	// role "function"), "" otherwise (the call names it).
	name string
}

func parseConv(d Dialect, body []byte) (*conv, error) {
	top, err := parseObj(body, span{0, len(body)})
	if err != nil {
		return nil, fmt.Errorf("modelwire: the request is not a JSON object")
	}
	c := &conv{d: d, body: body, top: top, calls: map[string]callRef{}, res: map[string]resRef{}}
	key := "messages"
	if d == OpenAIResponses {
		key = "input"
	}
	arr, ok := top.get(key)
	if !ok || body[arr.s] != '[' {
		return c, nil // no conversation (Responses input may be a string)
	}
	c.arr = arr
	els, err := elements(body, arr)
	if err != nil {
		return nil, fmt.Errorf("modelwire: %s is not an array", key)
	}
	for i, el := range els {
		if body[el.s] != '{' {
			return nil, fmt.Errorf("modelwire: %s[%d] is not an object", key, i)
		}
		var m msg
		switch d {
		case Anthropic:
			m, err = parseAnthropicMsg(body, el)
		case OpenAIChat:
			m, err = parseChatMsg(body, el, i)
		default:
			m, err = parseResponsesItem(body, el, i)
		}
		if err != nil {
			return nil, fmt.Errorf("modelwire: %s[%d]: %w", key, i, err)
		}
		for j, cl := range m.calls {
			if cl.id != "" {
				if _, dup := c.calls[cl.id]; !dup {
					c.calls[cl.id] = callRef{len(c.msgs), j}
				}
			}
		}
		for j, r := range m.results {
			if _, dup := c.res[r.callID]; !dup {
				c.res[r.callID] = resRef{len(c.msgs), j}
			}
		}
		c.msgs = append(c.msgs, m)
	}
	return c, nil
}

// readContent fills r's text from its value: a string, or an array of parts
// whose text parts ("text", "input_text", "output_text") are joined.
func readContent(b []byte, r *result) error {
	if !r.val.ok() {
		return nil
	}
	switch b[r.val.s] {
	case '"':
		s, err := unquote(b[r.val.s:r.val.e])
		if err != nil {
			return err
		}
		r.text, r.single = s, true
	case '[':
		els, err := elements(b, r.val)
		if err != nil {
			return err
		}
		for _, el := range els {
			if b[el.s] != '{' {
				r.other = true
				continue
			}
			o, err := parseObj(b, el)
			if err != nil {
				return err
			}
			switch o.str("type") {
			case "text", "input_text", "output_text":
				v, ok := o.get("text")
				if !ok || b[v.s] != '"' {
					r.other = true
					continue
				}
				r.texts = append(r.texts, v)
			case "document", "search_result":
				// Their text is read too (shapes.go).
				r.other = true
				collectTexts(b, el, r, 0)
			default:
				r.other = true
			}
		}
		return readTexts(b, r)
	case 'n': // null
	default:
		r.other = true
	}
	return nil
}

func parseAnthropicMsg(b []byte, el span) (msg, error) {
	o, err := parseObj(b, el)
	if err != nil {
		return msg{}, err
	}
	m := msg{role: o.str("role"), sp: el}
	cv, ok := o.get("content")
	if !ok {
		return m, nil
	}
	m.content = cv
	if b[cv.s] != '[' {
		return m, nil
	}
	m.array = true
	els, err := elements(b, cv)
	if err != nil {
		return msg{}, err
	}
	for _, bel := range els {
		blk := block{sp: bel, result: -1}
		if b[bel.s] != '{' {
			m.blocks = append(m.blocks, blk)
			continue
		}
		bo, err := parseObj(b, bel)
		if err != nil {
			return msg{}, err
		}
		blk.typ = bo.str("type")
		_, blk.cache = bo.get("cache_control")
		switch blk.typ {
		case "tool_use", "server_tool_use", "mcp_tool_use":
			cl := call{id: bo.str("id"), name: bo.str("name")}
			cl.nameSp, _ = bo.get("name")
			if in, ok := bo.get("input"); ok {
				cl.input, cl.inputSp = string(b[in.s:in.e]), in
			}
			if blk.typ == "tool_use" {
				m.calls = append(m.calls, cl)
			}
		case "mcp_tool_result", "web_search_tool_result", "web_fetch_tool_result", "code_execution_tool_result",
			"bash_code_execution_tool_result", "text_editor_code_execution_tool_result", "tool_search_tool_result":
			// A server tool's answer, in an assistant message (shapes.go).
			if id := bo.str("tool_use_id"); id != "" {
				r, err := otherResult(b, bo, bel, "content", id, len(m.blocks))
				if err != nil {
					return msg{}, err
				}
				r.nested = true
				blk.result = len(m.results)
				m.results = append(m.results, r)
			}
		case "tool_result":
			r := result{callID: bo.str("tool_use_id"), obj: bel, key: "content", isError: bo.isTrue("is_error"), block: len(m.blocks)}
			r.val, _ = bo.get("content")
			if err := readContent(b, &r); err != nil {
				return msg{}, err
			}
			blk.result = len(m.results)
			m.results = append(m.results, r)
		}
		m.blocks = append(m.blocks, blk)
	}
	return m, nil
}

func parseChatMsg(b []byte, el span, index int) (msg, error) {
	o, err := parseObj(b, el)
	if err != nil {
		return msg{}, err
	}
	m := msg{role: o.str("role"), sp: el}
	m.content, _ = o.get("content")
	switch m.role {
	case "assistant":
		_, m.legacyCall = o.get("function_call")
		tc, ok := o.get("tool_calls")
		if !ok || b[tc.s] != '[' {
			break
		}
		els, err := elements(b, tc)
		if err != nil {
			return msg{}, err
		}
		for _, t := range els {
			to, err := parseObj(b, t)
			if err != nil {
				return msg{}, err
			}
			cl := call{id: to.str("id")}
			if fv, ok := to.get("function"); ok && b[fv.s] == '{' {
				fo, err := parseObj(b, fv)
				if err != nil {
					return msg{}, err
				}
				cl.name, cl.input = fo.str("name"), fo.str("arguments")
				cl.nameSp, _ = fo.get("name")
				cl.inputSp, _ = fo.get("arguments")
			} else if cv, ok := to.get("custom"); ok && b[cv.s] == '{' {
				co, err := parseObj(b, cv)
				if err != nil {
					return msg{}, err
				}
				cl.name, cl.input = co.str("name"), co.str("input")
			}
			m.calls = append(m.calls, cl)
		}
	case "tool":
		r := result{callID: o.str("tool_call_id"), obj: el, key: "content", val: m.content, block: -1}
		if err := readContent(b, &r); err != nil {
			return msg{}, err
		}
		m.results = append(m.results, r)
	case "function":
		// The legacy answer to a function_call: no call id, the name
		// its own (shapes.go).
		r := result{callID: synthID("function", index), obj: el, key: "content", val: m.content, block: -1, name: o.str("name")}
		if err := readContent(b, &r); err != nil {
			return msg{}, err
		}
		m.results = append(m.results, r)
	}
	return m, nil
}

func parseResponsesItem(b []byte, el span, index int) (msg, error) {
	o, err := parseObj(b, el)
	if err != nil {
		return msg{}, err
	}
	m := msg{sp: el}
	typ := o.str("type")
	switch typ {
	case "", "message":
		m.role = o.str("role")
		m.content, _ = o.get("content")
	case "function_call", "custom_tool_call":
		m.role = "assistant"
		cl := call{id: o.str("call_id"), name: o.str("name")}
		cl.nameSp, _ = o.get("name")
		// Codex puts each MCP server's tools in a "namespace" tool and
		// calls them {"namespace":"mcp__foldproxy","name":"branch_create"}:
		// the full name is the one the client knows.
		if ns := o.str("namespace"); ns != "" {
			cl.name = ns + "__" + cl.name
		}
		if typ == "function_call" {
			cl.input = o.str("arguments")
			cl.inputSp, _ = o.get("arguments")
		} else {
			cl.input = o.str("input")
			cl.inputSp, _ = o.get("input")
		}
		m.calls = append(m.calls, cl)
	case "function_call_output", "custom_tool_call_output":
		m.role = "tool"
		r := result{callID: o.str("call_id"), obj: el, key: "output", block: -1}
		r.val, _ = o.get("output")
		if err := readContent(b, &r); err != nil {
			return msg{}, err
		}
		m.results = append(m.results, r)
	default:
		if responsesModelItems[typ] {
			// reasoning, web_search_call, local_shell_call,
			// item_reference...: the model's side of the conversation.
			m.role = "assistant"
			if responsesOutputs[typ] {
				// The answers of the shell tools and a hosted MCP call:
				// the model reads them (shapes.go).
				id := o.str("call_id")
				if id == "" {
					id = o.str("id")
				}
				if id == "" {
					id = synthID(typ, index)
				}
				r, err := otherResult(b, o, el, "output", id, -1)
				if err != nil {
					return msg{}, err
				}
				r.nested = true
				m.results = append(m.results, r)
			}
			break
		}
		// An item this parser does not know (Codex's additional_tools
		// and configuration_update, say): not the model's words, not a
		// tool result. It is left as it is, and a fold keeps it.
		m.role = roleItem
	}
	return m, nil
}

// roleItem is the role of a Responses input item the parser does not
// know: it takes no part in the conversation's structure, and a fold keeps
// its bytes where they are.
const roleItem = "item"

// responsesModelItems are the Responses API's item types that hold the
// model's side of the conversation (its outputs, and the client's answers
// to the built-in tools they call), besides messages and function calls.
var responsesModelItems = map[string]bool{
	"reasoning": true, "item_reference": true, "compaction": true, "compaction_summary": true,
	"web_search_call": true, "file_search_call": true, "image_generation_call": true, "code_interpreter_call": true,
	"computer_call": true, "computer_call_output": true, "local_shell_call": true, "local_shell_call_output": true,
	"shell_call": true, "shell_call_output": true, "apply_patch_call": true, "apply_patch_call_output": true,
	"mcp_call": true, "mcp_list_tools": true, "mcp_approval_request": true, "mcp_approval_response": true,
	"tool_search_call": true, "tool_search_output": true,
}

// responsesOutputs are the items of responsesModelItems that carry a
// tool's output the model reads.
var responsesOutputs = map[string]bool{
	"local_shell_call_output": true, "shell_call_output": true, "apply_patch_call_output": true, "mcp_call": true,
}

// turn returns the run of consecutive assistant messages around i.
func (c *conv) turn(i int) (lo, hi int) {
	lo, hi = i, i
	for lo > 0 && c.msgs[lo-1].role == "assistant" {
		lo--
	}
	for hi+1 < len(c.msgs) && c.msgs[hi+1].role == "assistant" {
		hi++
	}
	return lo, hi
}

// lastResultOf returns the index of the last message holding a result of a
// call of the turn lo..hi, and false when one of its calls has none.
func (c *conv) lastResultOf(lo, hi int) (int, bool) {
	last := hi
	for i := lo; i <= hi; i++ {
		for _, cl := range c.msgs[i].calls {
			r, ok := c.res[cl.id]
			if !ok || r.msg <= hi {
				return 0, false
			}
			last = max(last, r.msg)
		}
	}
	return last, true
}

func (c *conv) result(callID string) (*result, int, bool) {
	r, ok := c.res[callID]
	if !ok {
		return nil, 0, false
	}
	return &c.msgs[r.msg].results[r.idx], r.msg, true
}

func (c *conv) callName(callID string) string {
	r, ok := c.calls[callID]
	if !ok {
		return ""
	}
	return c.msgs[r.msg].calls[r.idx].name
}
