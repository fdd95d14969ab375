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
	"github.com/foldproxy/foldproxy/policy/jsonscan"
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

// IsTool reports whether name is one of the fold, checkpoint or memory
// tools.
func IsTool(name string) bool {
	switch name {
	case ToolMemoryRecord, ToolMemorySearch, ToolRemediationRecord, ToolCheckpointSave, ToolCheckpointList, ToolCheckpointResume:
		return true
	}
	return slices.Contains(ToolNames(), name)
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
	Title       string          `json:"title,omitempty"`
	Description string          `json:"description"`
	InputSchema map[string]any  `json:"inputSchema"`
	Annotations toolAnnotations `json:"annotations,omitzero"`
	Meta        map[string]any  `json:"_meta,omitempty"`
	// deferred tools are not marked to be always loaded: used rarely
	// (checkpoints, remediations), they cost an agent that defers tool
	// loading nothing until it looks for them.
	deferred bool
}

// toolAnnotations are the hints a tool sets; the fold tools set none, for
// their tokens.
type toolAnnotations struct {
	Title        string `json:"title,omitempty"`
	ReadOnlyHint bool   `json:"readOnlyHint,omitempty"`
}

func schema(required []string, props map[string]any) map[string]any {
	s := map[string]any{"type": "object", "properties": props}
	if len(required) > 0 {
		s["required"] = required
	}
	return s
}

// prop is a property's schema; desc "" leaves the description out.
func prop(typ, desc string, extra ...any) map[string]any {
	p := map[string]any{"type": typ}
	if desc != "" {
		p["description"] = desc
	}
	for i := 0; i+1 < len(extra); i += 2 {
		p[extra[i].(string)] = extra[i+1]
	}
	return p
}

// buildTools renders the tool definitions for the given settings. Every
// agent loads them into its context at every turn, so they are short
// (bounded in e2e/fold_cost_test.go, measured by make bench): the names of
// the arguments say what they are, and the descriptions say when to use a
// tool and what it costs. Arguments accepted for compatibility (session_id,
// parent_id) and prompt (a note for a sub-agent, which the agent writes in
// its own words anyway) are accepted but not listed.
func buildTools(set policy.Fold, memories bool) ([]json.RawMessage, error) {
	secs := func(d policy.Duration) int { return int(d.D().Seconds()) }
	defs := []toolDef{
		{
			Name: ToolCreate,
			Description: fmt.Sprintf("Run a sub-task (exploring code, reading many files, test logs) in a branch: its results use its budget "+
				"(default %d, max %d tokens) and leave your context at branch_return, which keeps your message. "+
				"Past budget or deadline (default %d s) it is force-returned; branch_recall reads cut output. "+
				"Parallel sub-agents pass branch_id in each call.",
				set.DefaultBudget, set.MaxBudget, secs(set.DefaultTimeout)),
			InputSchema: schema([]string{"description"}, map[string]any{
				"description":      prop("string", ""),
				"budget":           prop("integer", ""),
				"timeout_seconds":  prop("number", ""),
				"parent_branch_id": prop("string", ""),
				"depends_on":       map[string]any{"type": "array", "items": prop("string", "")},
				"inject_memories":  prop("boolean", ""),
			}),
		},
		{
			Name: ToolReturn,
			Description: "End a branch (default: the innermost); the parent keeps only message (findings, not raw output) " +
				"and return_value (any JSON).",
			InputSchema: schema([]string{"message"}, map[string]any{
				"branch_id":      prop("string", ""),
				"message":        prop("string", ""),
				"return_value":   map[string]any{},
				"extract_memory": prop("boolean", ""),
			}),
		},
		{
			Name:        ToolStatus,
			Description: "Budget and time left, force-return summaries; no branch_id: the session tree (offset pages it), orphans (acknowledge hides them); detailed: archived calls, usage by kind.",
			InputSchema: schema(nil, map[string]any{
				"branch_id":   prop("string", ""),
				"detailed":    prop("boolean", ""),
				"offset":      prop("integer", ""),
				"acknowledge": prop("boolean", ""),
			}),
		},
		{
			Name: ToolRecall,
			Description: fmt.Sprintf("Read archived output by handle (cut notice, call_handle) from offset, max_tokens (at most %d) a page, until done; "+
				"or list a branch_id's calls.", set.RecallPageTokens),
			InputSchema: schema(nil, map[string]any{
				"handle":     prop("string", ""),
				"branch_id":  prop("string", ""),
				"offset":     prop("integer", ""),
				"max_tokens": prop("integer", ""),
			}),
		},
	}
	defs = append(defs, checkpointToolDefs()...)
	if memories {
		defs = append(defs, memoryToolDefs()...)
	}
	out := make([]json.RawMessage, 0, len(defs))
	for _, d := range defs {
		if len(d.Description) > maxToolDescription {
			return nil, fmt.Errorf("fold: the description of %s is %d bytes, over %d", d.Name, len(d.Description), maxToolDescription)
		}
		if !d.deferred {
			d.Meta = map[string]any{"anthropic/alwaysLoad": true}
		}
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
		if a, err = parseCreateArgs(session, args); err == nil {
			ans, err = m.create(ctx, session, a)
		}
	case ToolReturn:
		var a returnArgs
		if a, err = parseReturnArgs(session, args); err == nil {
			ans, err = m.ret(ctx, session, a)
		}
	case ToolStatus:
		var a statusArgs
		if a, err = parseStatusArgs(session, args); err == nil {
			ans, err = m.status(ctx, session, a)
		}
		if err == nil {
			named := a.BranchID
			// The asking branch receives the answer and pays for it
			// (branch_create and branch_return charge their parents
			// themselves; branch_recall is charged by the budget
			// interceptor, like any result).
			var text string
			if text, err = answerText(ans); err == nil {
				err = m.chargeOwn(ctx, session, named, ToolStatus, string(args), text)
			}
		}
	case ToolRecall:
		var a recallArgs
		if a, err = parseRecallArgs(session, args); err == nil {
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
	case ToolRemediationRecord:
		var a remediationArgs
		if a, err = parseRemediationArgs(args); err == nil {
			ans, err = m.remediationRecord(ctx, session, a)
		}
	case ToolCheckpointSave, ToolCheckpointList, ToolCheckpointResume:
		// The branch the call was made in pays for the answer, not the
		// branches a resumption creates.
		caller := m.innermostID(session)
		switch name {
		case ToolCheckpointSave:
			var a checkpointSaveArgs
			if a, err = parseCheckpointSaveArgs(session, args); err == nil {
				ans, err = m.checkpointSave(ctx, session, a)
			}
		case ToolCheckpointList:
			if err = parseCheckpointListArgs(session, args); err == nil {
				ans, err = m.checkpointList(ctx, session)
			}
		default:
			var a checkpointResumeArgs
			if a, err = parseCheckpointResumeArgs(session, args); err == nil {
				ans, err = m.checkpointResume(ctx, session, a)
			}
		}
		if err == nil {
			// The session's current branch receives the answer and pays
			// for it, as for branch_status.
			var text string
			if text, err = answerText(ans); err == nil {
				err = m.chargeOwn(ctx, session, caller, name, string(args), text)
			}
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
	ErrSessionNotFound, ErrCutNotFound, ErrScanFailed, ErrCheckpointNotFound,
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

// toolResult is a successful answer: its compact JSON as the one text
// block. The fold tools declare no outputSchema, so there is no
// structuredContent copy: the model would be shown, and charged, the same
// answer twice.
func toolResult(v any) (json.RawMessage, error) {
	var text string
	if r, ok := v.(renderedAnswer); ok {
		text = r.rendered()
	}
	if text == "" {
		raw, err := marshal(v, false)
		if err != nil {
			return nil, fmt.Errorf("fold: encode answer: %w", err)
		}
		text = string(raw)
	}
	return marshal(struct {
		Content []textContent `json:"content"`
	}{[]textContent{{"text", text}}}, false)
}

// renderedAnswer is an answer that kept the text it was rendered as for
// its charge and its record ("" when it was not), so that it is not
// rendered again to be sent.
type renderedAnswer interface{ rendered() string }

// answerText is an answer's text as the agent receives it.
func answerText(v any) (string, error) {
	text, err := marshal(v, false)
	if err != nil {
		return "", fmt.Errorf("fold: encode answer: %w", err)
	}
	return string(text), nil
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
		return nil, fmt.Errorf("%w: %s: the arguments must be a JSON object, got %s", ErrInvalidArgument, tool, jsonscan.Kind(raw))
	}
	if err := a.read(raw); err != nil {
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

// read fills fields from raw, an object, as json.Unmarshal into the map
// does (a repeated name keeps its last value), by one scan rather than
// reflection. The values are raw's own bytes, read before the call
// returns. Invalid JSON is left to json.Unmarshal, whose error the
// refusal quotes.
func (a *args) read(raw []byte) error {
	if !jsonscan.Valid(raw) {
		return json.Unmarshal(raw, &a.fields)
	}
	ms, err := jsonscan.Object(raw)
	if err != nil {
		return json.Unmarshal(raw, &a.fields)
	}
	for _, m := range ms {
		a.fields[m.Key] = m.Value.Of(raw)
	}
	return nil
}

func (a *args) wrong(name, want string) error {
	return fmt.Errorf("%w: %s: field %q: want %s, got %s", ErrInvalidArgument, a.tool, name, want, jsonscan.Kind(a.fields[name]))
}

func (a *args) str(name string, required bool) (string, error) {
	raw, ok := a.fields[name]
	if !ok {
		if required {
			return "", fmt.Errorf("%w: %s: field %q is required", ErrInvalidArgument, a.tool, name)
		}
		return "", nil
	}
	if jsonscan.Kind(raw) != "a string" {
		return "", a.wrong(name, "a string")
	}
	s, err := jsonscan.Unquote(bytes.TrimSpace(raw)) // as json.Unmarshal decodes it
	if err != nil {
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
	if jsonscan.Kind(raw) != "a number" {
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
	if jsonscan.Kind(raw) != "a number" || json.Unmarshal(raw, &f) != nil {
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
	if jsonscan.Kind(raw) != "a boolean" || json.Unmarshal(raw, &v) != nil {
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
	if jsonscan.Kind(raw) != "an array" || json.Unmarshal(raw, &list) != nil {
		return nil, a.wrong(name, "an array of branch ids")
	}
	out := make([]string, 0, len(list))
	for i, item := range list {
		var s string
		if jsonscan.Kind(item) != "a string" || json.Unmarshal(item, &s) != nil {
			return nil, fmt.Errorf("%w: %s: field %q: item %d: want a string, got %s", ErrInvalidArgument, a.tool, name, i, jsonscan.Kind(item))
		}
		if len(s) > maxIDLen {
			return nil, fmt.Errorf("%w: %s: field %q: item %d: %d bytes is too long for an id", ErrInvalidArgument, a.tool, name, i, len(s))
		}
		out = append(out, s)
	}
	return out, nil
}

// sessionArg checks a session_id argument: accepted for the seeds'
// sake, it must name the caller's own session and never switches sessions.
func (a *args) sessionArg(session string) error {
	id, err := a.id("session_id")
	if err != nil || id == "" || id == session {
		return err
	}
	return fmt.Errorf("%w: %s: session_id %q is not this session (%q); omit it: calls always act on the caller's own session", ErrInvalidArgument, a.tool, id, session)
}

func parseCreateArgs(session string, raw json.RawMessage) (createArgs, error) {
	var c createArgs
	a, err := readArgs(ToolCreate, raw, "description", "prompt", "budget", "timeout_seconds", "parent_branch_id", "parent_id", "depends_on", "inject_memories", "session_id")
	if err != nil {
		return c, err
	}
	if err = a.sessionArg(session); err != nil {
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
	alias, err := a.id("parent_id")
	if err != nil {
		return c, err
	}
	switch {
	case c.ParentBranchID == "":
		c.ParentBranchID = alias
	case alias != "" && alias != c.ParentBranchID:
		return c, fmt.Errorf("%w: %s: parent_id %q and parent_branch_id %q differ; give one of them", ErrInvalidArgument, ToolCreate, alias, c.ParentBranchID)
	}
	if _, ok := a.fields["inject_memories"]; ok {
		v, err := a.boolean("inject_memories")
		if err != nil {
			return c, err
		}
		c.InjectMemories = &v
	}
	c.DependsOn, err = a.ids("depends_on")
	return c, err
}

func parseReturnArgs(session string, raw json.RawMessage) (returnArgs, error) {
	var r returnArgs
	a, err := readArgs(ToolReturn, raw, "branch_id", "message", "return_value", "extract_memory", "session_id")
	if err != nil {
		return r, err
	}
	if err = a.sessionArg(session); err != nil {
		return r, err
	}
	if r.BranchID, err = a.id("branch_id"); err != nil {
		return r, err
	}
	if r.Message, err = a.str("message", true); err != nil {
		return r, err
	}
	if _, ok := a.fields["extract_memory"]; ok {
		v, err := a.boolean("extract_memory")
		if err != nil {
			return r, err
		}
		r.ExtractMemory = &v
	}
	r.ReturnValue, err = a.anyJSON("return_value")
	return r, err
}

// anyJSON reads a field that may hold any JSON value, as its compact JSON
// text ("" when absent).
func (a *args) anyJSON(name string) (string, error) {
	raw, ok := a.fields[name]
	if !ok {
		return "", nil
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return "", a.wrong(name, "a JSON value")
	}
	return buf.String(), nil
}

func parseStatusArgs(session string, raw json.RawMessage) (statusArgs, error) {
	var s statusArgs
	a, err := readArgs(ToolStatus, raw, "branch_id", "detailed", "offset", "acknowledge", "session_id")
	if err != nil {
		return s, err
	}
	if err = a.sessionArg(session); err != nil {
		return s, err
	}
	if s.BranchID, err = a.id("branch_id"); err != nil {
		return s, err
	}
	if s.Offset, err = a.integer("offset", 0, math.MaxInt32); err != nil {
		return s, err
	}
	if s.Acknowledge, err = a.boolean("acknowledge"); err != nil {
		return s, err
	}
	s.Detailed, err = a.boolean("detailed")
	return s, err
}

func parseRecallArgs(session string, raw json.RawMessage) (recallArgs, error) {
	var r recallArgs
	a, err := readArgs(ToolRecall, raw, "handle", "branch_id", "offset", "max_tokens", "session_id")
	if err != nil {
		return r, err
	}
	if err = a.sessionArg(session); err != nil {
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
