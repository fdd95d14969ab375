package modelfront

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/foldproxy/foldproxy/fold/modelwire"
)

// recallTool is the name of the recall tool the context manager adds to an
// agent that lacks foldproxy's own (modelwire's recalltool.go).
const recallTool = "branch_recall"

// recallCalls reads, from a model's answer as it is relayed, the calls the
// model makes of the added recall tool, and hands each to record as soon as
// it is whole, before the bytes that complete it go on to the agent: the
// agent's next request may come right after, and a client that rewrites a
// call of a tool it does not know (OpenCode) leaves only the call's id.
// It reads the three dialects' event streams (Anthropic's tool_use blocks
// and their input_json_delta, Chat's tool_calls deltas, the Responses
// API's response.output_item.done) and their JSON answers.
type recallCalls struct {
	record func([]modelwire.RecallCall)

	// Anthropic: the open tool_use blocks of the recall tool, by index.
	blocks map[int]*modelwire.RecallCall
	// Chat: the tool calls seen, by index, until the choice finishes.
	chat map[int]*chatCall
}

type chatCall struct {
	id, name string
	args     strings.Builder
}

func newRecallCalls(record func([]modelwire.RecallCall)) *recallCalls {
	return &recallCalls{record: record, blocks: map[int]*modelwire.RecallCall{}, chat: map[int]*chatCall{}}
}

// event reads one event's data.
func (rc *recallCalls) event(data []byte) {
	if len(rc.blocks) == 0 && len(rc.chat) == 0 && !bytes.Contains(data, []byte(recallTool)) {
		return
	}
	var ev struct {
		Type         string `json:"type"`
		Index        int    `json:"index"`
		ContentBlock *struct {
			Type, ID, Name string
		} `json:"content_block"`
		Delta *struct {
			Type        string `json:"type"`
			PartialJSON string `json:"partial_json"`
		} `json:"delta"`
		Item *struct {
			Type      string `json:"type"`
			CallID    string `json:"call_id"`
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"item"`
		Choices []struct {
			Delta *struct {
				ToolCalls []struct {
					Index    int    `json:"index"`
					ID       string `json:"id"`
					Function struct {
						Name, Arguments string
					} `json:"function"`
				} `json:"tool_calls"`
			} `json:"delta"`
			FinishReason *string `json:"finish_reason"`
		} `json:"choices"`
	}
	if json.Unmarshal(data, &ev) != nil {
		return
	}
	switch {
	case ev.Type == "content_block_start" && ev.ContentBlock != nil:
		if ev.ContentBlock.Type == "tool_use" && ev.ContentBlock.Name == recallTool {
			rc.blocks[ev.Index] = &modelwire.RecallCall{ID: ev.ContentBlock.ID}
		}
	case ev.Type == "content_block_delta" && ev.Delta != nil:
		if b := rc.blocks[ev.Index]; b != nil && ev.Delta.Type == "input_json_delta" {
			b.Input += ev.Delta.PartialJSON
		}
	case ev.Type == "content_block_stop":
		if b := rc.blocks[ev.Index]; b != nil {
			delete(rc.blocks, ev.Index)
			if b.Input == "" {
				b.Input = "{}"
			}
			rc.record([]modelwire.RecallCall{*b})
		}
	case ev.Type == "response.output_item.done" && ev.Item != nil:
		if ev.Item.Type == "function_call" && ev.Item.Name == recallTool {
			rc.record([]modelwire.RecallCall{{ID: ev.Item.CallID, Input: ev.Item.Arguments}})
		}
	case len(ev.Choices) > 0:
		for _, ch := range ev.Choices {
			if ch.Delta != nil {
				for _, tc := range ch.Delta.ToolCalls {
					c := rc.chat[tc.Index]
					if c == nil {
						c = &chatCall{}
						rc.chat[tc.Index] = c
					}
					if tc.ID != "" {
						c.id = tc.ID
					}
					if tc.Function.Name != "" {
						c.name = tc.Function.Name
					}
					c.args.WriteString(tc.Function.Arguments)
				}
			}
			if ch.FinishReason != nil {
				rc.flushChat()
			}
		}
	}
}

// flushChat records the Chat tool calls of the recall tool seen so far.
func (rc *recallCalls) flushChat() {
	var out []modelwire.RecallCall
	for _, c := range rc.chat {
		if c.name == recallTool && c.id != "" {
			out = append(out, modelwire.RecallCall{ID: c.id, Input: c.args.String()})
		}
	}
	rc.chat = map[int]*chatCall{}
	if len(out) > 0 {
		rc.record(out)
	}
}

// answer reads a whole JSON answer.
func (rc *recallCalls) answer(body []byte) {
	if !bytes.Contains(body, []byte(recallTool)) {
		return
	}
	var a struct {
		Content []struct {
			Type, ID, Name string
			Input          json.RawMessage
		} `json:"content"`
		Output []struct {
			Type      string `json:"type"`
			CallID    string `json:"call_id"`
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"output"`
		Choices []struct {
			Message struct {
				ToolCalls []struct {
					ID       string `json:"id"`
					Function struct{ Name, Arguments string }
				} `json:"tool_calls"`
			} `json:"message"`
		} `json:"choices"`
	}
	if json.Unmarshal(body, &a) != nil {
		return
	}
	var out []modelwire.RecallCall
	for _, c := range a.Content {
		if c.Type == "tool_use" && c.Name == recallTool {
			out = append(out, modelwire.RecallCall{ID: c.ID, Input: string(c.Input)})
		}
	}
	for _, o := range a.Output {
		if o.Type == "function_call" && o.Name == recallTool {
			out = append(out, modelwire.RecallCall{ID: o.CallID, Input: o.Arguments})
		}
	}
	for _, ch := range a.Choices {
		for _, tc := range ch.Message.ToolCalls {
			if tc.Function.Name == recallTool {
				out = append(out, modelwire.RecallCall{ID: tc.ID, Input: tc.Function.Arguments})
			}
		}
	}
	if len(out) > 0 {
		rc.record(out)
	}
}

// end flushes what an event stream left open.
func (rc *recallCalls) end() { rc.flushChat() }
