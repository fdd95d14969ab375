package fold

import (
	"bytes"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/foldproxy/foldproxy/policy"
)

func TestTools(t *testing.T) {
	e := newEnv(t, nil)
	tools := e.m.Tools()
	var names []string
	for _, raw := range tools {
		var def struct {
			Name        string         `json:"name"`
			Description string         `json:"description"`
			InputSchema map[string]any `json:"inputSchema"`
			Meta        map[string]any `json:"_meta"`
		}
		dec := json.NewDecoder(strings.NewReader(string(raw)))
		if err := dec.Decode(&def); err != nil {
			t.Fatalf("tool %s: %v", raw, err)
		}
		names = append(names, def.Name)
		lo := 120 // the branch tools say when to use them and what they cost
		if !slices.Contains(ToolNames(), def.Name) {
			lo = 30
		}
		if n := len(def.Description); n > 600 || n < lo {
			t.Errorf("%s: description of %d bytes, want %d..600: every agent loads it at every turn", def.Name, n, lo)
		}
		if def.InputSchema["type"] != "object" {
			t.Errorf("%s: schema %v", def.Name, def.InputSchema)
		}
		if slices.Contains(ToolNames(), def.Name) && def.Meta["anthropic/alwaysLoad"] != true {
			t.Errorf("%s: _meta %v", def.Name, def.Meta)
		}
	}
	if want := append(ToolNames(), ToolCheckpointSave, ToolCheckpointList, ToolCheckpointResume); !slices.Equal(names, want) {
		t.Errorf("tools: got %v, want %v", names, want)
	}
	create := string(tools[0])
	for _, want := range []string{"exploring code", "reading many files", "branch_return", "branch_id", "8192", "force-returned", "deadline", "branch_recall"} {
		if !strings.Contains(create, want) {
			t.Errorf("branch_create's description does not mention %q", want)
		}
	}
	for _, name := range names {
		if !IsTool(name) {
			t.Errorf("IsTool(%s) = false", name)
		}
	}
	if IsTool("read_file") {
		t.Errorf("IsTool(read_file) = true")
	}
}

func TestCallToolArguments(t *testing.T) {
	e := newEnv(t, nil)
	tests := []struct {
		tool string
		args string
		want string
	}{
		{ToolCreate, `[]`, "ErrInvalidArgument: branch_create: the arguments must be a JSON object, got an array"},
		{ToolCreate, `{"description":`, "ErrInvalidArgument: branch_create: the arguments are not valid JSON"},
		{ToolCreate, `{}`, `ErrInvalidArgument: branch_create: field "description" is required`},
		{ToolCreate, `{"description":"x","bugdet":5}`, `ErrInvalidArgument: branch_create: unknown field "bugdet"; the fields are description, prompt, budget, timeout_seconds, parent_branch_id, parent_id, depends_on, inject_memories, session_id`},
		{ToolCreate, `{"description":"x","session_id":"s2"}`, `ErrInvalidArgument: branch_create: session_id "s2" is not this session ("s1")`},
		{ToolCreate, `{"description":"x","parent_id":"a","parent_branch_id":"b"}`, `parent_id "a" and parent_branch_id "b" differ`},
		{ToolCreate, `{"description":"x","parent_id":"nope"}`, `ErrBranchNotFound: parent_branch_id "nope" is not a branch of this session`},
		{ToolCreate, `{"description":"x","inject_memories":"yes"}`, `field "inject_memories": want a boolean, got a string`},
		{ToolReturn, `{"message":"x","extract_memory":1}`, `field "extract_memory": want a boolean, got a number`},
		{ToolStatus, `{"session_id":"other"}`, `session_id "other" is not this session`},
		{ToolRecall, `{"handle":"h","session_id":"other"}`, `session_id "other" is not this session`},
		{ToolCreate, `{"description":5}`, `ErrInvalidArgument: branch_create: field "description": want a string, got a number`},
		{ToolCreate, `{"description":"x","budget":"100"}`, `field "budget": want an integer, got a string`},
		{ToolCreate, `{"description":"x","budget":1.5}`, `field "budget": want an integer, got 1.5`},
		{ToolCreate, `{"description":"x","budget":1e12}`, `field "budget": 1e12 is out of range`},
		{ToolCreate, `{"description":"x","timeout_seconds":true}`, `field "timeout_seconds": want a number, got a boolean`},
		{ToolCreate, `{"description":"x","depends_on":"b-1"}`, `field "depends_on": want an array of branch ids, got a string`},
		{ToolCreate, `{"description":"x","depends_on":[1]}`, `field "depends_on": item 0: want a string, got a number`},
		{ToolCreate, `{"description":"x","parent_branch_id":{}}`, `field "parent_branch_id": want a string, got an object`},
		{ToolCreate, `{"description":"x","parent_branch_id":"` + strings.Repeat("b", 300) + `"}`, `field "parent_branch_id": 300 bytes is too long for an id`},
		{ToolReturn, `{"msg":"x"}`, `unknown field "msg"`},
		{ToolReturn, `{"message":["x"]}`, `field "message": want a string, got an array`},
		{ToolReturn, `{"message":"x","return_value":{"a":1}}`, `ErrBranchNotFound`}, // any JSON is a valid return value
		{ToolStatus, `{"detailed":"yes"}`, `field "detailed": want a boolean, got a string`},
		{ToolStatus, `"x"`, "the arguments must be a JSON object, got a string"},
		{ToolRecall, `{"handle":"h","offset":"0"}`, `field "offset": want an integer, got a string`},
	}
	for _, tt := range tests {
		t.Run(tt.tool+" "+tt.args, func(t *testing.T) {
			out, err := e.m.CallTool(t.Context(), "s1", tt.tool, json.RawMessage(tt.args))
			if err != nil {
				t.Fatalf("Go error: %v", err)
			}
			var res struct {
				IsError bool `json:"isError"`
				Content []struct{ Text string }
			}
			if err := json.Unmarshal(out, &res); err != nil {
				t.Fatal(err)
			}
			if !res.IsError || !strings.Contains(res.Content[0].Text, tt.want) {
				t.Fatalf("got %s, want a tool error containing %q", out, tt.want)
			}
		})
	}

	// A structured return value arrives as compact JSON.
	_, text, ok := e.call(t, "s1", ToolCreate, map[string]any{"description": "structured"})
	if !ok {
		t.Fatalf("create: %s", text)
	}
	if _, text, ok := e.call(t, "s1", ToolReturn, map[string]any{"message": "done", "return_value": map[string]any{"files": []int{1, 2}}}); !ok || !strings.Contains(text, `"return_value":{"files":[1,2]}`) {
		t.Errorf("structured return value: ok=%v %s", ok, text)
	}
	// The seeds' names: session_id of the caller's own session, parent_id,
	// and the memory flags, reported unavailable without memories.
	ans := e.mustCall(t, "s1", ToolCreate, map[string]any{"description": "seed", "session_id": "s1", "parent_id": RootID("s1"), "inject_memories": true})
	if ans["memory"] != "unavailable" || ans["depth"] != float64(1) {
		t.Errorf("create with the seeds' arguments: %v", ans)
	}
	ans = e.mustCall(t, "s1", ToolReturn, map[string]any{"message": "done", "return_value": "text", "extract_memory": true, "session_id": "s1"})
	if ans["memory"] != "unavailable" || ans["return_value"] != "text" || ans["memory_queued"] != nil {
		t.Errorf("return with the seeds' arguments: %v", ans)
	}

	// Nulls are absent fields, and null arguments an empty object.
	if _, text, ok := e.call(t, "s1", ToolCreate, map[string]any{"description": "x", "budget": nil, "prompt": nil}); !ok {
		t.Errorf("nulls: %s", text)
	}
	if out, err := e.m.CallTool(t.Context(), "s1", ToolStatus, nil); err != nil || strings.Contains(string(out), "isError") {
		t.Errorf("status without arguments: %s, %v", out, err)
	}
	// An unknown tool is the caller's mistake: a Go error.
	if _, err := e.m.CallTool(t.Context(), "s1", "branch_delete", nil); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("unknown tool: got %v", err)
	}
}

func TestCallToolResultShape(t *testing.T) {
	e := newEnv(t, func(f *policy.Fold) { f.RootBudget = 1000 })
	out, err := e.m.CallTool(t.Context(), "s1", ToolCreate, json.RawMessage(`{"description":"<a & b>"}`))
	if err != nil {
		t.Fatal(err)
	}
	// One compact JSON text block and nothing else: no structuredContent
	// copy, no instructions, nothing empty.
	var res map[string]json.RawMessage
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatal(err)
	}
	if len(res) != 1 || res["content"] == nil {
		t.Fatalf("result %s: want only content", out)
	}
	var content []textContent
	if err := json.Unmarshal(res["content"], &content); err != nil || len(content) != 1 || content[0].Type != "text" {
		t.Fatalf("content %s", res["content"])
	}
	var ans map[string]any
	if err := json.Unmarshal([]byte(content[0].Text), &ans); err != nil {
		t.Fatalf("text is not JSON: %v", err)
	}
	var buf bytes.Buffer
	if json.Compact(&buf, []byte(content[0].Text)); buf.String() != content[0].Text {
		t.Errorf("text is not compact: %s", content[0].Text)
	}
	keys := slices.Sorted(maps.Keys(ans))
	if want := []string{"branch_id", "budget", "depth", "parent_remaining", "seal", "timeout_seconds"}; !slices.Equal(keys, want) {
		t.Errorf("answer keys %v, want %v", keys, want)
	}
	// The root paid for the answer, and the answer says what it has left
	// after paying.
	root := e.branch(t, RootID("s1"))
	if n := e.m.count.CountText(content[0].Text); root.Used != n || ans["parent_remaining"] != float64(1000-n) {
		t.Errorf("root used %d, answer says %v left; the answer is %d tokens", root.Used, ans["parent_remaining"], n)
	}
}

// FuzzCallToolArgs feeds arbitrary arguments to every fold tool: CallTool
// never panics nor fails with a Go error, always answers with a well-formed
// CallToolResult, and an unknown field is refused by name.
func FuzzCallToolArgs(f *testing.F) {
	seeds := []string{
		`{}`, `null`, `[]`, `"x"`, `1`, `{"description":"x"}`, `{"description":"x","budget":100,"timeout_seconds":5}`,
		`{"description":"x","depends_on":["a","b"]}`, `{"message":"done","return_value":"v"}`, `{"branch_id":"root-s1","detailed":true}`,
		`{"handle":"b-1~00","offset":3,"max_tokens":2}`, `{"branch_id":"b-1","offset":1}`, `{"description":"\u0000\u001b"}`,
		`{"description":"x","budget":-1e308}`, `{"description":"x","timeout_seconds":1e400}`, `{"zzz":1}`, `{"description":"x","description":5}`,
	}
	for i, s := range seeds {
		f.Add(uint8(i), []byte(s))
	}
	e := newEnv(f, nil)
	f.Fuzz(func(t *testing.T, which uint8, args []byte) {
		tool := ToolNames()[int(which)%len(ToolNames())]
		out, err := e.m.CallTool(t.Context(), "s1", tool, args)
		if err != nil {
			t.Fatalf("%s(%q): Go error %v", tool, args, err)
		}
		var res struct {
			IsError    bool            `json:"isError"`
			Content    []textContent   `json:"content"`
			Structured json.RawMessage `json:"structuredContent"`
		}
		if err := json.Unmarshal(out, &res); err != nil || len(res.Content) != 1 {
			t.Fatalf("%s(%q): malformed result %s (%v)", tool, args, out, err)
		}
		if res.IsError {
			if !strings.HasPrefix(res.Content[0].Text, "Err") {
				t.Fatalf("%s(%q): refusal without a sentinel: %s", tool, args, res.Content[0].Text)
			}
		} else if len(res.Structured) != 0 || !json.Valid([]byte(res.Content[0].Text)) {
			t.Fatalf("%s(%q): a success is its JSON answer as text, alone: %s", tool, args, out)
		}
		var obj map[string]json.RawMessage
		if json.Unmarshal(args, &obj) == nil {
			allowed := map[string][]string{
				ToolCreate: {"description", "prompt", "budget", "timeout_seconds", "parent_branch_id", "parent_id", "depends_on", "inject_memories", "session_id"},
				ToolReturn: {"branch_id", "message", "return_value", "extract_memory", "session_id"},
				ToolStatus: {"branch_id", "detailed", "offset", "session_id"},
				ToolRecall: {"handle", "branch_id", "offset", "max_tokens", "session_id"},
			}[tool]
			for k := range obj {
				if !slices.Contains(allowed, k) {
					if !res.IsError || !strings.Contains(res.Content[0].Text, "unknown field") {
						t.Fatalf("%s(%q): unknown field %q not refused: %s", tool, args, k, out)
					}
				}
			}
		}
		// Keep the session usable: return whatever the fuzzer created.
		for range 3 {
			if _, err := e.m.CallTool(t.Context(), "s1", ToolReturn, json.RawMessage(`{"message":"done"}`)); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// TestReadArgsAsUnmarshal checks the arguments' scan against
// encoding/json on names and strings that decode in unusual ways.
func TestReadArgsAsUnmarshal(t *testing.T) {
	for _, raw := range []string{
		`{"description":"plain"}`,
		` { "description" : "spaced" , "prompt" :"x" } `,
		`{"description":"esc \" \\ \/ \b\f\n\r\t \u00e9 \ud83d\ude00"}`,
		"{\"description\":\"bad utf-8 \xff\xfe end\"}",
		`{"description":"lone \ud800 surrogate"}`,
		`{"description":"first","description":"last"}`,
		`{"desc\u0072iption":"escaped name"}`,
		"{\"descr\xffiption\":\"bad name\"}",
		`{"description":null,"prompt":"p"}`,
		`{"description":"x","budget":12,"depends_on":["a","b"],"inject_memories":true}`,
	} {
		var want map[string]json.RawMessage
		if err := json.Unmarshal([]byte(raw), &want); err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
		a := &args{tool: ToolCreate, fields: map[string]json.RawMessage{}}
		if err := a.read([]byte(raw)); err != nil {
			t.Fatalf("%s: read: %v", raw, err)
		}
		if len(a.fields) != len(want) {
			t.Errorf("%s: fields %v, json.Unmarshal %v", raw, a.fields, want)
		}
		for k, v := range want {
			if string(a.fields[k]) != string(v) {
				t.Errorf("%s: field %q = %s, json.Unmarshal %s", raw, k, a.fields[k], v)
			}
			var s string
			if string(v) == "null" || json.Unmarshal(v, &s) != nil {
				continue // readArgs drops nulls; str refuses other kinds
			}
			if got, err := a.str(k, false); err != nil || got != s {
				t.Errorf("%s: str(%q) = %q, %v; json.Unmarshal %q", raw, k, got, err, s)
			}
		}
	}
	// Invalid JSON is refused with encoding/json's own words.
	_, err := readArgs(ToolCreate, json.RawMessage(`{"description":"x",}`), "description")
	if err == nil || !strings.Contains(err.Error(), "the arguments are not valid JSON: invalid character '}'") {
		t.Errorf("invalid JSON: %v", err)
	}
}
