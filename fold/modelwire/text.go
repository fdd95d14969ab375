package modelwire

import "strings"

// contextPieces is the text of the conversation as the model reads it, in
// pieces: the system prompt (Anthropic's system, Responses' instructions)
// and each message, with every string of it, tool inputs as their JSON,
// and no ids, signatures, types or binary data. Tool definitions are left
// out: they are the same folded or not. The context's size is the sum of
// the pieces' tokens, so a memoizing counter recounts only new messages.
func contextPieces(c *conv) []string {
	var out []string
	b := c.body
	for _, key := range []string{"system", "instructions"} {
		if v, ok := c.top.get(key); ok {
			var sb strings.Builder
			collect(b, v, &sb)
			out = append(out, sb.String())
		}
	}
	for _, m := range c.msgs {
		var sb strings.Builder
		collect(b, m.sp, &sb)
		out = append(out, sb.String())
	}
	return out
}

// skipKeys are members whose strings the model does not read as text.
var skipKeys = map[string]bool{
	"type": true, "role": true, "id": true, "tool_use_id": true, "call_id": true,
	"tool_call_id": true, "signature": true, "encrypted_content": true, "data": true,
	"cache_control": true, "image_url": true, "url": true, "media_type": true,
	"status": true, "file_id": true, "detail": true,
}

func collect(b []byte, v span, sb *strings.Builder) {
	if !v.ok() {
		return
	}
	switch b[v.s] {
	case '"':
		s, err := unquote(b[v.s:v.e])
		if err == nil && s != "" {
			sb.WriteString(s)
			sb.WriteByte('\n')
		}
	case '[':
		els, err := elements(b, v)
		if err != nil {
			return
		}
		for _, el := range els {
			collect(b, el, sb)
		}
	case '{':
		ms, err := members(b, v)
		if err != nil {
			return
		}
		for _, m := range ms {
			switch {
			case skipKeys[m.key]:
			case m.key == "input" && b[m.val.s] == '{':
				sb.Write(b[m.val.s:m.val.e])
				sb.WriteByte('\n')
			default:
				collect(b, m.val, sb)
			}
		}
	}
}
