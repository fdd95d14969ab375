package modelwire

import "strings"

// contextText is the text of the conversation as the model reads it: the
// system prompt (Anthropic's system, Responses' instructions) and every
// string of the messages, tool inputs as their JSON, without ids,
// signatures, types and binary data. Tool definitions are left out: they
// are the same folded or not.
func contextText(c *conv) string {
	var sb strings.Builder
	b := c.body
	for _, key := range []string{"system", "instructions"} {
		if v, ok := c.top.get(key); ok {
			collect(b, v, &sb)
		}
	}
	if c.arr.ok() {
		collect(b, c.arr, &sb)
	}
	return sb.String()
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
