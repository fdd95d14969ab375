package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
)

// Script is what the model answers.
type Script struct {
	// Model is the model name put in answers; "" echoes the request's.
	Model string `json:"model,omitempty"`
	// Turns are tried from last to first; the first that matches is played.
	Turns []Turn `json:"turns"`
	// Fallback answers a request that no turn matches. Default: one text
	// block "OK".
	Fallback []Block `json:"fallback,omitempty"`
}

// Turn is one scripted assistant answer.
type Turn struct {
	// Name identifies the turn in the record file.
	Name string `json:"name"`
	// Match lists substrings that must all occur among the strings of the
	// request's last user or assistant message (its text, tool_use ids, tool
	// results). A turn with no Match never matches.
	Match []string `json:"match"`
	// Content is the answer's content blocks.
	Content []Block `json:"content"`
	// Capture, when set, is a regular expression with one group, searched
	// in the whole request body: a turn whose Capture does not match does
	// not match, and "$CAPTURE" in its blocks' text and input is replaced
	// by what the group matched (a handle the model read in a stub, say).
	Capture string `json:"capture,omitempty"`
	capture *regexp.Regexp
}

// Block is one content block of an answer: text, or a tool_use call.
type Block struct {
	Type  string          `json:"type"` // "text" or "tool_use"
	Text  string          `json:"text,omitempty"`
	ID    string          `json:"id,omitempty"`
	Name  string          `json:"name,omitempty"`
	Input json.RawMessage `json:"input,omitempty"`
}

// LoadScript reads and checks a script file.
func LoadScript(path string) (*Script, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var sc Script
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&sc); err != nil {
		return nil, fmt.Errorf("script %s: %w", path, err)
	}
	if err := sc.check(); err != nil {
		return nil, fmt.Errorf("script %s: %w", path, err)
	}
	return &sc, nil
}

func (sc *Script) check() error {
	for i, t := range sc.Turns {
		if len(t.Content) == 0 {
			return fmt.Errorf("turns[%d] (%q): no content", i, t.Name)
		}
		if t.Capture != "" {
			re, err := regexp.Compile(t.Capture)
			if err != nil || re.NumSubexp() != 1 {
				return fmt.Errorf("turns[%d] (%q): capture %q must be a regular expression with one group (%v)", i, t.Name, t.Capture, err)
			}
			sc.Turns[i].capture = re
		}
		// Ids are unique within a turn; two turns may be alternatives of
		// the same step (matched differently) and share them.
		if err := checkBlocks(t.Content, map[string]bool{}); err != nil {
			return fmt.Errorf("turns[%d] (%q): %w", i, t.Name, err)
		}
	}
	if err := checkBlocks(sc.Fallback, map[string]bool{}); err != nil {
		return fmt.Errorf("fallback: %w", err)
	}
	return nil
}

func checkBlocks(bs []Block, ids map[string]bool) error {
	for j, b := range bs {
		switch b.Type {
		case "text":
			if b.Text == "" {
				return fmt.Errorf("content[%d]: a text block needs text", j)
			}
		case "tool_use":
			if b.ID == "" || b.Name == "" {
				return fmt.Errorf("content[%d]: a tool_use block needs id and name", j)
			}
			if ids[b.ID] {
				return fmt.Errorf("content[%d]: tool_use id %q is used twice", j, b.ID)
			}
			ids[b.ID] = true
			if len(b.Input) == 0 {
				return fmt.Errorf("content[%d]: a tool_use block needs input (an object)", j)
			}
			var obj map[string]any
			if err := json.Unmarshal(b.Input, &obj); err != nil || obj == nil {
				return fmt.Errorf("content[%d]: input must be a JSON object", j)
			}
		default:
			return fmt.Errorf("content[%d]: type %q: want text or tool_use", j, b.Type)
		}
	}
	return nil
}

// request is the part of a Messages request the server reads.
type request struct {
	Model    string            `json:"model"`
	Stream   bool              `json:"stream"`
	Messages []json.RawMessage `json:"messages"`
	Tools    []struct {
		Name string `json:"name"`
	} `json:"tools"`
}

// pick returns the turn to play for req: the last turn whose Match strings
// all occur in the last user or assistant message (Claude Code puts
// role "system" messages after the user's) and whose tool calls name tools the request
// offers. A model cannot call a tool it was not given, so a side request
// (a title, a quota probe) that repeats the prompt without the tools gets
// the fallback rather than a tool call.
func (sc *Script) pick(req *request, body []byte) (string, []Block) {
	text := ""
	if last := lastTurnMessage(req.Messages); last != nil {
		text = strings.Join(stringsOf(last), "\n")
	}
	offered := map[string]bool{}
	for _, t := range req.Tools {
		offered[t.Name] = true
	}
	return sc.pickFor(text, offered, body)
}

// pickFor returns the turn to play for a request (body) whose last message
// holds text and which offers the tools named in offered: the last turn
// whose Match strings all occur in text, whose calls name offered tools and
// whose Capture, if any, matches the body, else the fallback.
func (sc *Script) pickFor(text string, offered map[string]bool, body []byte) (string, []Block) {
	if text != "" {
		for i := len(sc.Turns) - 1; i >= 0; i-- {
			t := sc.Turns[i]
			if !matches(text, t.Match) || !callsOffered(t.Content, offered) {
				continue
			}
			if t.capture == nil {
				return t.Name, t.Content
			}
			m := t.capture.FindSubmatch(body)
			if m == nil {
				continue
			}
			return t.Name, withCapture(t.Content, string(m[1]))
		}
	}
	if len(sc.Fallback) > 0 {
		return "fallback", sc.Fallback
	}
	return "fallback", []Block{{Type: "text", Text: "OK"}}
}

// lastTurnMessage is the last message whose role is not "system".
func lastTurnMessage(msgs []json.RawMessage) json.RawMessage {
	for i := len(msgs) - 1; i >= 0; i-- {
		var m struct {
			Role string `json:"role"`
		}
		if json.Unmarshal(msgs[i], &m) == nil && m.Role != "system" {
			return msgs[i]
		}
	}
	return nil
}

func matches(text string, want []string) bool {
	if len(want) == 0 {
		return false
	}
	for _, w := range want {
		if !strings.Contains(text, w) {
			return false
		}
	}
	return true
}

func callsOffered(bs []Block, offered map[string]bool) bool {
	for _, b := range bs {
		if b.Type == "tool_use" && !offered[b.Name] {
			return false
		}
	}
	return true
}

// stringsOf returns every string value in a JSON document, in order.
func stringsOf(raw json.RawMessage) []string {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil
	}
	var out []string
	var walk func(any)
	walk = func(v any) {
		switch x := v.(type) {
		case string:
			out = append(out, x)
		case []any:
			for _, e := range x {
				walk(e)
			}
		case map[string]any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	walk(v)
	return out
}

// errNoMessages is the answer to a request without messages.
var errNoMessages = errors.New("messages: at least one message is required")

// withCapture replaces "$CAPTURE" in the blocks' text and input.
func withCapture(bs []Block, c string) []Block {
	q, _ := json.Marshal(c)
	esc := string(q[1 : len(q)-1]) // as it goes inside a JSON string
	out := make([]Block, len(bs))
	for i, b := range bs {
		b.Text = strings.ReplaceAll(b.Text, "$CAPTURE", c)
		if len(b.Input) > 0 {
			b.Input = json.RawMessage(strings.ReplaceAll(string(b.Input), "$CAPTURE", esc))
		}
		out[i] = b
	}
	return out
}
