package main

import (
	"encoding/json"
	"fmt"
	"strings"
)

// validate applies the Messages API's own checks on a request's structure,
// the ones a context manager rewriting the conversation could break: roles,
// non-empty content, tool_use/tool_result pairing, unique tool_use ids, at
// most four cache_control breakpoints. The real API answers such a request
// with 400 invalid_request_error, and so does this server. needMaxTokens is
// false for count_tokens.
func validate(body []byte, needMaxTokens bool) error {
	var req struct {
		Model     *string           `json:"model"`
		MaxTokens *float64          `json:"max_tokens"`
		Messages  []json.RawMessage `json:"messages"`
		System    json.RawMessage   `json:"system"`
		Tools     json.RawMessage   `json:"tools"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return fmt.Errorf("the body is not a JSON object: %v", err)
	}
	if req.Model == nil || *req.Model == "" {
		return fmt.Errorf("model: field required")
	}
	if needMaxTokens && (req.MaxTokens == nil || *req.MaxTokens < 1) {
		return fmt.Errorf("max_tokens: field required (a positive integer)")
	}
	if len(req.Messages) == 0 {
		return errNoMessages
	}
	msgs := make([]reqMessage, len(req.Messages))
	blocks := make([][]reqBlock, len(req.Messages))
	for i, raw := range req.Messages {
		if err := json.Unmarshal(raw, &msgs[i]); err != nil {
			return fmt.Errorf("messages.%d: %v", i, err)
		}
		m := msgs[i]
		switch m.Role {
		case "user", "assistant", "system":
		default:
			return fmt.Errorf("messages.%d.role: %q: want user, assistant or system", i, m.Role)
		}
		last := i == len(req.Messages)-1
		var s string
		if err := json.Unmarshal(m.Content, &s); err == nil {
			if strings.TrimSpace(s) == "" && !(last && m.Role == "assistant") {
				return fmt.Errorf("messages.%d: all messages must have non-empty content except for the optional final assistant message", i)
			}
			continue
		}
		if err := json.Unmarshal(m.Content, &blocks[i]); err != nil {
			return fmt.Errorf("messages.%d.content: want a string or a list of blocks: %v", i, err)
		}
		if len(blocks[i]) == 0 && !(last && m.Role == "assistant") {
			return fmt.Errorf("messages.%d: all messages must have non-empty content except for the optional final assistant message", i)
		}
		for j, b := range blocks[i] {
			if b.Type == "text" && strings.TrimSpace(b.Text) == "" {
				return fmt.Errorf("messages.%d.content.%d: text content blocks must contain non-whitespace text", i, j)
			}
		}
	}
	if err := checkToolPairs(msgs, blocks); err != nil {
		return err
	}
	n := countCacheControl(req.System) + countCacheControl(req.Tools)
	for _, raw := range req.Messages {
		var m struct {
			Content json.RawMessage `json:"content"`
		}
		if json.Unmarshal(raw, &m) == nil {
			n += countCacheControl(m.Content)
		}
	}
	if n > 4 {
		return fmt.Errorf("a maximum of 4 blocks with cache_control may be provided. Found %d", n)
	}
	return nil
}

// reqMessage is a message of a request, as validate reads it.
type reqMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// reqBlock is a content block of a message, as validate reads it.
type reqBlock struct {
	Type      string `json:"type"`
	Text      string `json:"text"`
	ID        string `json:"id"`
	ToolUseID string `json:"tool_use_id"`
}

// checkToolPairs checks, as the API does, that tool_use blocks are the
// assistant's, with unique ids, each answered by a tool_result in the next
// message, and that every tool_result answers a tool_use of the previous
// one.
func checkToolPairs(msgs []reqMessage, blocks [][]reqBlock) error {
	seen := map[string]bool{}
	for i := range msgs {
		var uses []string
		for _, b := range blocks[i] {
			if b.Type == "tool_use" || b.Type == "server_tool_use" {
				if msgs[i].Role != "assistant" {
					return fmt.Errorf("messages.%d: tool_use blocks may only appear in assistant messages", i)
				}
				if seen[b.ID] {
					return fmt.Errorf("messages.%d: tool_use ids must be unique: %s", i, b.ID)
				}
				seen[b.ID] = true
				if b.Type == "tool_use" {
					uses = append(uses, b.ID)
				}
			}
		}
		answered := map[string]bool{}
		if i+1 < len(msgs) {
			for _, b := range blocks[i+1] {
				if b.Type == "tool_result" {
					answered[b.ToolUseID] = true
				}
			}
		}
		var missing []string
		for _, id := range uses {
			if !answered[id] {
				missing = append(missing, id)
			}
		}
		if len(missing) > 0 && i+1 < len(msgs) {
			return fmt.Errorf("messages.%d: `tool_use` ids were found without `tool_result` blocks immediately after: %s. Each `tool_use` block must have a corresponding `tool_result` block in the next message", i, strings.Join(missing, ", "))
		}
		if i > 0 || len(blocks[i]) > 0 {
			prev := map[string]bool{}
			if i > 0 {
				for _, b := range blocks[i-1] {
					if b.Type == "tool_use" && msgs[i-1].Role == "assistant" {
						prev[b.ID] = true
					}
				}
			}
			for _, b := range blocks[i] {
				if b.Type == "tool_result" && (msgs[i].Role != "user" || !prev[b.ToolUseID]) {
					return fmt.Errorf("messages.%d: unexpected `tool_use_id` found in `tool_result` blocks: %s. Each `tool_result` block must have a corresponding `tool_use` block in the previous message", i, b.ToolUseID)
				}
			}
		}
	}
	return nil
}

// countCacheControl counts the cache_control keys of a list of blocks (or
// tools), nested tool_result content included, and not the string
// "cache_control" inside some text.
func countCacheControl(raw json.RawMessage) int {
	var list []map[string]json.RawMessage
	if json.Unmarshal(raw, &list) != nil {
		return 0
	}
	n := 0
	var walk func([]map[string]json.RawMessage)
	walk = func(bs []map[string]json.RawMessage) {
		for _, b := range bs {
			if cc, ok := b["cache_control"]; ok && string(cc) != "null" {
				n++
			}
			var inner []map[string]json.RawMessage
			if c, ok := b["content"]; ok && json.Unmarshal(c, &inner) == nil {
				walk(inner)
			}
		}
	}
	walk(list)
	return n
}
