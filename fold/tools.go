package fold

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/foldproxy/foldproxy/policy"
)

// The fold tools' names.
const (
	ToolCreate = "branch_create"
	ToolReturn = "branch_return"
	ToolStatus = "branch_status"
	ToolRecall = "branch_recall"
)

// ToolNames lists the fold tools, in the order Tools returns them; the
// memory tools follow them when memories are on.
func ToolNames() []string { return []string{ToolCreate, ToolReturn, ToolStatus, ToolRecall} }

// IsTool reports whether name is one of the fold tools or memory tools.
func IsTool(name string) bool {
	return slices.Contains(ToolNames(), name) || name == ToolMemoryRecord || name == ToolMemorySearch
}

// maxToolDescription bounds each tool's description, which every agent
// loads into its context.
const maxToolDescription = 2048

// Tools returns the MCP tool definitions of the fold tools, with their
// JSON Schema input schemas and annotations. They are marked to be always
// loaded, so that agents which defer tool loading still see them. The
// slices are the Manager's own: do not modify them.
func (m *Manager) Tools() []json.RawMessage { return slices.Clone(m.tools) }

type toolDef struct {
	Name        string          `json:"name"`
	Title       string          `json:"title"`
	Description string          `json:"description"`
	InputSchema map[string]any  `json:"inputSchema"`
	Annotations toolAnnotations `json:"annotations"`
	Meta        map[string]any  `json:"_meta"`
}

type toolAnnotations struct {
	Title           string `json:"title"`
	ReadOnlyHint    bool   `json:"readOnlyHint"`
	DestructiveHint bool   `json:"destructiveHint"`
	IdempotentHint  bool   `json:"idempotentHint"`
	OpenWorldHint   bool   `json:"openWorldHint"`
}

func schema(required []string, props map[string]any) map[string]any {
	s := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
	if len(required) > 0 {
		s["required"] = required
	}
	return s
}

func prop(typ, desc string, extra ...any) map[string]any {
	p := map[string]any{"type": typ, "description": desc}
	for i := 0; i+1 < len(extra); i += 2 {
		p[extra[i].(string)] = extra[i+1]
	}
	return p
}

// buildTools renders the tool definitions for the given settings.
func buildTools(set policy.Fold, memories bool) ([]json.RawMessage, error) {
	pct := func(i int) int { return int(math.Round(set.Thresholds[i] * 100)) }
	defs := []toolDef{
		{
			Name:  ToolCreate,
			Title: "Fold: create a branch",
			Description: fmt.Sprintf("Fold a sub-task into a branch so that its raw tool output stays out of your main context. "+
				"Use it before work whose output you will not need verbatim afterwards: exploring a codebase, reading many files, "+
				"searching, running tests and reading their logs, trying approaches that may fail. "+
				"How: create the branch with a short description (and a budget and timeout if the defaults do not fit), do the work, "+
				"then call branch_return with a concise message holding only the findings the parent needs; the parent keeps that message, not the output. "+
				"Every tool result you receive while the branch is active is charged to its budget (default %d tokens, at most %d, "+
				"and no more than the parent has left). A single agent may omit branch_id in its tool calls (they go to the innermost active branch); "+
				"parallel sub-agents must pass the returned branch_id as the branch_id argument of every tool call. "+
				"Notices are appended at %d%%, %d%% and %d%% of the budget. A result that would overrun the budget is cut to fit "+
				"(branch_recall reads the rest) and the branch is force-returned with an automatic summary; the same happens at the deadline "+
				"(default %d s, at most %d s). Branches nest to depth %d. depends_on waits for other branches to finish and hands you their messages.",
				set.DefaultBudget, set.MaxBudget, pct(0), pct(1), pct(2),
				int(set.DefaultTimeout.D().Seconds()), int(set.MaxTimeout.D().Seconds()), set.MaxDepth),
			InputSchema: schema([]string{"description"}, map[string]any{
				"description":      prop("string", "What the branch is for, in a few words.", "maxLength", MaxDescription),
				"prompt":           prop("string", "Optional instructions for the sub-agent doing the work.", "maxLength", MaxPrompt),
				"budget":           prop("integer", fmt.Sprintf("Tokens the branch may receive (default %d, at most %d).", set.DefaultBudget, set.MaxBudget), "minimum", 1, "maximum", set.MaxBudget),
				"timeout_seconds":  prop("number", fmt.Sprintf("Seconds before the branch is force-returned (default %d, at most %d).", int(set.DefaultTimeout.D().Seconds()), int(set.MaxTimeout.D().Seconds())), "exclusiveMinimum", 0, "maximum", set.MaxTimeout.D().Seconds()),
				"parent_branch_id": prop("string", "The parent branch; default: your innermost active branch, else the main thread."),
				"depends_on":       map[string]any{"type": "array", "items": map[string]any{"type": "string"}, "maxItems": maxDependsOn, "description": "Branches to wait for; their messages and return values come back in the answer."},
				"inject_memories":  prop("boolean", "Give the branch the most relevant memories of earlier branches as injected_context, charged to its budget (default true)."),
			}),
			Annotations: toolAnnotations{Title: "Create a branch"},
		},
		{
			Name:  ToolReturn,
			Title: "Fold: return a branch",
			Description: "Finish a branch and fold it back into its parent. Pass a concise message with what the parent needs to continue: " +
				"findings, decisions, file paths and symbols, the failing test and why; not the raw output. The parent sees only this message " +
				"and is charged its tokens. return_value is an optional machine-readable result (a string or any JSON value) for branches that depend on this one. " +
				"Without branch_id the innermost active branch returns; sub-agents should pass their branch_id. Active sub-branches are force-returned first. " +
				"The answer gives the message as the parent sees it (secrets redacted), the tokens the branch used and the sub-branches force-returned. " +
				"The main thread cannot be returned.",
			InputSchema: schema([]string{"message"}, map[string]any{
				"branch_id":      prop("string", "The branch to return; default: your innermost active branch."),
				"message":        prop("string", "The findings, concise: this is all the parent keeps.", "maxLength", MaxMessage),
				"return_value":   map[string]any{"description": "Optional machine-readable result for dependent branches: a string or any JSON value."},
				"extract_memory": prop("boolean", "Keep this branch's task and message as a memory for later branches on related tasks."),
			}),
			Annotations: toolAnnotations{Title: "Return a branch"},
		},
		{
			Name:  ToolStatus,
			Title: "Fold: branch status",
			Description: "Show where a branch stands: status, budget used, total and percent, warning level, time left, usage by tool and upstream, " +
				"children, cut results, and the automatic summary of a branch that was force-returned (budget, deadline, parent returning). " +
				"Without branch_id it shows this session's whole tree, main thread first. Check it before a large read to see what budget is left, " +
				"and after a sub-branch was force-returned to read its summary. detailed:true also lists the branch's archived calls and their handles.",
			InputSchema: schema(nil, map[string]any{
				"branch_id": prop("string", "The branch to show; default: the whole session tree."),
				"detailed":  prop("boolean", "Also list the archived calls of the branch."),
			}),
			Annotations: toolAnnotations{Title: "Branch status", ReadOnlyHint: true, IdempotentHint: true},
		},
		{
			Name:  ToolRecall,
			Title: "Fold: recall archived output",
			Description: fmt.Sprintf("Read what a branch received; nothing is lost when a result is cut or a branch is folded. "+
				"With a handle (from a cut notice, or a call_handle listed by branch_status detailed or by a recall by branch_id) it returns the text "+
				"from byte offset (default 0), one page of at most max_tokens tokens (default and maximum %d) cut at a line or word boundary, "+
				"with next_offset until done is true; the pages concatenated give the text byte for byte. "+
				"With a branch_id of this session (open or closed) it pages through that branch's archived calls, offset being the first call's sequence number. "+
				"Pages enter your context like any result: read only what you need.", set.RecallPageTokens),
			InputSchema: schema(nil, map[string]any{
				"handle":     prop("string", "A cut handle or call handle."),
				"branch_id":  prop("string", "A branch whose archived calls to list (instead of a handle)."),
				"offset":     prop("integer", "Byte offset in the text (with a handle) or first call sequence number (with a branch_id).", "minimum", 0),
				"max_tokens": prop("integer", fmt.Sprintf("Page size in tokens (default and maximum %d).", set.RecallPageTokens), "minimum", 1),
			}),
			Annotations: toolAnnotations{Title: "Recall archived output", ReadOnlyHint: true, IdempotentHint: true},
		},
	}
	if memories {
		defs = append(defs, memoryToolDefs()...)
	}
	out := make([]json.RawMessage, 0, len(defs))
	for _, d := range defs {
		if len(d.Description) > maxToolDescription {
			return nil, fmt.Errorf("fold: the description of %s is %d bytes, over %d", d.Name, len(d.Description), maxToolDescription)
		}
		d.Meta = map[string]any{"anthropic/alwaysLoad": true}
		raw, err := marshal(d, false)
		if err != nil {
			return nil, err
		}
		out = append(out, raw)
	}
	return out, nil
}

// CallTool runs one of the fold tools for session and returns an MCP
// CallToolResult. Refusals (bad arguments, limits, closed or unknown
// branches) are tool errors, {"isError":true,...}, whose text starts with
// the sentinel's name; the returned Go error is reserved for an unknown
// tool name (wrapping ErrInvalidArgument) and internal failures such as a
// store that cannot be written.
func (m *Manager) CallTool(ctx context.Context, session, name string, args json.RawMessage) (json.RawMessage, error) {
	var ans any
	var err error
	switch name {
	case ToolCreate:
		var a createArgs
		if a, err = parseCreateArgs(args); err == nil {
			ans, err = m.create(ctx, session, a)
		}
	case ToolReturn:
		var a returnArgs
		if a, err = parseReturnArgs(args); err == nil {
			ans, err = m.ret(ctx, session, a)
		}
	case ToolStatus:
		var a statusArgs
		if a, err = parseStatusArgs(args); err == nil {
			ans, err = m.status(ctx, session, a)
		}
	case ToolRecall:
		var a recallArgs
		if a, err = parseRecallArgs(args); err == nil {
			ans, err = m.recall(ctx, session, a)
		}
	case ToolMemoryRecord:
		var a memoryRecordArgs
		if a, err = parseMemoryRecordArgs(args); err == nil {
			ans, err = m.memoryRecord(ctx, session, a)
		}
	case ToolMemorySearch:
		var a memorySearchArgs
		if a, err = parseMemorySearchArgs(args); err == nil {
			ans, err = m.memorySearch(ctx, session, a)
		}
	default:
		return nil, fmt.Errorf("%w: fold: unknown tool %q; the fold tools are %s", ErrInvalidArgument, name, strings.Join(ToolNames(), ", "))
	}
	if err != nil {
		sentinel := refusal(err)
		if sentinel == nil {
			return nil, fmt.Errorf("fold: %s: %w", name, err)
		}
		m.emit(ctx, Event{Kind: "refused", Session: session, Reason: name, Err: err})
		text := err.Error()
		if !strings.HasPrefix(text, sentinel.Error()) {
			text = sentinel.Error() + ": " + text
		}
		return toolError(text)
	}
	return toolResult(ans)
}

// refusals are the sentinels that make a tool error rather than a failure.
var refusals = [...]error{
	ErrMaxDepthExceeded, ErrBudgetExceeded, ErrBranchClosed, ErrBranchNotFound,
	ErrTooManyBranches, ErrRateLimited, ErrInvalidArgument, ErrDependencyFailed,
	ErrSessionNotFound, ErrCutNotFound, ErrScanFailed,
}

func refusal(err error) error {
	for _, s := range refusals {
		if errors.Is(err, s) {
			return s
		}
	}
	return nil
}

type textContent struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

func toolResult(v any) (json.RawMessage, error) {
	structured, err := marshal(v, false)
	if err != nil {
		return nil, fmt.Errorf("fold: encode answer: %w", err)
	}
	text, err := marshal(v, true)
	if err != nil {
		return nil, fmt.Errorf("fold: encode answer: %w", err)
	}
	return marshal(struct {
		Content           []textContent   `json:"content"`
		StructuredContent json.RawMessage `json:"structuredContent"`
	}{[]textContent{{"text", string(text)}}, structured}, false)
}

func toolError(text string) (json.RawMessage, error) {
	return marshal(struct {
		IsError bool          `json:"isError"`
		Content []textContent `json:"content"`
	}{true, []textContent{{"text", text}}}, false)
}

// marshal encodes v without HTML escaping, indented when asked, without a
// trailing newline.
func marshal(v any, indent bool) (json.RawMessage, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if indent {
		enc.SetIndent("", "  ")
	}
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// args reads a tool's arguments strictly: an object whose fields are all
// known, each of the right type. A null field counts as absent.
type args struct {
	tool   string
	fields map[string]json.RawMessage
}

func readArgs(tool string, raw json.RawMessage, allowed ...string) (*args, error) {
	a := &args{tool: tool, fields: map[string]json.RawMessage{}}
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return a, nil
	}
	if raw[0] != '{' {
		return nil, fmt.Errorf("%w: %s: the arguments must be a JSON object, got %s", ErrInvalidArgument, tool, jsonKind(raw))
	}
	if err := json.Unmarshal(raw, &a.fields); err != nil {
		return nil, fmt.Errorf("%w: %s: the arguments are not valid JSON: %v", ErrInvalidArgument, tool, err)
	}
	names := make([]string, 0, len(a.fields))
	for k := range a.fields {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		if !slices.Contains(allowed, k) {
			return nil, fmt.Errorf("%w: %s: unknown field %q; the fields are %s", ErrInvalidArgument, tool, k, strings.Join(allowed, ", "))
		}
		if string(bytes.TrimSpace(a.fields[k])) == "null" {
			delete(a.fields, k)
		}
	}
	return a, nil
}

// jsonKind names the JSON type of a (syntactically valid) value.
func jsonKind(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "nothing"
	}
	switch raw[0] {
	case '"':
		return "a string"
	case '{':
		return "an object"
	case '[':
		return "an array"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	default:
		return "a number"
	}
}

func (a *args) wrong(name, want string) error {
	return fmt.Errorf("%w: %s: field %q: want %s, got %s", ErrInvalidArgument, a.tool, name, want, jsonKind(a.fields[name]))
}

func (a *args) str(name string, required bool) (string, error) {
	raw, ok := a.fields[name]
	if !ok {
		if required {
			return "", fmt.Errorf("%w: %s: field %q is required", ErrInvalidArgument, a.tool, name)
		}
		return "", nil
	}
	var s string
	if jsonKind(raw) != "a string" || json.Unmarshal(raw, &s) != nil {
		return "", a.wrong(name, "a string")
	}
	return s, nil
}

// id reads a branch id or handle.
func (a *args) id(name string) (string, error) {
	s, err := a.str(name, false)
	if err != nil {
		return "", err
	}
	if len(s) > maxIDLen {
		return "", fmt.Errorf("%w: %s: field %q: %d bytes is too long for an id", ErrInvalidArgument, a.tool, name, len(s))
	}
	return s, nil
}

func (a *args) integer(name string, lo, hi int64) (*int, error) {
	raw, ok := a.fields[name]
	if !ok {
		return nil, nil
	}
	if jsonKind(raw) != "a number" {
		return nil, a.wrong(name, "an integer")
	}
	f, err := strconv.ParseFloat(string(bytes.TrimSpace(raw)), 64)
	if err != nil || f != math.Trunc(f) {
		return nil, fmt.Errorf("%w: %s: field %q: want an integer, got %s", ErrInvalidArgument, a.tool, name, bytes.TrimSpace(raw))
	}
	if f < float64(lo) || f > float64(hi) {
		return nil, fmt.Errorf("%w: %s: field %q: %s is out of range [%d, %d]", ErrInvalidArgument, a.tool, name, bytes.TrimSpace(raw), lo, hi)
	}
	v := int(f)
	return &v, nil
}

func (a *args) number(name string) (*float64, error) {
	raw, ok := a.fields[name]
	if !ok {
		return nil, nil
	}
	var f float64
	if jsonKind(raw) != "a number" || json.Unmarshal(raw, &f) != nil {
		return nil, a.wrong(name, "a number")
	}
	return &f, nil
}

func (a *args) boolean(name string) (bool, error) {
	raw, ok := a.fields[name]
	if !ok {
		return false, nil
	}
	var v bool
	if jsonKind(raw) != "a boolean" || json.Unmarshal(raw, &v) != nil {
		return false, a.wrong(name, "a boolean")
	}
	return v, nil
}

func (a *args) ids(name string) ([]string, error) {
	raw, ok := a.fields[name]
	if !ok {
		return nil, nil
	}
	var list []json.RawMessage
	if jsonKind(raw) != "an array" || json.Unmarshal(raw, &list) != nil {
		return nil, a.wrong(name, "an array of branch ids")
	}
	out := make([]string, 0, len(list))
	for i, item := range list {
		var s string
		if jsonKind(item) != "a string" || json.Unmarshal(item, &s) != nil {
			return nil, fmt.Errorf("%w: %s: field %q: item %d: want a string, got %s", ErrInvalidArgument, a.tool, name, i, jsonKind(item))
		}
		if len(s) > maxIDLen {
			return nil, fmt.Errorf("%w: %s: field %q: item %d: %d bytes is too long for an id", ErrInvalidArgument, a.tool, name, i, len(s))
		}
		out = append(out, s)
	}
	return out, nil
}

func parseCreateArgs(raw json.RawMessage) (createArgs, error) {
	var c createArgs
	a, err := readArgs(ToolCreate, raw, "description", "prompt", "budget", "timeout_seconds", "parent_branch_id", "depends_on", "inject_memories")
	if err != nil {
		return c, err
	}
	if c.Description, err = a.str("description", true); err != nil {
		return c, err
	}
	if c.Prompt, err = a.str("prompt", false); err != nil {
		return c, err
	}
	if c.Budget, err = a.integer("budget", math.MinInt32, math.MaxInt32); err != nil {
		return c, err
	}
	if c.TimeoutSeconds, err = a.number("timeout_seconds"); err != nil {
		return c, err
	}
	if c.ParentBranchID, err = a.id("parent_branch_id"); err != nil {
		return c, err
	}
	if c.DependsOn, err = a.ids("depends_on"); err != nil {
		return c, err
	}
	if _, ok := a.fields["inject_memories"]; ok {
		v, err := a.boolean("inject_memories")
		if err != nil {
			return c, err
		}
		c.InjectMemories = &v
	}
	return c, nil
}

func parseReturnArgs(raw json.RawMessage) (returnArgs, error) {
	var r returnArgs
	a, err := readArgs(ToolReturn, raw, "branch_id", "message", "return_value", "extract_memory")
	if err != nil {
		return r, err
	}
	if r.BranchID, err = a.id("branch_id"); err != nil {
		return r, err
	}
	if r.Message, err = a.str("message", true); err != nil {
		return r, err
	}
	if r.ReturnValue, err = a.anyJSON("return_value"); err != nil {
		return r, err
	}
	r.ExtractMemory, err = a.boolean("extract_memory")
	return r, err
}

// anyJSON reads a field that may hold any JSON value: a string is taken as
// it is, anything else as its compact JSON text.
func (a *args) anyJSON(name string) (string, error) {
	raw, ok := a.fields[name]
	if !ok {
		return "", nil
	}
	if jsonKind(raw) == "a string" {
		return a.str(name, false)
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return "", a.wrong(name, "a JSON value")
	}
	return buf.String(), nil
}

func parseStatusArgs(raw json.RawMessage) (statusArgs, error) {
	var s statusArgs
	a, err := readArgs(ToolStatus, raw, "branch_id", "detailed")
	if err != nil {
		return s, err
	}
	if s.BranchID, err = a.id("branch_id"); err != nil {
		return s, err
	}
	s.Detailed, err = a.boolean("detailed")
	return s, err
}

func parseRecallArgs(raw json.RawMessage) (recallArgs, error) {
	var r recallArgs
	a, err := readArgs(ToolRecall, raw, "handle", "branch_id", "offset", "max_tokens")
	if err != nil {
		return r, err
	}
	if r.Handle, err = a.id("handle"); err != nil {
		return r, err
	}
	if r.BranchID, err = a.id("branch_id"); err != nil {
		return r, err
	}
	if r.Offset, err = a.integer("offset", 0, math.MaxInt32); err != nil {
		return r, err
	}
	if r.MaxTokens, err = a.integer("max_tokens", 1, math.MaxInt32); err != nil {
		return r, err
	}
	if (r.Handle == "") == (r.BranchID == "") {
		return r, fmt.Errorf("%w: %s: give exactly one of the fields \"handle\" and \"branch_id\"", ErrInvalidArgument, ToolRecall)
	}
	return r, nil
}
