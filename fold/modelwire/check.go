package modelwire

import (
	"bytes"
	"fmt"

	"github.com/foldproxy/foldproxy/policy/jsonscan"
)

// Check reports whether body is a structurally valid request of dialect d
// as far as folding is concerned: every tool result answers a call of the
// turn right before it and every call of a turn that is followed by more
// conversation is answered; user and assistant alternate (Anthropic; system
// messages in the middle are allowed after a user message only, never
// between a call and its result); no message is empty; and there are no
// more than four cache_control breakpoints (Anthropic). It is what the
// fold's tests hold every output to; proxies may use it to vet a request.
func Check(d Dialect, body []byte) error {
	if !jsonscan.Valid(body) {
		return fmt.Errorf("not valid JSON")
	}
	c, err := parseConv(d, body)
	if err != nil {
		return err
	}
	if d == Anthropic {
		if n := bytes.Count(body, []byte(`"cache_control"`)); n > 4 {
			return fmt.Errorf("%d cache_control breakpoints (at most 4)", n)
		}
	}
	seen := map[string]bool{}
	for i := range c.msgs {
		m := &c.msgs[i]
		if err := checkNonEmpty(c, m); err != nil {
			return fmt.Errorf("message %d: %w", i, err)
		}
		for _, cl := range m.calls {
			if cl.id == "" {
				return fmt.Errorf("message %d: a tool call without an id", i)
			}
			if seen[cl.id] {
				return fmt.Errorf("message %d: tool call id %q used twice", i, cl.id)
			}
			seen[cl.id] = true
		}
	}
	switch d {
	case Anthropic:
		return checkAnthropic(c)
	default:
		return checkOpenAI(c)
	}
}

func checkNonEmpty(c *conv, m *msg) error {
	if c.d == Anthropic && m.role != "" {
		if !m.content.ok() {
			return fmt.Errorf("no content")
		}
		switch c.body[m.content.s] {
		case '"':
			if s, _ := unquote(c.body[m.content.s:m.content.e]); s == "" {
				return fmt.Errorf("empty content")
			}
		case '[':
			if len(m.blocks) == 0 {
				return fmt.Errorf("empty content")
			}
		}
	}
	if c.d == OpenAIChat && m.role == "assistant" && len(m.calls) == 0 && !m.legacyCall {
		if !m.content.ok() || string(c.body[m.content.s:m.content.e]) == "null" || string(c.body[m.content.s:m.content.e]) == `""` {
			return fmt.Errorf("assistant message without content or tool calls")
		}
	}
	for _, r := range m.results {
		if r.callID == "" {
			return fmt.Errorf("a tool result without a call id")
		}
	}
	return nil
}

func checkAnthropic(c *conv) error {
	prev := "" // role of the previous user/assistant message
	prevIdx := -1
	for i := range c.msgs {
		m := &c.msgs[i]
		switch m.role {
		case "system":
			if prev != "user" {
				return fmt.Errorf("message %d: a system message must follow a user message", i)
			}
			continue
		case "user", "assistant":
		default:
			return fmt.Errorf("message %d: unknown role %q", i, m.role)
		}
		if prev == "" && m.role != "user" {
			return fmt.Errorf("message %d: the first message must be a user message", i)
		}
		if m.role == prev {
			return fmt.Errorf("message %d: two %s messages in a row", i, m.role)
		}
		if m.role == "user" {
			want := map[string]bool{}
			if prevIdx >= 0 {
				if prevIdx != i-1 && len(c.msgs[prevIdx].calls) > 0 {
					return fmt.Errorf("message %d: a system message sits between tool calls and their results", i-1)
				}
				for _, cl := range c.msgs[prevIdx].calls {
					want[cl.id] = true
				}
			}
			sawOther := false
			for _, blk := range m.blocks {
				if blk.result < 0 {
					sawOther = true
					continue
				}
				r := m.results[blk.result]
				if !want[r.callID] {
					return fmt.Errorf("message %d: tool_result %q answers no tool_use of the previous message", i, r.callID)
				}
				if sawOther {
					return fmt.Errorf("message %d: tool_result %q comes after other content", i, r.callID)
				}
				delete(want, r.callID)
			}
			for id := range want {
				return fmt.Errorf("message %d: tool_use %q has no tool_result", i, id)
			}
		}
		prev, prevIdx = m.role, i
	}
	return nil
}

func checkOpenAI(c *conv) error {
	var pending map[string]bool // calls of the last assistant turn awaiting results
	for i := range c.msgs {
		m := &c.msgs[i]
		switch {
		case m.role == roleItem:
			// An unknown item: no part of the call/result structure.
		case m.role == "tool":
			for _, r := range m.results {
				if !pending[r.callID] {
					return fmt.Errorf("message %d: tool result %q answers no call of the turn before it", i, r.callID)
				}
				delete(pending, r.callID)
			}
		case m.role == "assistant" && c.d == OpenAIResponses && len(m.calls) > 0 && i > 0 && c.msgs[i-1].role == "assistant":
			for _, cl := range m.calls {
				pending[cl.id] = true
			}
		default:
			for id := range pending {
				return fmt.Errorf("message %d: tool call %q has no result before it", i, id)
			}
			pending = map[string]bool{}
			for _, cl := range m.calls {
				pending[cl.id] = true
			}
		}
	}
	return nil
}
