package modelwire

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// ConversationKey finds what ties a request to its conversation in the
// request body, for a client that sends no session header: OpenAI's
// prompt_cache_key (Codex sets it to its conversation id), the session of
// Anthropic's metadata.user_id (Claude Code's "..._session_<uuid>"), or
// else a digest of the conversation's start (the system prompt and the
// first message), which every request of one conversation repeats. It is
// "" for a body that is not a request object.
func ConversationKey(d Dialect, body []byte) string {
	top, err := parseObj(body, span{0, len(body)})
	if err != nil {
		return ""
	}
	if k := top.str("prompt_cache_key"); k != "" {
		return "prompt_cache_key:" + k
	}
	if mv, ok := top.get("metadata"); ok && body[mv.s] == '{' {
		if mo, err := parseObj(body, mv); err == nil {
			if u := mo.str("user_id"); u != "" {
				if i := strings.LastIndex(u, "session_"); i >= 0 {
					return "session:" + u[i+len("session_"):]
				}
			}
		}
	}
	h := sha256.New()
	h.Write([]byte(d))
	for _, key := range []string{"system", "instructions"} {
		if v, ok := top.get(key); ok {
			h.Write(body[v.s:min(v.e, v.s+4096)])
		}
	}
	key := "messages"
	if d == OpenAIResponses {
		key = "input"
	}
	if arr, ok := top.get(key); ok && body[arr.s] == '[' {
		if els, err := elements(body, arr); err == nil && len(els) > 0 {
			// The first message that is not a system one (Chat puts the
			// system prompt first).
			for _, el := range els {
				if body[el.s] == '{' {
					if o, err := parseObj(body, el); err == nil && (o.str("role") == "system" || o.str("role") == "developer") {
						h.Write(body[el.s:min(el.e, el.s+4096)])
						continue
					}
				}
				h.Write(body[el.s:min(el.e, el.s+4096)])
				break
			}
		}
	}
	return "start:" + hex.EncodeToString(h.Sum(nil)[:12])
}
