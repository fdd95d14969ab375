package modelwire

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
)

// folderState is a fakeState that keeps automatic folds, as fold's
// Manager does: records by key, archived texts by handle.
type folderState struct {
	*fakeState
	recs    map[string]FoldRecord // "on" records by key
	obs     map[string]FoldRecord // observe records by key
	archive map[string]string
	writes  int
}

func newFolder(bs ...Branch) *folderState {
	return &folderState{fakeState: newFakeState(bs...), recs: map[string]FoldRecord{}, obs: map[string]FoldRecord{}, archive: map[string]string{}}
}

func (s *folderState) FoldHandle(id, text string) string {
	sum := sha256.Sum256([]byte("k\x00" + id + "\x00" + text))
	return fmt.Sprintf("af~%018d", binary.BigEndian.Uint64(sum[:8])%1e18)
}

func (s *folderState) Folds(_ context.Context, observe bool, keys []string) (map[string]FoldRecord, error) {
	src := s.recs
	if observe {
		src = s.obs
	}
	out := map[string]FoldRecord{}
	for _, k := range keys {
		if r, ok := src[k]; ok {
			out[k] = r
		}
	}
	return out, nil
}

func (s *folderState) RecordFolds(_ context.Context, observe bool, recs []FoldRecord, texts []string) error {
	s.writes++
	dst := s.recs
	if observe {
		dst = s.obs
	}
	for i, r := range recs {
		k := r.Handle
		if r.Kind != FoldOversized {
			k = foldKey(r.Handle)
		}
		if _, dup := dst[k]; dup {
			return fmt.Errorf("fold %s recorded twice", k)
		}
		dst[k] = r
		if !observe {
			s.archive[r.Handle] = texts[i]
		}
	}
	return nil
}

func (s *folderState) RecallFold(_ context.Context, handle string, offset, maxTokens int) (string, error) {
	t, ok := s.archive[handle]
	if !ok {
		return "", fmt.Errorf("handle %q is unknown", handle)
	}
	if offset > len(t) {
		return "", fmt.Errorf("offset %d past the end", offset)
	}
	b, _ := json.Marshal(map[string]any{"handle": handle, "offset": offset, "text": t[offset:]})
	return string(b), nil
}

// growing plays a conversation of Bash calls as Claude Code grows it: one
// request per turn, each with the whole history.
type growing struct {
	msgs  []aMsg
	tools []any
}

func newGrowing(withRecall bool) *growing {
	g := &growing{msgs: []aMsg{userText("Fix the bug.")}}
	g.tools = []any{map[string]any{"name": "Bash", "input_schema": map[string]any{"type": "object"}}}
	if withRecall {
		g.tools = append(g.tools, map[string]any{"name": "mcp__foldproxy__branch_recall", "input_schema": map[string]any{"type": "object"}})
	}
	return g
}

func (g *growing) call(id, name string, input map[string]any, out string) {
	g.msgs = append(g.msgs, assistant(toolUse(id, name, input)), user(toolResult(id, out, false)))
}

// body renders the request with its messages last, as clients do, so that
// a request's prefix is the one before it.
func (g *growing) body(t testing.TB) []byte {
	t.Helper()
	tools, err := json.Marshal(g.tools)
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := json.Marshal(g.msgs)
	if err != nil {
		t.Fatal(err)
	}
	return []byte(`{"model":"m","max_tokens":100,"system":"sys","tools":` + string(tools) + `,"messages":` + string(msgs) + `}`)
}

// output is a tool output of about n tokens (4 bytes a token), distinct
// per seed.
func output(seed string, n int) string {
	var b strings.Builder
	for i := 0; b.Len() < n*4; i++ {
		fmt.Fprintf(&b, "%s line %04d: some output\n", seed, i)
	}
	return b.String()[:n*4]
}

var reStub = regexp.MustCompile(`\[foldproxy: folded [^"]*"[^"]*" \(([0-9,]+) tokens[^)]*\); branch_recall with handle \\"(af~[0-9]{18})\\"\]`)

func onOpts() Options { return Options{AutoFold: AutoFold{Mode: ModeOn}} }

// TestAutoFoldFrozenBatches plays a growing conversation and holds every
// request to the fold contract: valid, the folded set only grows, a fold
// keeps its bytes, and the first byte that differs from the request before
// moves only when a batch is folded.
func TestAutoFoldFrozenBatches(t *testing.T) {
	st := newFolder()
	g := newGrowing(true)
	var prev []byte
	stubs := map[string]string{} // tool-use id -> stub bytes
	batches, moves := 0, 0
	for i := 1; i <= 40; i++ {
		g.call(fmt.Sprintf("toolu_%03d", i), "Bash", map[string]any{"command": fmt.Sprintf("grep -rn thing%d src/", i)}, output(fmt.Sprintf("o%d", i), 400))
		res := mustApply(t, Anthropic, g.body(t), st, onOpts())
		for _, r := range res.AutoFold.New {
			if r.Kind != FoldStale {
				t.Errorf("request %d: fold of %s is %s, want stale", i, r.ToolUseID, r.Kind)
			}
			if r.Anchor != fmt.Sprintf("toolu_%03d", i) {
				t.Errorf("request %d: anchor %s", i, r.Anchor)
			}
		}
		if len(res.AutoFold.New) > 0 {
			batches++
		}
		// Every earlier stub is there, byte for byte.
		for id, s := range stubs {
			if !bytes.Contains(res.Body, []byte(s)) {
				t.Fatalf("request %d: the stub of %s is gone or changed", i, id)
			}
		}
		for _, r := range res.AutoFold.New {
			q, _ := json.Marshal(r.Stub)
			stubs[r.ToolUseID] = string(q)
			if st.archive[r.Handle] != output(strings.TrimPrefix(r.ToolUseID, "toolu_0"), 400) && !strings.HasPrefix(st.archive[r.Handle], "o") {
				t.Errorf("archive of %s holds %q", r.Handle, st.archive[r.Handle][:20])
			}
		}
		if res.AutoFold.Folded != len(stubs) {
			t.Errorf("request %d: %d folded, %d stubs recorded", i, res.AutoFold.Folded, len(stubs))
		}
		if prev != nil {
			if p := commonPrefix(prev, res.Body); p < len(prev)-2 {
				moves++
				if len(res.AutoFold.New) == 0 {
					t.Errorf("request %d: the prefix moved (at %d of %d) without a new batch", i, p, len(prev))
				}
			}
		}
		prev = res.Body
	}
	if batches < 2 || batches >= len(stubs) {
		t.Errorf("%d batches for %d folds over 40 requests: want some batches of several", batches, len(stubs))
	}
	if len(stubs) < 25 {
		t.Errorf("only %d of 40 results folded", len(stubs))
	}
	t.Logf("%d batches, %d prefix moves, %d folded", batches, moves, len(stubs))
}

// TestAutoFoldKeepsNewest: the newest results and short results are never
// folded, and nothing is folded below the trigger.
func TestAutoFoldKeepsNewest(t *testing.T) {
	st := newFolder()
	g := newGrowing(true)
	for i := 1; i <= 3; i++ {
		g.call(fmt.Sprintf("t%d", i), "Bash", map[string]any{"command": fmt.Sprintf("ls %d", i)}, output(fmt.Sprintf("a%d", i), 500))
	}
	res := mustApply(t, Anthropic, g.body(t), st, onOpts())
	if len(res.AutoFold.New) != 0 {
		t.Fatalf("1,500 tokens of results (under the trigger) folded %d", len(res.AutoFold.New))
	}
	for i := 4; i <= 30; i++ {
		g.call(fmt.Sprintf("t%d", i), "Bash", map[string]any{"command": fmt.Sprintf("ls %d", i)}, output(fmt.Sprintf("a%d", i), 500))
		g.call(fmt.Sprintf("s%d", i), "Bash", map[string]any{"command": "pwd"}, "/repo")
	}
	res = mustApply(t, Anthropic, g.body(t), st, onOpts())
	if res.AutoFold.Folded == 0 {
		t.Fatal("nothing folded")
	}
	for _, id := range []string{"t30", "s30", "t29"} {
		if st.recs[foldKey(st.FoldHandle(id, output(id[1:], 500)))].ToolUseID != "" {
			t.Errorf("newest result %s folded", id)
		}
	}
	for k, r := range st.recs {
		if strings.HasPrefix(r.ToolUseID, "s") {
			t.Errorf("short result %s folded (%s)", r.ToolUseID, k)
		}
	}
}

// TestAutoFoldSupersededAndRepeats: an earlier read of a file read again,
// an earlier run of a command run again, and an output repeated byte for
// byte are folded, with their kinds, even inside the keep window.
func TestAutoFoldSupersededAndRepeats(t *testing.T) {
	st := newFolder()
	g := newGrowing(true)
	big := output("file", 900)
	g.call("r1", "Read", map[string]any{"file_path": "/repo/a.py"}, big)
	g.call("b1", "Bash", map[string]any{"command": "python -m pytest tests/"}, output("run1", 900))
	g.call("c1", "Bash", map[string]any{"command": "cat /repo/b.py"}, output("b", 900))
	g.call("x1", "Bash", map[string]any{"command": "git diff"}, output("diff", 900))
	for i := 0; i < 6; i++ {
		g.call(fmt.Sprintf("f%d", i), "Bash", map[string]any{"command": fmt.Sprintf("echo %d", i)}, fmt.Sprintf("%d", i))
	}
	g.call("r2", "Read", map[string]any{"file_path": "/repo/a.py"}, big+"changed")
	g.call("b2", "Bash", map[string]any{"command": "python -m pytest tests/"}, output("run2", 900))
	g.call("c2", "Read", map[string]any{"file_path": "/repo/b.py", "offset": 1}, output("b-part", 300))
	g.call("x2", "Bash", map[string]any{"command": "git diff HEAD"}, output("diff", 900))
	g.call("last", "Bash", map[string]any{"command": "ls"}, "a.py b.py")
	opt := Options{AutoFold: AutoFold{Mode: ModeOn, Trigger: 100000, MinRequests: 50}}
	res := mustApply(t, Anthropic, g.body(t), st, opt)
	kinds := map[string]string{}
	for _, r := range res.AutoFold.New {
		kinds[r.ToolUseID] = r.Kind
	}
	want := map[string]string{"r1": FoldSuperseded, "b1": FoldSuperseded, "x1": FoldRepeat}
	for id, k := range want {
		if kinds[id] != k {
			t.Errorf("%s: kind %q, want %q (all: %v)", id, kinds[id], k, kinds)
		}
	}
	for _, id := range []string{"c1", "r2", "b2", "c2", "x2", "last"} {
		if kinds[id] != "" {
			t.Errorf("%s folded as %s: a partial read supersedes nothing, and the newest stay", id, kinds[id])
		}
	}
}

// TestAutoFoldWeighsTheCache: a superseded result far back is folded only
// when what it saves over the later requests pays for the cache it
// rewrites.
func TestAutoFoldWeighsTheCache(t *testing.T) {
	g := newGrowing(true)
	g.call("r1", "Read", map[string]any{"file_path": "/a"}, output("a", 300))
	for i := 0; i < 40; i++ {
		g.call(fmt.Sprintf("e%d", i), "Bash", map[string]any{"command": fmt.Sprintf("echo %d", i)}, output(fmt.Sprintf("e%d", i), 120))
	}
	g.call("r2", "Read", map[string]any{"file_path": "/a"}, output("a2", 300))
	g.call("z", "Bash", map[string]any{"command": "true"}, "ok")
	// Stale folding off (trigger out of reach): the old read alone saves
	// too little for a rewrite of 40 turns.
	st := newFolder()
	res := mustApply(t, Anthropic, g.body(t), st, Options{AutoFold: AutoFold{Mode: ModeOn, Trigger: 1 << 30, MinBatch: 1}})
	if len(res.AutoFold.New) != 0 {
		t.Fatalf("folded %v: 300 tokens do not pay for rewriting %d tokens", res.AutoFold.New, res.TokensBefore)
	}
	// With writes as cheap as reads, any saving pays.
	res = mustApply(t, Anthropic, g.body(t), st, Options{AutoFold: AutoFold{Mode: ModeOn, Trigger: 1 << 30, MinBatch: 1, WritePrice: 0.1000001}})
	if len(res.AutoFold.New) != 1 || res.AutoFold.New[0].ToolUseID != "r1" {
		t.Fatalf("folded %v, want r1 alone", res.AutoFold.New)
	}
}

// TestAutoFoldOversized: a result above the threshold keeps its head and
// tail from the first request on, and the notice names the offset of the
// middle, which recall reads exactly.
func TestAutoFoldOversized(t *testing.T) {
	st := newFolder()
	g := newGrowing(false)
	big := output("big", 3000)
	g.call("o1", "Bash", map[string]any{"command": "pytest -x"}, big)
	opt := Options{AutoFold: AutoFold{Mode: ModeOn, Oversize: 1000, KeepHead: 300, KeepTail: 200}}
	res := mustApply(t, Anthropic, g.body(t), st, opt)
	if len(res.AutoFold.New) != 1 || res.AutoFold.New[0].Kind != FoldOversized {
		t.Fatalf("new folds %+v", res.AutoFold.New)
	}
	rec := res.AutoFold.New[0]
	if !strings.HasPrefix(rec.Stub, big[:1000]) || !strings.HasSuffix(rec.Stub, big[len(big)-700:]) {
		t.Fatalf("stub does not keep the head and tail:\n%s", rec.Stub)
	}
	m := regexp.MustCompile(`offset (\d+) reads them`).FindStringSubmatch(rec.Stub)
	if m == nil {
		t.Fatalf("no offset in %q", rec.Stub)
	}
	var off int
	fmt.Sscan(m[1], &off)
	if !strings.HasPrefix(big[:off]+"\n\n[foldproxy]", rec.Stub[:off+13]) {
		t.Errorf("the head is not the text before offset %d", off)
	}
	if st.archive[rec.Handle] != big {
		t.Error("the archive does not hold the whole result")
	}
	if rec.StubTokens > 300+200+80 {
		t.Errorf("stub %d tokens", rec.StubTokens)
	}
	// Repeated on the next request, byte for byte.
	g.call("o2", "Bash", map[string]any{"command": "ls"}, "x")
	again := mustApply(t, Anthropic, g.body(t), st, opt)
	q, _ := json.Marshal(rec.Stub)
	if !bytes.Contains(again.Body, q) || len(again.AutoFold.New) != 0 {
		t.Fatal("the oversize cut was not repeated as it was")
	}
}

// TestAutoFoldObserve: observe mode forwards the request byte for byte and
// says what it would have saved.
func TestAutoFoldObserve(t *testing.T) {
	st := newFolder()
	g := newGrowing(false)
	for i := 1; i <= 30; i++ {
		g.call(fmt.Sprintf("t%d", i), "Bash", map[string]any{"command": "make"}, output(fmt.Sprintf("m%d", i), 400))
		body := g.body(t)
		res := mustApply(t, Anthropic, body, st, Options{AutoFold: AutoFold{Mode: ModeObserve}})
		if !bytes.Equal(res.Body, body) || res.Changed {
			t.Fatalf("request %d: observe mode changed the request", i)
		}
		if i == 30 && (res.AutoFold.Saved == 0 || res.AutoFold.Folded == 0 || !res.AutoFold.Observe) {
			t.Fatalf("observe mode saw nothing to save: %+v", res.AutoFold)
		}
	}
	if len(st.recs) != 0 || len(st.archive) != 0 {
		t.Fatal("observe mode recorded real folds")
	}
}

// TestAutoFoldRecallTool: an agent without foldproxy's recall tool gets
// one, from the first request on; its calls are answered in place of the
// client's error, exactly and on every request.
func TestAutoFoldRecallTool(t *testing.T) {
	for _, d := range []Dialect{Anthropic, OpenAIChat, OpenAIResponses} {
		t.Run(string(d), func(t *testing.T) {
			st := newFolder()
			s := script{}
			for i := 1; i <= 25; i++ {
				s.turns = append(s.turns, sturn{calls: []scall{{id: fmt.Sprintf("c%d", i), name: "Bash", input: fmt.Sprintf(`{"command":"cat f%d"}`, i), result: output(fmt.Sprintf("f%d", i), 400)}}})
			}
			body := renderNoFoldTools(s, d)
			res := mustApply(t, d, body, st, onOpts())
			if !res.AutoFold.RecallTool || !bytes.Contains(res.Body, []byte(`"name":"branch_recall"`)) {
				t.Fatal("no recall tool added")
			}
			if len(res.AutoFold.New) == 0 {
				t.Fatal("nothing folded")
			}
			rec := res.AutoFold.New[0]
			s.turns = append(s.turns, sturn{calls: []scall{{id: "rc", name: "branch_recall", input: fmt.Sprintf(`{"handle":%q}`, rec.Handle),
				result: "<tool_use_error>Error: No such tool available: branch_recall</tool_use_error>", isErr: true}}})
			body = renderNoFoldTools(s, d)
			res = mustApply(t, d, body, st, onOpts())
			if res.AutoFold.Recalls != 1 {
				t.Fatalf("%d recalls answered", res.AutoFold.Recalls)
			}
			page := resultText(t, d, res.Body, "rc")
			var got struct{ Text string }
			if err := json.Unmarshal([]byte(page), &got); err != nil || got.Text != st.archive[rec.Handle] || got.Text != output("f"+strings.TrimPrefix(rec.ToolUseID, "c"), 400) {
				t.Fatalf("the recall answer is %q (%v), not the folded text", page, err)
			}
			if bytes.Contains(res.Body, []byte("No such tool")) {
				t.Fatal("the client's error is still there")
			}
			if d == Anthropic && bytes.Contains(res.Body, []byte(`"is_error":true`)) {
				t.Fatal("the answer is still an error")
			}
			again := mustApply(t, d, body, st, onOpts())
			if !bytes.Equal(again.Body, res.Body) {
				t.Fatal("the recall answer is not repeated byte for byte")
			}
		})
	}
}

// renderNoFoldTools renders a script with a tool list that lacks the fold
// tools.
func renderNoFoldTools(s script, d Dialect) []byte {
	b := s.render(d)
	for _, n := range []string{"mcp__foldproxy__branch_create", "foldproxy_branch_create"} {
		b = bytes.ReplaceAll(b, []byte(`"`+n+`"`), []byte(`"Bash"`))
	}
	return b
}

// TestAutoFoldStandsAside: a request the API manages itself
// (context_management) gets no new folds.
func TestAutoFoldStandsAside(t *testing.T) {
	st := newFolder()
	g := newGrowing(true)
	for i := 1; i <= 30; i++ {
		g.call(fmt.Sprintf("t%d", i), "Bash", map[string]any{"command": "make"}, output(fmt.Sprintf("m%d", i), 400))
	}
	b := g.body(t)
	b = append(b[:len(b)-1], []byte(`,"context_management":{"edits":[{"type":"clear_tool_uses_20250919"}]}}`)...)
	res := mustApply(t, Anthropic, b, st, onOpts())
	if res.AutoFold.Folded != 0 {
		t.Fatalf("%d folded under context_management", res.AutoFold.Folded)
	}
	// Claude Code's own edit clears thinking, not tool results.
	b = g.body(t)
	b = append(b[:len(b)-1], []byte(`,"context_management":{"edits":[{"type":"clear_thinking_20251015","keep":"all"}]}}`)...)
	if res := mustApply(t, Anthropic, b, st, onOpts()); res.AutoFold.Folded == 0 {
		t.Fatal("nothing folded beside Claude Code's clear_thinking edit")
	}
}

// resultText is the text of the result of call id in a request.
func resultText(t testing.TB, d Dialect, body []byte, id string) string {
	t.Helper()
	c, err := parseConv(d, body)
	if err != nil {
		t.Fatal(err)
	}
	r, _, ok := c.result(id)
	if !ok {
		t.Fatalf("no result of %s", id)
	}
	return r.text
}

// FuzzAutoFold plays generated conversations turn by turn in every dialect
// through automatic folding (with branches in any state, cuts and
// oversized results) and holds each request to the contract: the fold of
// a valid request is valid, it is deterministic, and across the growing
// conversation the folded set only grows and every fold keeps its bytes.
func FuzzAutoFold(f *testing.F) {
	for _, seed := range []string{"", "\x00\x01\x00\x00\x02", "\x0b\x03\x04\x00\x06\x30\x02\x03\x05\x90\x01\x00\x07\x99\x02\x03\x05\xf0\x01\x00",
		"\x0b\x01\x02\x00\x03\x00\x01\x01\x00\x30\x01\x00\x02\x02\x00\x02\x02\x01\x02\x00\x00\x02\x01\x00"} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s := genScript(data)
		opt := Options{AutoFold: AutoFold{Mode: ModeOn, Trigger: 300, MinTokens: 40, MinBatch: 100, Oversize: 500, KeepHead: 120, KeepTail: 60}}
		for _, d := range []Dialect{Anthropic, OpenAIChat, OpenAIResponses} {
			st := newFolder(s.branches...)
			stubs := map[string]string{} // tool-use id -> its stub, once folded
			for n := 1; n <= len(s.turns); n++ {
				body := script{turns: s.turns[:n], branches: s.branches}.render(d)
				res, err := Apply(context.Background(), d, body, st, opt)
				if err != nil {
					t.Fatalf("%s turn %d: Apply: %v", d, n, err)
				}
				if err := Check(d, res.Body); err != nil {
					t.Fatalf("%s turn %d: invalid: %v\nin:  %s\nout: %s", d, n, err, body, res.Body)
				}
				again, err := Apply(context.Background(), d, body, st, opt)
				if err != nil || !bytes.Equal(again.Body, res.Body) {
					// A cut that closes a branch may fold its span on the
					// resend; the automatic folds must still be as they were.
					if err == nil {
						err = Check(d, again.Body)
					}
					if err != nil {
						t.Fatalf("%s turn %d: second Apply: %v", d, n, err)
					}
				}
				if len(again.AutoFold.New) != 0 {
					t.Fatalf("%s turn %d: the resend decided %d new folds", d, n, len(again.AutoFold.New))
				}
				c, err := parseConv(d, res.Body)
				if err != nil {
					t.Fatal(err)
				}
				for id, stub := range stubs {
					r, _, ok := c.result(id)
					if !ok {
						continue // its branch's span folded
					}
					if r.text != stub && !strings.HasPrefix(r.text, stub+"\n\n") {
						t.Fatalf("%s turn %d: the fold of %s changed:\n got %q\nwant %q", d, n, id, r.text, stub)
					}
				}
				for _, rec := range res.AutoFold.New {
					if _, dup := stubs[rec.ToolUseID]; dup && rec.Kind != FoldOversized {
						t.Fatalf("%s turn %d: %s folded twice", d, n, rec.ToolUseID)
					}
					if rec.Kind == FoldOversized {
						continue // its fold may come later
					}
					stubs[rec.ToolUseID] = rec.Stub
				}
			}
		}
	})
}

// TestAutoFoldGenerated runs FuzzAutoFold's property over a fixed set of
// pseudo-random conversations and checks that they exercise every rule.
func TestAutoFoldGenerated(t *testing.T) {
	rnd := xorshift(7)
	kinds := map[string]int{}
	opt := Options{AutoFold: AutoFold{Mode: ModeOn, Trigger: 300, MinTokens: 40, MinBatch: 100, Oversize: 500, KeepHead: 120, KeepTail: 60}}
	for i := 0; i < 200; i++ {
		data := make([]byte, 96)
		for j := range data {
			data[j] = rnd()
		}
		s := genScript(data)
		for _, d := range []Dialect{Anthropic, OpenAIChat, OpenAIResponses} {
			st := newFolder(s.branches...)
			for n := 1; n <= len(s.turns); n++ {
				res := mustApply(t, d, script{turns: s.turns[:n], branches: s.branches}.render(d), st, opt)
				for _, r := range res.AutoFold.New {
					kinds[r.Kind]++
				}
			}
		}
	}
	for _, k := range []string{FoldStale, FoldOversized, FoldRepeat, FoldSuperseded} {
		if kinds[k] < 10 {
			t.Errorf("%d %s folds over 200 conversations: the generator does not exercise the rule", kinds[k], k)
		}
	}
	t.Logf("folds by kind: %v", kinds)
}

// recallFolder is a folderState that remembers recall calls.
type recallFolder struct {
	*folderState
	calls map[string]RecallCall
}

func (s *recallFolder) RecordRecallCalls(_ context.Context, calls []RecallCall) error {
	for _, c := range calls {
		s.calls[c.ID] = c
	}
	return nil
}

func (s *recallFolder) RecallCalls(_ context.Context, ids []string) (map[string]RecallCall, error) {
	out := map[string]RecallCall{}
	for _, id := range ids {
		if c, ok := s.calls[id]; ok {
			out[id] = c
		}
	}
	return out, nil
}

// TestAutoFoldRecallRewritten: a client that rewrites a call of the added
// recall tool (OpenCode names it "invalid" and drops its input) gets the
// call put back as the model made it, and answered.
func TestAutoFoldRecallRewritten(t *testing.T) {
	st := &recallFolder{folderState: newFolder(), calls: map[string]RecallCall{}}
	s := script{}
	for i := 1; i <= 25; i++ {
		s.turns = append(s.turns, sturn{calls: []scall{{id: fmt.Sprintf("c%d", i), name: "Bash", input: fmt.Sprintf(`{"command":"cat f%d"}`, i), result: output(fmt.Sprintf("f%d", i), 400)}}})
	}
	res := mustApply(t, OpenAIResponses, renderNoFoldTools(s, OpenAIResponses), st, onOpts())
	rec := res.AutoFold.New[0]
	input := fmt.Sprintf(`{"handle":%q}`, rec.Handle)
	// What the model said, as the front records it from the answer.
	_ = st.RecordRecallCalls(context.Background(), []RecallCall{{ID: "rc", Input: input}})
	s.turns = append(s.turns, sturn{calls: []scall{{id: "rc", name: "invalid",
		input:  `{"tool":"branch_recall","error":"Model tried to call unavailable tool 'branch_recall'."}`,
		result: "The arguments provided to the tool are invalid: Model tried to call unavailable tool 'branch_recall'."}}})
	res = mustApply(t, OpenAIResponses, renderNoFoldTools(s, OpenAIResponses), st, onOpts())
	if res.AutoFold.Recalls != 1 {
		t.Fatalf("%d recalls answered", res.AutoFold.Recalls)
	}
	c, err := parseConv(OpenAIResponses, res.Body)
	if err != nil {
		t.Fatal(err)
	}
	if c.callName("rc") != "branch_recall" || c.callInput("rc") != input {
		t.Fatalf("the call is %q %q, want it as the model made it", c.callName("rc"), c.callInput("rc"))
	}
	var page struct{ Text string }
	if err := json.Unmarshal([]byte(resultText(t, OpenAIResponses, res.Body, "rc")), &page); err != nil || page.Text != st.archive[rec.Handle] {
		t.Fatalf("the answer is not the folded text: %v", err)
	}
}

func (c *conv) callInput(id string) string {
	r, ok := c.calls[id]
	if !ok {
		return ""
	}
	return c.msgs[r.msg].calls[r.idx].input
}
