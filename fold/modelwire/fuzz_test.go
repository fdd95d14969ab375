package modelwire

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// script is an abstract conversation that renders to every dialect:
// a user prompt, then turns of tool calls and their results.
type script struct {
	turns    []sturn
	branches []Branch
}

type scall struct {
	id, name, input, result string
	isErr                   bool
}

type sturn struct {
	thinking bool
	calls    []scall
	system   bool   // a mid-conversation system message after the results (Anthropic)
	userText string // text after the results in the same user message (Anthropic) / a user message
	cache    bool   // cache_control on the last block of the user message
}

// genScript builds a valid conversation from fuzz bytes: branch_create and
// branch_return calls (nested, parallel with other calls), tools of every
// kind, errors, system messages and cache breakpoints, and fold states
// (open, closed, budgets) for its branches.
func genScript(data []byte) script {
	next := func() int {
		if len(data) == 0 {
			return 0
		}
		b := data[0]
		data = data[1:]
		return int(b)
	}
	var s script
	var stack []string
	nb, nc := 0, 0
	nTurns := 1 + next()%12
	for t := 0; t < nTurns; t++ {
		var tr sturn
		tr.thinking = next()%2 == 0
		n := 1 + next()%3
		for c := 0; c < n; c++ {
			nc++
			id := fmt.Sprintf("call_%d", nc)
			k := next() % 8
			switch {
			case k == 0 || (k == 1 && len(stack) < 3):
				nb++
				bid := fmt.Sprintf("b-%04d", nb)
				stack = append(stack, bid)
				st := next()
				s.branches = append(s.branches, Branch{ID: bid, Closed: st%3 == 0, Budget: []int{0, 50, 400, 5000}[st%4], Summary: "SUMMARY of " + bid})
				tr.calls = append(tr.calls, scall{id: id, name: "mcp__foldproxy__branch_create", input: `{"description":"d"}`, result: createAnswer(bid)})
			case k == 2 && len(stack) > 0:
				bid := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				tr.calls = append(tr.calls, scall{id: id, name: "mcp__foldproxy__branch_return", input: `{"message":"m"}`, result: returnAnswer(bid, "done "+bid)})
			default:
				name := []string{"Read", "Bash", "Grep", "mcp__srv__tool"}[next()%4]
				size := next() * 7
				arg := next() % 3
				input := fmt.Sprintf(`{"arg":%d}`, arg)
				switch name {
				case "Read": // reads of a few files: later ones supersede earlier
					input = fmt.Sprintf(`{"file_path":"/repo/f%d.py"}`, arg)
				case "Bash": // runs of a few commands: the same
					input = fmt.Sprintf(`{"command":"make test%d"}`, arg)
				}
				result := "OUT-" + id + " " + strings.Repeat("x ", size)
				if size%3 == 0 { // the same output again, byte for byte
					result = "SAME " + strings.Repeat("y ", 300)
				}
				tr.calls = append(tr.calls, scall{id: id, name: name, input: input, result: result, isErr: next()%5 == 0})
			}
		}
		x := next()
		tr.system = x%4 == 0
		if x%3 == 0 {
			tr.userText = "more please"
		}
		tr.cache = t == nTurns-1
		s.turns = append(s.turns, tr)
	}
	return s
}

func (s script) render(d Dialect) []byte {
	var msgs []any
	obj := func(kv ...any) map[string]any {
		m := map[string]any{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}
	switch d {
	case Anthropic:
		msgs = append(msgs, obj("role", "user", "content", "start"))
		for _, t := range s.turns {
			var ab, ub []any
			if t.thinking {
				ab = append(ab, obj("type", "thinking", "thinking", "hmm", "signature", "sig"))
			}
			for _, c := range t.calls {
				ab = append(ab, obj("type", "tool_use", "id", c.id, "name", c.name, "input", json.RawMessage(c.input)))
				r := obj("type", "tool_result", "tool_use_id", c.id, "content", []any{obj("type", "text", "text", c.result)})
				if c.isErr {
					r["is_error"] = true
				}
				ub = append(ub, r)
			}
			if t.userText != "" {
				ub = append(ub, obj("type", "text", "text", t.userText))
			}
			if t.cache {
				ub[len(ub)-1].(map[string]any)["cache_control"] = obj("type", "ephemeral")
			}
			msgs = append(msgs, obj("role", "assistant", "content", ab), obj("role", "user", "content", ub))
			if t.system {
				msgs = append(msgs, obj("role", "system", "content", "note"))
			}
		}
		b, _ := json.Marshal(obj("model", "m", "system", []any{obj("type", "text", "text", "sys", "cache_control", obj("type", "ephemeral"))},
			"tools", []any{obj("name", "mcp__foldproxy__branch_create")}, "messages", msgs))
		return b
	case OpenAIChat:
		msgs = append(msgs, obj("role", "system", "content", "sys"), obj("role", "user", "content", "start"))
		for _, t := range s.turns {
			var tcs []any
			for _, c := range t.calls {
				tcs = append(tcs, obj("id", c.id, "type", "function", "function", obj("name", c.name, "arguments", c.input)))
			}
			msgs = append(msgs, obj("role", "assistant", "content", nil, "tool_calls", tcs))
			for _, c := range t.calls {
				msgs = append(msgs, obj("role", "tool", "tool_call_id", c.id, "content", c.result))
			}
			if t.userText != "" {
				msgs = append(msgs, obj("role", "user", "content", t.userText))
			}
		}
		b, _ := json.Marshal(obj("model", "m", "messages", msgs, "tools", []any{obj("type", "function", "function", obj("name", "foldproxy_branch_create"))}))
		return b
	default:
		msgs = append(msgs, obj("type", "message", "role", "user", "content", []any{obj("type", "input_text", "text", "start")}))
		for _, t := range s.turns {
			if t.thinking {
				msgs = append(msgs, obj("type", "reasoning", "summary", []any{}, "encrypted_content", "enc"))
			}
			for _, c := range t.calls {
				msgs = append(msgs, obj("type", "function_call", "call_id", c.id, "name", c.name, "arguments", c.input))
			}
			for _, c := range t.calls {
				msgs = append(msgs, obj("type", "function_call_output", "call_id", c.id, "output", c.result))
			}
			if t.userText != "" {
				msgs = append(msgs, obj("type", "message", "role", "user", "content", []any{obj("type", "input_text", "text", t.userText)}))
			}
		}
		b, _ := json.Marshal(obj("model", "m", "instructions", "sys", "input", msgs, "tools", []any{obj("type", "function", "name", "foldproxy_branch_create")}))
		return b
	}
}

// FuzzFoldValid: the fold of a valid request is a valid request, in every
// dialect, for generated conversations with branches in any state, and it
// is deterministic.
func FuzzFoldValid(f *testing.F) {
	for _, seed := range []string{"", "\x00\x01\x00\x00\x02", "\x05\x00\x02\x00\x00\x03\x01\x00\x09\x02\x02\x01\x00\x02\x02\x02",
		"\x0b\x01\x02\x00\x03\x00\x01\x01\x00\x30\x01\x00\x02\x02\x00\x02\x02\x01\x02\x00\x00\x02\x01\x00"} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s := genScript(data)
		for _, d := range []Dialect{Anthropic, OpenAIChat, OpenAIResponses} {
			body := s.render(d)
			if err := Check(d, body); err != nil {
				t.Fatalf("%s: generated request invalid: %v\n%s", d, err, body)
			}
			st := newFakeState(s.branches...)
			res, err := Apply(context.Background(), d, body, st, Options{Guidance: Guidance{AfterTokens: 100}})
			if err != nil {
				t.Fatalf("%s: Apply: %v", d, err)
			}
			if err := Check(d, res.Body); err != nil {
				t.Fatalf("%s: folded request invalid: %v\nin:  %s\nout: %s", d, err, body, res.Body)
			}
			again, err := Apply(context.Background(), d, body, st, Options{Guidance: Guidance{AfterTokens: 100}})
			if err != nil || string(again.Body) != string(res.Body) {
				// A cut closes its branch: the resend keeps the cut (the
				// span ends at the newest message) or, with later
				// messages, folds it. Both must be valid.
				if err == nil {
					err = Check(d, again.Body)
				}
				if err != nil {
					t.Fatalf("%s: second Apply: %v", d, err)
				}
			}
			for _, f := range res.Folded {
				if !strings.Contains(string(res.Body), "SUMMARY of "+f) {
					t.Fatalf("%s: folded %s without its summary", d, f)
				}
			}
		}
	})
}

// FuzzApplyRaw: any bytes are refused or folded into a valid request when
// they were one; never a panic.
func FuzzApplyRaw(f *testing.F) {
	dirs, _ := filepath.Glob("testdata/golden/*/request.json")
	for _, p := range dirs {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(`{"messages":[{"role":"user","content":"hi"}]}`))
	// The shapes whose text is read besides text parts (shapes.go).
	f.Add([]byte(`{"messages":[{"role":"user","content":[{"type":"text","text":"AKIAIOSFOD"},{"type":"text","text":"NN7EXAMPLE"},{"type":"document","source":{"type":"text","data":"d"}}]},{"role":"assistant","content":[{"type":"mcp_tool_use","id":"m","name":"n","input":{}},{"type":"mcp_tool_result","tool_use_id":"m","content":[{"type":"text","text":"AKIAIOSFODNN7EXAMPLE"}]}]}]}`))
	f.Add([]byte(`{"messages":[{"role":"user","content":"go"},{"role":"assistant","content":null,"function_call":{"name":"f","arguments":"{}"}},{"role":"function","name":"f","content":"x"}]}`))
	f.Add([]byte(`{"input":[{"type":"message","role":"user","content":"go"},{"type":"shell_call_output","call_id":"s","output":[{"stdout":"AKIAIOSFODNN7EXAMPLE","stderr":""}]},{"type":"local_shell_call_output","id":"l","output":"o"}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, d := range []Dialect{Anthropic, OpenAIChat, OpenAIResponses} {
			valid := Check(d, body) == nil
			for _, opt := range []Options{{}, {Scrub: testScrub, ScrubAcross: splitScrub}} {
				st := newFakeState(Branch{ID: "b-7f3a9c01d2e4b5a6", Closed: true, Summary: "S"}, Branch{ID: "b-0a1b2c3d4e5f6071", Budget: 10},
					Branch{ID: "b-99887766554433aa", Closed: true})
				res, err := Apply(context.Background(), d, body, st, opt)
				if err != nil {
					continue
				}
				if valid {
					if err := Check(d, res.Body); err != nil {
						t.Fatalf("%s: valid in, invalid out: %v\nin:  %s\nout: %s", d, err, body, res.Body)
					}
				}
			}
		}
	})
}

// TestGeneratedConversations runs the fuzz property over a fixed set of
// pseudo-random conversations and checks that they exercise folding,
// nesting and cuts in every dialect.
func TestGeneratedConversations(t *testing.T) {
	rnd := xorshift(42)
	folds := map[Dialect]int{}
	cuts := map[Dialect]int{}
	reminders := map[Dialect]int{}
	ends := map[Dialect]int{} // closures shown through Ender
	for i := 0; i < 300; i++ {
		data := make([]byte, 64)
		for j := range data {
			data[j] = rnd()
		}
		s := genScript(data)
		for _, d := range []Dialect{Anthropic, OpenAIChat, OpenAIResponses} {
			body := s.render(d)
			res := mustApply(t, d, body, newFakeState(s.branches...), Options{Guidance: Guidance{AfterTokens: 300}})
			folds[d] += len(res.Folded)
			ends[d] += strings.Count(string(res.Body), "END of b-")
			cuts[d] += res.Cut
			reminders[d] += res.Reminders
		}
	}
	for _, d := range []Dialect{Anthropic, OpenAIChat, OpenAIResponses} {
		if folds[d] < 30 || cuts[d] < 20 || reminders[d] < 20 || ends[d] < 5 {
			t.Errorf("%s: %d folds, %d cuts, %d reminders, %d end notices over 300 conversations: the generator does not exercise the fold", d, folds[d], cuts[d], reminders[d], ends[d])
		}
	}
	t.Logf("folds %v cuts %v reminders %v end notices %v", folds, cuts, reminders, ends)
}
