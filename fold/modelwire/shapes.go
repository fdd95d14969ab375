package modelwire

import "strconv"

// Result shapes beyond a string or an array of text parts. The model reads
// more than text parts: a tool_result may hold document blocks (a text
// document's data) and search_result blocks (a title and text parts);
// Anthropic's server tools answer in assistant messages
// (mcp_tool_result, web_fetch_tool_result, code_execution_tool_result...);
// Chat's legacy role "function" answers a function_call; the Responses
// API's shell tools answer in local_shell_call_output and
// shell_call_output items (stdout and stderr), and a hosted mcp_call
// carries its output. All of them are scrubbed (and charged) like any
// tool result: their text strings are the result's text parts.

// textKeys are the members whose strings the model reads as text in the
// parts of a result that are not plain text parts.
var textKeys = map[string]bool{
	"text": true, "title": true, "context": true, "stdout": true, "stderr": true,
	"output": true, "content": true, "error": true, "result": true,
}

// collectTexts appends to r.texts the spans of the strings of the value at
// v that the model reads: under textKeys, and a text document's data
// (source {"type":"text","data":...}). Binary data (base64 sources,
// images), ids, urls and types are left out.
func collectTexts(b []byte, v span, r *result, depth int) {
	if !v.ok() || depth > 16 {
		return
	}
	switch b[v.s] {
	case '[':
		els, err := elements(b, v)
		if err != nil {
			return
		}
		for _, el := range els {
			if b[el.s] == '"' {
				r.texts = append(r.texts, el)
				continue
			}
			collectTexts(b, el, r, depth+1)
		}
	case '{':
		o, err := parseObj(b, v)
		if err != nil {
			return
		}
		textSource := o.str("type") == "text" || o.str("type") == "plain_text"
		for _, m := range o.mem {
			switch {
			case m.key == "data" && textSource && b[m.val.s] == '"':
				r.texts = append(r.texts, m.val)
			case textKeys[m.key] && b[m.val.s] == '"':
				r.texts = append(r.texts, m.val)
			case m.key == "source" || m.key == "content" || m.key == "output" || m.key == "result":
				collectTexts(b, m.val, r, depth+1)
			}
		}
	}
}

// readTexts sets r.text from the spans r.texts names.
func readTexts(b []byte, r *result) error {
	var parts []string
	for _, v := range r.texts {
		s, err := unquote(b[v.s:v.e])
		if err != nil {
			return err
		}
		parts = append(parts, s)
	}
	r.text = joinParts(parts)
	return nil
}

func joinParts(parts []string) string {
	n := 0
	for _, p := range parts {
		n += len(p) + 1
	}
	out := make([]byte, 0, n)
	for i, p := range parts {
		if i > 0 {
			out = append(out, '\n')
		}
		out = append(out, p...)
	}
	return string(out)
}

// serverResults are the Anthropic blocks that answer a server tool in an
// assistant message.
var serverResults = map[string]bool{
	"mcp_tool_result": true, "web_search_tool_result": true, "web_fetch_tool_result": true,
	"code_execution_tool_result": true, "bash_code_execution_tool_result": true,
	"text_editor_code_execution_tool_result": true, "tool_search_tool_result": true,
}

// otherResult makes a result of a shape that holds text in places other
// than text parts: key's value at obj, its text the strings collectTexts
// finds. callID must not be empty (see synthID).
func otherResult(b []byte, o obj, el span, key, callID string, block int) (result, error) {
	r := result{callID: callID, obj: el, key: key, block: block, other: true, isError: o.isTrue("is_error")}
	r.val, _ = o.get(key)
	if r.val.ok() && b[r.val.s] == '"' {
		r.texts = []span{r.val}
	} else {
		collectTexts(b, r.val, &r, 0)
	}
	return r, readTexts(b, &r)
}

// synthID names a result that its shape does not tie to a call by id
// (Chat's role "function"): stable across the requests of a conversation,
// which resends its history in the same order.
func synthID(kind string, msgIndex int) string {
	return kind + ":" + strconv.Itoa(msgIndex)
}
