package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// The OpenAI side: Chat Completions (POST /v1/chat/completions) and the
// Responses API (POST /v1/responses), streamed and not, playing the same
// script as the Messages API: a tool_use block becomes a function call.
// GET /v1/models lists the script's model, as clients probe it.

// openaiRequest is the part of a Chat Completions or Responses request the
// server reads.
type openaiRequest struct {
	Model         string            `json:"model"`
	Stream        bool              `json:"stream"`
	Messages      []json.RawMessage `json:"messages"` // chat
	Input         json.RawMessage   `json:"input"`    // responses: a string or items
	Tools         []json.RawMessage `json:"tools"`
	StreamOptions struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

// offeredTools lists the tools a request offers, in either API's shape
// ({"name"} or {"function":{"name"}}), each with the namespace that holds
// it: the Responses API's "namespace" tools (Codex puts each MCP server's
// tools in one) are offered as <namespace>__<tool>, the name the client
// knows them by, and called as {"namespace", "name"}.
func (r *openaiRequest) offeredTools() map[string]string {
	offered := map[string]string{}
	for _, raw := range r.Tools {
		var t struct {
			Type     string `json:"type"`
			Name     string `json:"name"`
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
			Tools []struct {
				Name string `json:"name"`
			} `json:"tools"`
		}
		if json.Unmarshal(raw, &t) != nil {
			continue
		}
		if t.Type == "namespace" {
			for _, n := range t.Tools {
				offered[t.Name+"__"+n.Name] = t.Name
			}
			continue
		}
		for _, n := range []string{t.Name, t.Function.Name} {
			if n != "" {
				offered[n] = ""
			}
		}
	}
	return offered
}

// lastTurnText is the strings of the last chat message or Responses item
// that is not a system or developer message.
func lastTurnText(items []json.RawMessage) string {
	for i := len(items) - 1; i >= 0; i-- {
		var m struct {
			Role string `json:"role"`
		}
		if json.Unmarshal(items[i], &m) == nil && m.Role != "system" && m.Role != "developer" {
			return strings.Join(stringsOf(items[i]), "\n")
		}
	}
	return ""
}

// validateChat applies Chat Completions' pairing rules: every tool call of
// an assistant message is answered by a tool message before the next
// message of another role, and every tool message answers such a call.
func validateChat(msgs []json.RawMessage) error {
	if len(msgs) == 0 {
		return fmt.Errorf("messages: at least one message is required")
	}
	pending := map[string]bool{}
	for i, raw := range msgs {
		var m struct {
			Role       string `json:"role"`
			ToolCallID string `json:"tool_call_id"`
			ToolCalls  []struct {
				ID string `json:"id"`
			} `json:"tool_calls"`
		}
		if err := json.Unmarshal(raw, &m); err != nil {
			return fmt.Errorf("messages[%d]: %v", i, err)
		}
		if m.Role == "tool" {
			if !pending[m.ToolCallID] {
				return fmt.Errorf("messages[%d]: a message with role 'tool' must be a response to a preceeding message with 'tool_calls' (tool_call_id %q)", i, m.ToolCallID)
			}
			delete(pending, m.ToolCallID)
			continue
		}
		if len(pending) > 0 {
			return fmt.Errorf("messages[%d]: an assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id' (%d unanswered)", i, len(pending))
		}
		switch m.Role {
		case "system", "developer", "user", "assistant":
		default:
			return fmt.Errorf("messages[%d].role: %q is not a valid role", i, m.Role)
		}
		for _, c := range m.ToolCalls {
			pending[c.ID] = true
		}
	}
	return nil
}

// validateResponses applies the Responses API's pairing rules to input
// items: a function call's output answers a call made before it, and a
// call made before the last item has its output.
func validateResponses(items []json.RawMessage) error {
	calls, outputs := map[string]bool{}, map[string]bool{}
	for i, raw := range items {
		var it struct {
			Type   string `json:"type"`
			CallID string `json:"call_id"`
		}
		if err := json.Unmarshal(raw, &it); err != nil {
			return fmt.Errorf("input[%d]: %v", i, err)
		}
		switch it.Type {
		case "function_call", "custom_tool_call":
			calls[it.CallID] = true
		case "function_call_output", "custom_tool_call_output":
			if !calls[it.CallID] {
				return fmt.Errorf("input[%d]: No tool call found for function call output with call_id %s.", i, it.CallID)
			}
			outputs[it.CallID] = true
		}
	}
	for id := range calls {
		if !outputs[id] {
			return fmt.Errorf("No tool output found for function call %s.", id)
		}
	}
	return nil
}

// openaiError writes an error in the OpenAI APIs' shape.
func openaiError(w http.ResponseWriter, status int, typ, msg string) {
	writeJSON(w, status, map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": nil}})
}

// openai serves a Chat Completions or Responses request.
func (s *Server) openai(w http.ResponseWriter, r *http.Request, seq int64, body []byte, responses bool) {
	var req openaiRequest
	if err := json.Unmarshal(body, &req); err != nil {
		s.record(seq, r, body, "", "the body is not a JSON object: "+err.Error())
		openaiError(w, http.StatusBadRequest, "invalid_request_error", "We could not parse the JSON body of your request.")
		return
	}
	var items []json.RawMessage
	var verr error
	switch {
	case !responses:
		items = req.Messages
		verr = validateChat(items)
	case len(req.Input) > 0 && req.Input[0] == '"':
		items = []json.RawMessage{req.Input}
	default:
		if err := json.Unmarshal(req.Input, &items); err != nil || len(items) == 0 {
			verr = fmt.Errorf("input: want a string or a non-empty array of items")
		} else {
			verr = validateResponses(items)
		}
	}
	if req.Model == "" && verr == nil {
		verr = fmt.Errorf("model: you must provide a model parameter")
	}
	if verr != nil {
		s.record(seq, r, body, "", verr.Error())
		s.log.Warn("model: invalid request", "seq", seq, "err", verr)
		openaiError(w, http.StatusBadRequest, "invalid_request_error", verr.Error())
		return
	}
	text := lastTurnText(items)
	if len(items) == 1 && items[0][0] == '"' {
		_ = json.Unmarshal(items[0], &text)
	}
	offered := req.offeredTools()
	names := map[string]bool{}
	for n := range offered {
		names[n] = true
	}
	turn, blocks := s.sc.pickFor(text, names, body)
	s.record(seq, r, body, turn, "")
	s.log.Info("model: request", "seq", seq, "api", r.URL.Path, "turn", turn, "stream", req.Stream, "bytes", len(body), "items", len(items))
	model := s.sc.Model
	if model == "" {
		model = req.Model
	}
	in, out := estimateTokens(body), 0
	for _, b := range blocks {
		out += (len(b.Text) + len(b.Input) + 3) / 4
	}
	if responses {
		s.responses(w, seq, model, blocks, offered, req.Stream, in, out)
	} else {
		s.chat(w, seq, model, blocks, req.Stream, req.StreamOptions.IncludeUsage, in, out)
	}
}

// compactInput is a tool_use block's input as one line of JSON.
func compactInput(b Block) string {
	var c bytes.Buffer
	_ = json.Compact(&c, b.Input) // checked by LoadScript
	return c.String()
}

func (s *Server) chat(w http.ResponseWriter, seq int64, model string, blocks []Block, stream, includeUsage bool, in, out int) {
	id := fmt.Sprintf("chatcmpl-model%06d", seq)
	created := time.Now().Unix()
	text, finish := "", "stop"
	var calls []map[string]any
	for _, b := range blocks {
		switch b.Type {
		case "text":
			text += b.Text
		case "tool_use":
			finish = "tool_calls"
			calls = append(calls, map[string]any{"id": b.ID, "type": "function",
				"function": map[string]any{"name": b.Name, "arguments": compactInput(b)}})
		}
	}
	usage := map[string]any{"prompt_tokens": in, "completion_tokens": out, "total_tokens": in + out,
		"prompt_tokens_details": map[string]int{"cached_tokens": 0}}
	if !stream {
		msg := map[string]any{"role": "assistant", "content": nil}
		if text != "" {
			msg["content"] = text
		}
		if len(calls) > 0 {
			msg["tool_calls"] = calls
		}
		writeJSON(w, http.StatusOK, map[string]any{"id": id, "object": "chat.completion", "created": created, "model": model,
			"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish}}, "usage": usage})
		return
	}
	ev := startEvents(w)
	chunk := func(delta map[string]any, finishReason any) {
		ev.data(map[string]any{"id": id, "object": "chat.completion.chunk", "created": created, "model": model,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finishReason}}})
	}
	chunk(map[string]any{"role": "assistant", "content": ""}, nil)
	for _, piece := range pieces(text, s.chunk) {
		chunk(map[string]any{"content": piece}, nil)
	}
	for i, c := range calls {
		fn := c["function"].(map[string]any)
		chunk(map[string]any{"tool_calls": []any{map[string]any{"index": i, "id": c["id"], "type": "function",
			"function": map[string]any{"name": fn["name"], "arguments": ""}}}}, nil)
		for _, piece := range pieces(fn["arguments"].(string), s.chunk) {
			chunk(map[string]any{"tool_calls": []any{map[string]any{"index": i, "function": map[string]any{"arguments": piece}}}}, nil)
		}
	}
	chunk(map[string]any{}, finish)
	if includeUsage {
		ev.data(map[string]any{"id": id, "object": "chat.completion.chunk", "created": created, "model": model, "choices": []any{}, "usage": usage})
	}
	ev.raw("data: [DONE]\n\n")
	if ev.err != nil {
		s.log.Warn("model: writing the stream", "seq", seq, "err", ev.err)
	}
}

func (s *Server) responses(w http.ResponseWriter, seq int64, model string, blocks []Block, offered map[string]string, stream bool, in, out int) {
	id := fmt.Sprintf("resp_model%06d", seq)
	created := time.Now().Unix()
	var output []map[string]any
	for i, b := range blocks {
		switch b.Type {
		case "text":
			output = append(output, map[string]any{"type": "message", "id": fmt.Sprintf("msg_model%06d_%d", seq, i), "status": "completed",
				"role": "assistant", "content": []any{map[string]any{"type": "output_text", "text": b.Text, "annotations": []any{}}}})
		case "tool_use":
			call := map[string]any{"type": "function_call", "id": fmt.Sprintf("fc_model%06d_%d", seq, i), "status": "completed",
				"call_id": b.ID, "name": b.Name, "arguments": compactInput(b)}
			if ns := offered[b.Name]; ns != "" {
				call["namespace"], call["name"] = ns, strings.TrimPrefix(b.Name, ns+"__")
			}
			output = append(output, call)
		}
	}
	usage := map[string]any{"input_tokens": in, "input_tokens_details": map[string]int{"cached_tokens": 0},
		"output_tokens": out, "output_tokens_details": map[string]int{"reasoning_tokens": 0}, "total_tokens": in + out}
	response := func(status string, out []map[string]any, u any) map[string]any {
		if out == nil {
			out = []map[string]any{}
		}
		return map[string]any{"id": id, "object": "response", "created_at": created, "status": status, "model": model,
			"output": out, "usage": u, "error": nil, "incomplete_details": nil}
	}
	if !stream {
		writeJSON(w, http.StatusOK, response("completed", output, usage))
		return
	}
	ev := startEvents(w)
	n := 0
	send := func(typ string, fields map[string]any) {
		fields["type"] = typ
		fields["sequence_number"] = n
		n++
		ev.send(typ, fields)
	}
	send("response.created", map[string]any{"response": response("in_progress", nil, nil)})
	send("response.in_progress", map[string]any{"response": response("in_progress", nil, nil)})
	for i, item := range output {
		itemID := item["id"]
		switch item["type"] {
		case "message":
			text := blocks[i].Text
			send("response.output_item.added", map[string]any{"output_index": i, "item": map[string]any{"type": "message", "id": itemID,
				"status": "in_progress", "role": "assistant", "content": []any{}}})
			send("response.content_part.added", map[string]any{"item_id": itemID, "output_index": i, "content_index": 0,
				"part": map[string]any{"type": "output_text", "text": "", "annotations": []any{}}})
			for _, piece := range pieces(text, s.chunk) {
				send("response.output_text.delta", map[string]any{"item_id": itemID, "output_index": i, "content_index": 0, "delta": piece, "logprobs": []any{}})
			}
			send("response.output_text.done", map[string]any{"item_id": itemID, "output_index": i, "content_index": 0, "text": text, "logprobs": []any{}})
			send("response.content_part.done", map[string]any{"item_id": itemID, "output_index": i, "content_index": 0,
				"part": map[string]any{"type": "output_text", "text": text, "annotations": []any{}}})
		case "function_call":
			args := item["arguments"].(string)
			added := map[string]any{"type": "function_call", "id": itemID, "status": "in_progress", "call_id": item["call_id"], "name": item["name"], "arguments": ""}
			if ns, ok := item["namespace"]; ok {
				added["namespace"] = ns
			}
			send("response.output_item.added", map[string]any{"output_index": i, "item": added})
			for _, piece := range pieces(args, s.chunk) {
				send("response.function_call_arguments.delta", map[string]any{"item_id": itemID, "output_index": i, "delta": piece})
			}
			send("response.function_call_arguments.done", map[string]any{"item_id": itemID, "output_index": i, "arguments": args})
		}
		send("response.output_item.done", map[string]any{"output_index": i, "item": item})
	}
	send("response.completed", map[string]any{"response": response("completed", output, usage)})
	if ev.err != nil {
		s.log.Warn("model: writing the stream", "seq", seq, "err", ev.err)
	}
}

// startEvents starts an event stream.
func startEvents(w http.ResponseWriter) *events {
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	return &events{w: w, rc: http.NewResponseController(w)}
}

// data writes one event of data only (Chat Completions' stream).
func (e *events) data(v any) {
	if e.err != nil {
		return
	}
	b, err := json.Marshal(v)
	if err != nil {
		e.err = err
		return
	}
	e.raw("data: " + string(b) + "\n\n")
}

// raw writes s as it is and flushes it.
func (e *events) raw(s string) {
	if e.err != nil {
		return
	}
	if _, err := fmt.Fprint(e.w, s); err != nil {
		e.err = err
		return
	}
	e.err = e.rc.Flush()
}
