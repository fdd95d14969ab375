// Package replay plays recorded agent trajectories (e2e/trajectory) as
// Claude Code conversations through foldproxy's model front, by an agent
// that never calls a fold tool, and measures what the model receives: the
// context of each request and its peak, the input bill under prompt caching
// (cache reads and writes modelled from where each request first differs
// from the one before), how often the cached prefix held, the automatic
// folds, whether each fold reads back exactly, and whether every
// forwarded request is valid.
//
// It is the harness of TestReplayAutoFold (bounds on the token figures)
// and of make bench's replay section. The model API is Upstream, a
// scripted stand-in that records what it receives and answers with a short
// streamed message whose usage is the same cache model's, so that
// foldproxy's own billing figures can be checked against it.
package replay

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"sync"

	"github.com/foldproxy/foldproxy/e2e/trajectory"
	"github.com/foldproxy/foldproxy/fold/modelwire"
	"github.com/foldproxy/foldproxy/policy/jsonscan"
)

// Counter counts tokens (o200k_base in the tests and the bench).
type Counter interface{ CountText(string) int }

// Options configure a replay.
type Options struct {
	// PerConversation is how many tasks one conversation holds: 1 plays
	// each trajectory alone, 8 plays long sessions (a developer's
	// conversation going on across tasks).
	PerConversation int
	// ReadPrice and WritePrice weigh cache reads and writes (0.1, 1.25).
	ReadPrice, WritePrice float64
	// Count counts tokens.
	Count Counter
	// Direct plays the conversations against Upstream itself rather than
	// through foldproxy: the baseline.
	Direct bool
	// VerifyRecalls ends each conversation with one more request that
	// recalls every fold it holds through the recall tool, and checks
	// the text read back against what the model had been shown.
	VerifyRecalls bool
}

// Stats are the figures of a replay.
type Stats struct {
	Conversations, Requests int
	// Context is the model's input as received, per request (tools,
	// system prompt and conversation); Sum over every request, End over
	// the last request of each conversation, Peak the largest.
	ContextSum, EndSum int64
	Peak               int
	// Billed is the cache-modelled input bill; Reads and Writes its
	// token counts.
	Billed        float64
	Reads, Writes int64
	// PrefixHeld counts the requests (after a conversation's first)
	// whose forwarded input starts with the whole previous request.
	PrefixHeld, Successive int
	// Folds are the results the last requests carry folded; Recalled
	// those read back exactly, RecallFailed those that were not.
	Folds, Recalled, RecallFailed int
	// Invalid counts forwarded requests modelwire.Check refuses.
	Invalid int
	// EndResults and EndStubs are the tokens of the tool results the last
	// requests carry whole, and of their stubs.
	EndResults, EndStubs int64
	// ByKind counts the folds by kind, from the stubs' wording.
	ByKind map[string]int
	// Errors are the first few problems seen.
	Errors []string
}

// Meter bills a sequence of requests (one conversation's, in order)
// under prompt caching: each request reads from the cache what it shares
// with the request before it, piece by piece (the head: system prompt and
// tools; then each message, cache_control markers left out), up to the
// first piece that differs, and writes the rest.
type Meter struct {
	Count                 Counter
	ReadPrice, WritePrice float64 // default 0.1 and 1.25

	prev []piece
	// Requests, Billed, Reads and Writes add up the requests measured;
	// ContextSum and Peak their size; PrefixHeld counts the requests that
	// started with the whole request before them, of Successive.
	Requests, PrefixHeld, Successive, Peak int
	Billed                                 float64
	Reads, Writes, ContextSum              int64
	Last                                   int // the size of the last request

	results []result // the last request's tool results
}

// Add measures one request.
func (m *Meter) Add(body []byte) error {
	if m.ReadPrice == 0 {
		m.ReadPrice, m.WritePrice = 0.1, 1.25
	}
	ps, rs, err := layout(body, m.Count)
	if err != nil {
		return err
	}
	m.results = rs
	total := sumTokens(ps)
	held, whole := heldTokens(m.prev, ps)
	m.Requests++
	m.ContextSum += int64(total)
	m.Peak = max(m.Peak, total)
	m.Reads += int64(held)
	m.Writes += int64(total - held)
	m.Billed += m.ReadPrice*float64(held) + m.WritePrice*float64(total-held)
	if m.prev != nil {
		m.Successive++
		if whole {
			m.PrefixHeld++
		}
	}
	m.prev, m.Last = ps, total
	return nil
}

// Restart starts a new conversation: its first request reads nothing.
func (m *Meter) Restart() { m.prev = nil }

// Play plays trajs through the model front at front (for example
// "http://127.0.0.1:8765"), whose model API is up.
func Play(ctx context.Context, hc *http.Client, front string, up *Upstream, trajs []trajectory.Trajectory, opt Options) (Stats, error) {
	if opt.PerConversation <= 0 {
		opt.PerConversation = 1
	}
	if opt.ReadPrice == 0 {
		opt.ReadPrice, opt.WritePrice = 0.1, 1.25
	}
	st := Stats{ByKind: map[string]int{}}
	for i := 0; i+opt.PerConversation <= len(trajs); i += opt.PerConversation {
		conv := fmt.Sprintf("replay-%03d-%d", i, opt.PerConversation)
		if err := playOne(ctx, hc, front, up, conv, trajs[i:i+opt.PerConversation], opt, &st); err != nil {
			return st, fmt.Errorf("conversation %s: %w", conv, err)
		}
	}
	return st, nil
}

func (st *Stats) fail(format string, args ...any) {
	if len(st.Errors) < 10 {
		st.Errors = append(st.Errors, fmt.Sprintf(format, args...))
	}
}

// Conversation is one growing Claude Code conversation.
type Conversation struct {
	msgs []json.RawMessage
	n    int
}

func (c *Conversation) add(v any) {
	b, _ := json.Marshal(v)
	c.msgs = append(c.msgs, b)
}

// Task adds a task the user types (after a short answer of the model when
// the conversation has begun).
func (c *Conversation) Task(text string) {
	if len(c.msgs) > 0 {
		c.add(map[string]any{"role": "assistant", "content": []any{map[string]any{"type": "text", "text": "Done."}}})
	}
	c.add(userText(text))
}

// Step adds one turn: the model runs command with Bash, and its output.
func (c *Conversation) Step(prefix, command, output string, returnCode int) string {
	c.n++
	id := fmt.Sprintf("toolu_%s_%04d", prefix, c.n)
	c.add(map[string]any{"role": "assistant", "content": []any{map[string]any{"type": "tool_use", "id": id, "name": "Bash", "input": map[string]any{"command": command}}}})
	if output == "" {
		output = "(no output)"
	}
	res := map[string]any{"type": "tool_result", "tool_use_id": id, "content": output}
	if returnCode != 0 {
		res["is_error"] = true
	}
	c.add(map[string]any{"role": "user", "content": []any{res}})
	return id
}

// Body is the request as Claude Code sends it: model, system prompt,
// tools, then the messages.
func (c *Conversation) Body() []byte { return c.body() }

func (c *Conversation) body() []byte {
	var b bytes.Buffer
	b.WriteString(`{"model":"claude-replay","max_tokens":32000,"stream":true,"system":`)
	b.Write(systemJSON)
	b.WriteString(`,"tools":`)
	b.Write(toolsJSON)
	b.WriteString(`,"messages":[`)
	for i, m := range c.msgs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(m)
	}
	b.WriteString(`]}`)
	return b.Bytes()
}

func playOne(ctx context.Context, hc *http.Client, front string, up *Upstream, conv string, tasks []trajectory.Trajectory, opt Options, st *Stats) error {
	st.Conversations++
	var c Conversation
	meter := Meter{Count: opt.Count, ReadPrice: opt.ReadPrice, WritePrice: opt.WritePrice}
	shown := map[string]string{} // tool-use id -> its text as the model first saw it
	send := func() error {
		body := c.body()
		fwd, err := roundTrip(ctx, hc, front, up, conv, body, opt.Direct)
		if err != nil {
			return err
		}

		if err := modelwire.Check(modelwire.Anthropic, fwd); err != nil {
			st.Invalid++
			st.fail("%s request %d: invalid: %v", conv, len(c.msgs), err)
		}
		if err := meter.Add(fwd); err != nil {
			return err
		}
		// What the model is shown of each result, the first time.
		for _, r := range meter.results {
			if _, ok := shown[r.id]; !ok && !stubOf(r.text) {
				shown[r.id] = r.text
			}
		}
		return nil
	}
	for _, task := range tasks {
		c.Task(task.Task)
		for _, s := range task.Steps {
			c.Step(conv, s.Command, s.Output, s.ReturnCode)
			if err := send(); err != nil {
				return err
			}
		}
	}
	st.Requests += meter.Requests
	st.ContextSum += meter.ContextSum
	st.Peak = max(st.Peak, meter.Peak)
	st.Reads += meter.Reads
	st.Writes += meter.Writes
	st.Billed += meter.Billed
	st.Successive += meter.Successive
	st.PrefixHeld += meter.PrefixHeld
	st.EndSum += int64(meter.Last)
	// The folds the last request carries.
	var folds []result
	for _, r := range meter.results {
		if m := reStub.FindStringSubmatch(r.text); m != nil {
			folds = append(folds, r)
			st.ByKind[kindOf(m[1])]++
		} else if m := reOversize.FindStringSubmatch(r.text); m != nil {
			st.ByKind["oversized"]++
		}
	}
	st.Folds += len(folds)
	for _, r := range meter.results {
		if stubOf(r.text) {
			st.EndStubs += int64(opt.Count.CountText(r.text))
		} else {
			st.EndResults += int64(opt.Count.CountText(r.text))
		}
	}
	if !opt.VerifyRecalls || opt.Direct || len(folds) == 0 {
		return nil
	}
	// One more turn: the agent recalls every fold at once; its client
	// knows no such tool and answers each call with an error.
	var calls, answers []any
	want := map[string]string{}
	for i, f := range folds {
		h := reStub.FindStringSubmatch(f.text)[2]
		id := fmt.Sprintf("toolu_%s_recall_%04d", conv, i)
		calls = append(calls, map[string]any{"type": "tool_use", "id": id, "name": "branch_recall", "input": map[string]any{"handle": h, "max_tokens": 100000}})
		answers = append(answers, map[string]any{"type": "tool_result", "tool_use_id": id, "is_error": true,
			"content": "<tool_use_error>Error: No such tool available: branch_recall</tool_use_error>"})
		want[id] = shown[f.id]
	}
	c.add(map[string]any{"role": "assistant", "content": calls})
	c.add(map[string]any{"role": "user", "content": answers})
	fwd, err := roundTrip(ctx, hc, front, up, conv, c.body(), false)
	if err != nil {
		return err
	}
	got := map[string]string{}
	for _, r := range results(fwd) {
		got[r.id] = r.text
	}
	for id, w := range want {
		var page struct {
			Text string `json:"text"`
			Done bool   `json:"done"`
		}
		if err := json.Unmarshal([]byte(got[id]), &page); err != nil || !page.Done || page.Text != w || w == "" {
			st.RecallFailed++
			st.fail("%s: the recall %s read %.80q, not the result the model was shown (%.40q)", conv, id, got[id], w)
			continue
		}
		st.Recalled++
	}
	return nil
}

// roundTrip sends one request and returns the body the model API received.
func roundTrip(ctx context.Context, hc *http.Client, front string, up *Upstream, conv string, body []byte, direct bool) ([]byte, error) {
	target := front
	if direct {
		target = up.URL
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(target, "/")+"/v1/messages", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("anthropic-version", "2023-06-01")
	req.Header.Set("X-Claude-Code-Session-Id", conv)
	req.Header.Set(convHeader, conv)
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("status %d: %.300s", resp.StatusCode, data)
	}
	fwd := up.last(conv)
	if fwd == nil {
		return nil, fmt.Errorf("the model API received nothing")
	}
	return fwd, nil
}

// piece is one part of a request for the cache model: the head (model,
// system prompt, tools) or a message, its bytes (cache_control markers
// left out: they move with the newest message) and tokens.
type piece struct {
	sum    string
	tokens int
}

// Memo counts through a Counter, remembering the count of every text it
// saw, and what it read of every message: a conversation resends its
// history on every request.
type Memo struct {
	C    Counter
	mu   sync.Mutex
	m    map[string]int
	msgs map[string]*parsed
}

// parsed is what the replay reads of one message (or of a request's head).
type parsed struct {
	sum     string // its bytes, cache_control markers left out
	tokens  int
	results []result
}

// CountText implements Counter.
func (m *Memo) CountText(s string) int {
	m.mu.Lock()
	n, ok := m.m[s]
	m.mu.Unlock()
	if ok {
		return n
	}
	n = m.C.CountText(s)
	m.mu.Lock()
	if m.m == nil {
		m.m = map[string]int{}
	}
	m.m[s] = n
	m.mu.Unlock()
	return n
}

// layout splits a request into its pieces, with its tool results. It
// reads the request's structure with the one JSON scanner, and each
// message once: a Memo remembers what it read of the messages it saw.
func layout(body []byte, count Counter) ([]piece, []result, error) {
	top, _, err := jsonscan.ObjectAt(body, jsonscan.SkipSpace(body, 0))
	if err != nil {
		return nil, nil, fmt.Errorf("the forwarded request is not a JSON object: %w", err)
	}
	var system, tools []byte
	var msgs []jsonscan.Span
	for _, m := range top {
		v := body[m.Value.Start:m.Value.End]
		switch m.Key {
		case "system":
			system = v
		case "tools":
			tools = v
		case "messages":
			if msgs, _, err = jsonscan.ArrayAt(body[:m.Value.End], m.Value.Start); err != nil {
				return nil, nil, fmt.Errorf("messages: %w", err)
			}
		}
	}
	head := readPiece(count, append(append([]byte("h"), system...), tools...), func() (int, []result) {
		return count.CountText(textOf(system)) + count.CountText(string(tools)), nil
	})
	ps := []piece{{sum: head.sum, tokens: head.tokens}}
	var rs []result
	for _, sp := range msgs {
		raw := body[sp.Start:sp.End]
		p := readPiece(count, raw, func() (int, []result) {
			return count.CountText(textOf(raw)), results([]byte(`{"messages":[` + string(raw) + `]}`))
		})
		ps = append(ps, piece{sum: p.sum, tokens: p.tokens})
		rs = append(rs, p.results...)
	}
	return ps, rs, nil
}

// readPiece reads one piece through read, or from the Memo.
func readPiece(count Counter, raw []byte, read func() (int, []result)) *parsed {
	m, ok := count.(*Memo)
	if ok {
		m.mu.Lock()
		p := m.msgs[string(raw)]
		m.mu.Unlock()
		if p != nil {
			return p
		}
	}
	n, rs := read()
	p := &parsed{sum: string(stripCache(raw)), tokens: n, results: rs}
	if ok {
		m.mu.Lock()
		if m.msgs == nil {
			m.msgs = map[string]*parsed{}
		}
		m.msgs[string(raw)] = p
		m.mu.Unlock()
	}
	return p
}

var reCache = regexp.MustCompile(`,?"cache_control":\{[^}]*\}`)

func stripCache(b []byte) []byte { return reCache.ReplaceAll(b, nil) }

// textOf is every string of a JSON value that a model reads (ids, types
// and signatures left out), as the model front counts a conversation.
func textOf(raw json.RawMessage) string {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return string(raw)
	}
	var sb strings.Builder
	var walk func(k string, v any)
	walk = func(k string, v any) {
		switch x := v.(type) {
		case string:
			switch k {
			case "type", "role", "id", "tool_use_id", "signature":
				return
			}
			sb.WriteString(x)
			sb.WriteByte('\n')
		case []any:
			for _, e := range x {
				walk(k, e)
			}
		case map[string]any:
			keys := make([]string, 0, len(x))
			for kk := range x {
				keys = append(keys, kk)
			}
			sort.Strings(keys)
			for _, kk := range keys {
				e := x[kk]
				if kk == "input" {
					b, _ := json.Marshal(e)
					sb.Write(b)
					sb.WriteByte('\n')
					continue
				}
				walk(kk, e)
			}
		}
	}
	walk("", v)
	return sb.String()
}

// heldTokens is the tokens of the pieces cur shares with prev from the
// start, and whether all of prev is among them.
func heldTokens(prev, cur []piece) (int, bool) {
	held := 0
	for i, p := range cur {
		if i >= len(prev) || prev[i].sum != p.sum {
			return held, false
		}
		held += p.tokens
		if i == len(prev)-1 {
			return held, true
		}
	}
	return held, len(prev) <= len(cur)
}

func sumTokens(ps []piece) int {
	n := 0
	for _, p := range ps {
		n += p.tokens
	}
	return n
}

type result struct{ id, text string }

// results are the tool results of a request, in order, with their text.
func results(body []byte) []result {
	var req struct {
		Messages []struct {
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	if json.Unmarshal(body, &req) != nil {
		return nil
	}
	var out []result
	for _, m := range req.Messages {
		var blocks []struct {
			Type      string          `json:"type"`
			ToolUseID string          `json:"tool_use_id"`
			Content   json.RawMessage `json:"content"`
		}
		if json.Unmarshal(m.Content, &blocks) != nil {
			continue
		}
		for _, b := range blocks {
			if b.Type != "tool_result" {
				continue
			}
			var s string
			if json.Unmarshal(b.Content, &s) != nil {
				var parts []struct{ Text string }
				_ = json.Unmarshal(b.Content, &parts)
				var ts []string
				for _, p := range parts {
					ts = append(ts, p.Text)
				}
				s = strings.Join(ts, "\n")
			}
			out = append(out, result{b.ToolUseID, s})
		}
	}
	return out
}

var (
	reStub     = regexp.MustCompile(`^\[foldproxy: folded .* \([0-9,]+ tokens(, [a-z]+)?\); branch_recall with handle "(af~[0-9]{18})"\]$`)
	reOversize = regexp.MustCompile(`\[foldproxy\] [0-9,]+ tokens of this result were folded out here`)
)

func stubOf(text string) bool { return reStub.MatchString(text) || reOversize.MatchString(text) }

func kindOf(why string) string {
	switch {
	case strings.Contains(why, "superseded"):
		return "superseded"
	case strings.Contains(why, "repeated"):
		return "repeat"
	}
	return "stale"
}

func userText(s string) map[string]any {
	return map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": s}}}
}

// convHeader carries the conversation's name to Upstream (foldproxy
// forwards every header); ConvHeader is its name for other clients.
const convHeader = "X-Replay-Conversation"

// ConvHeader names the header that tells Upstream which conversation a
// request belongs to.
const ConvHeader = convHeader

// Upstream is the model API of a replay: it records the last body each
// conversation sent and answers every request with a short streamed
// message (the replay bills what it receives with its own Meter).
type Upstream struct {
	URL string

	mu     sync.Mutex
	bodies map[string][]byte
}

// ServeHTTP implements http.Handler.
func (u *Upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	conv := r.Header.Get(convHeader)
	if !jsonscan.Valid(body) {
		http.Error(w, `{"type":"error","error":{"type":"invalid_request_error","message":"not JSON"}}`, http.StatusBadRequest)
		return
	}
	u.mu.Lock()
	if u.bodies == nil {
		u.bodies = map[string][]byte{}
	}
	u.bodies[conv] = body
	u.mu.Unlock()
	// The usage it reports is a rough one (the replay bills what it
	// receives with its own Meter): a quarter of the bytes, uncached.
	held, total := 0, len(body)/4
	w.Header().Set("Content-Type", "text/event-stream")
	fmt.Fprintf(w, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_replay\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"claude-replay\",\"usage\":{\"input_tokens\":0,\"cache_creation_input_tokens\":%d,\"cache_read_input_tokens\":%d,\"output_tokens\":1}}}\n\n", total-held, held)
	fmt.Fprint(w, "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n")
	fmt.Fprint(w, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"ok\"}}\n\n")
	fmt.Fprint(w, "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n")
	fmt.Fprint(w, "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":1}}\n\n")
	fmt.Fprint(w, "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
}

func (u *Upstream) last(conv string) []byte {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.bodies[conv]
}

// systemJSON and toolsJSON are a Claude Code-like system prompt (about
// 2,700 tokens) and built-in tools, without foldproxy's MCP tools: the
// agent talks to foldproxy on the model wire alone.
var systemJSON, toolsJSON = buildPrompt()

func buildPrompt() ([]byte, []byte) {
	var sb strings.Builder
	sb.WriteString("You are an interactive command line agent that helps users with software engineering tasks. Use the instructions below and the tools available to you to assist the user.\n\n")
	rules := []string{
		"Be concise: answer in fewer than four lines unless the user asks for detail.",
		"Before you change code, read the surrounding code and follow its conventions, libraries and patterns.",
		"Never assume a library is available: check the project's manifest first.",
		"Run the project's tests after a change; find the test command in the README or the build files.",
		"Do not add comments unless the code is complex; never explain a change in a comment.",
		"Prefer editing existing files to creating new ones. Never create documentation files unless asked.",
		"When you run a command that changes the system, explain what it does and why first.",
		"Use the search tools to understand the codebase; run independent searches in parallel.",
		"Keep secrets out of the code, the logs and the commits.",
		"When a task has several steps, plan them and track them until each is done.",
	}
	for i := 0; i < 12; i++ {
		for j, r := range rules {
			fmt.Fprintf(&sb, "%d.%d %s\n", i+1, j+1, r)
		}
	}
	sys, _ := json.Marshal([]any{map[string]any{"type": "text", "text": sb.String(), "cache_control": map[string]any{"type": "ephemeral"}}})
	tool := func(name, desc string, props map[string]any, req ...string) map[string]any {
		return map[string]any{"name": name, "description": desc, "input_schema": map[string]any{"type": "object", "properties": props, "required": req}}
	}
	str := map[string]any{"type": "string"}
	tools, _ := json.Marshal([]any{
		tool("Bash", "Runs a bash command in a persistent shell session and returns its output.", map[string]any{"command": str, "timeout": map[string]any{"type": "number"}, "description": str}, "command"),
		tool("Read", "Reads a file from the local filesystem, with line numbers.", map[string]any{"file_path": str, "offset": map[string]any{"type": "number"}, "limit": map[string]any{"type": "number"}}, "file_path"),
		tool("Edit", "Performs exact string replacements in a file.", map[string]any{"file_path": str, "old_string": str, "new_string": str}, "file_path", "old_string", "new_string"),
		tool("Grep", "Searches file contents with a regular expression.", map[string]any{"pattern": str, "path": str, "glob": str}, "pattern"),
		tool("Glob", "Finds files by name pattern.", map[string]any{"pattern": str, "path": str}, "pattern"),
	})
	return sys, tools
}
