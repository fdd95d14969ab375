package intercept

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/foldproxy/foldproxy/fold"
	"github.com/foldproxy/foldproxy/intercept/tokens"
)

// fakeBrancher is a Brancher with fold's lock semantics: Charge runs fit
// under one lock with the branch as it is now, refuses a charge above the
// remaining budget, and force-returns a branch whose result was cut.
type fakeBrancher struct {
	mu        sync.Mutex
	branches  map[string]*fakeBranch
	current   string
	handles   int
	rests     map[string][]byte
	charges   []fold.Charge
	overdrawn int // charges refused because Tokens exceeded Remaining
	// count, when set, gives Budget.Reserve as fold computes it.
	count func(string) int
}

type fakeBranch struct {
	fold.Branch
	summaries []string
}

func newFake(branches ...fold.Branch) *fakeBrancher {
	f := &fakeBrancher{branches: map[string]*fakeBranch{}, rests: map[string][]byte{}}
	for _, b := range branches {
		if b.Status == "" {
			b.Status = fold.StatusActive
		}
		f.branches[b.ID] = &fakeBranch{Branch: b}
		f.current = b.ID
	}
	return f
}

func (f *fakeBrancher) Attribute(ctx context.Context, session, explicit string) (*fold.Branch, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	id := explicit
	if id == "" {
		id = f.current
	}
	b, ok := f.branches[id]
	if !ok {
		return nil, fmt.Errorf("%w: no branch %q in session %s", fold.ErrBranchNotFound, id, session)
	}
	if b.Status != fold.StatusActive {
		return nil, fmt.Errorf("%w: branch %s is %s (%s)", fold.ErrBranchClosed, id, b.Status, b.Reason)
	}
	cp := b.Branch
	return &cp, nil
}

func (f *fakeBrancher) Charge(ctx context.Context, session, branch string, fit func(fold.Budget) (fold.Charge, error)) (*fold.ChargeResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, ok := f.branches[branch]
	if !ok {
		return nil, fmt.Errorf("%w: %s", fold.ErrBranchNotFound, branch)
	}
	if b.Status != fold.StatusActive {
		return nil, fmt.Errorf("%w: branch %s is %s", fold.ErrBranchClosed, branch, b.Status)
	}
	f.handles++
	rem := -1
	if b.Budget > 0 {
		rem = b.Budget - b.Used
	}
	bud := fold.Budget{Branch: branch, Used: b.Used, Total: b.Budget, Remaining: rem, Level: b.Level,
		Handle: fmt.Sprintf("h-%d", f.handles), Summaries: append([]string(nil), b.summaries...)}
	if f.count != nil {
		bud.Reserve = fold.NoticeReserve(f.count, branch, bud.Handle, b.Parent == "", b.Budget)
	}
	ch, err := fit(bud)
	if err != nil {
		return nil, err
	}
	if rem >= 0 && ch.Tokens > rem {
		f.overdrawn++
		return nil, fmt.Errorf("fit charged %d tokens with %d remaining", ch.Tokens, rem)
	}
	b.Used += ch.Tokens
	b.Level = ch.Level
	b.summaries = nil
	f.charges = append(f.charges, ch)
	res := &fold.ChargeResult{Used: b.Used, Total: b.Budget, Level: b.Level}
	if ch.Cut {
		f.rests[bud.Handle] = ch.Rest
		res.Handle = bud.Handle
		res.Forced = b.Parent != ""
		if res.Forced {
			b.Status, b.Reason = fold.StatusForced, fold.ReasonBudget
		}
	}
	return res, nil
}

func (f *fakeBrancher) used(id string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.branches[id].Used
}

// serve returns a handler that answers every call with result.
func serve(result string) Handler {
	return func(ctx context.Context, ex *Exchange) error {
		ex.Result = json.RawMessage(result)
		return nil
	}
}

// run runs one exchange through tokens and budget.
func run(t testing.TB, f Brancher, c *tokens.Counter, method, branch string, up Handler) *Exchange {
	t.Helper()
	h := Chain(up, Budget(f, c, nil), Tokens(c))
	ex := &Exchange{Session: "s1", Method: method, Name: "x", Args: json.RawMessage(`{"q":1}`), ExplicitBranch: branch}
	_ = h(context.Background(), ex)
	return ex
}

// texts returns the texts of a tools/call result's content.
func texts(t testing.TB, result json.RawMessage) []string {
	t.Helper()
	var r struct {
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
	}
	if err := json.Unmarshal(result, &r); err != nil {
		t.Fatalf("result %s: %v", result, err)
	}
	var out []string
	for _, c := range r.Content {
		out = append(out, c.Text)
	}
	return out
}

// checkDelivered checks that DeliveredTokens is the exact count of Result.
func checkDelivered(t testing.TB, c *tokens.Counter, ex *Exchange) {
	t.Helper()
	n, _, err := c.CountResult(ex.Method, ex.Result, -1)
	if err != nil || n != ex.DeliveredTokens {
		t.Fatalf("DeliveredTokens = %d, recount %d (%v) of %s", ex.DeliveredTokens, n, err, ex.Result)
	}
}

func TestBudgetRefusals(t *testing.T) {
	c := newCounter(t, "")
	f := newFake(
		fold.Branch{ID: "b-1", Parent: "root-s1", Depth: 1, Budget: 1000},
		fold.Branch{ID: "b-2", Parent: "root-s1", Depth: 1, Budget: 1000, Status: fold.StatusForced, Reason: fold.ReasonBudget},
	)
	tests := []struct {
		branch string
		want   error
		hint   string
	}{
		{"b-2", fold.ErrBranchClosed, "continue in its parent"},
		{"b-9", fold.ErrBranchNotFound, "branch_create"},
	}
	for _, tt := range tests {
		called := false
		ex := run(t, f, c, "tools/call", tt.branch, func(ctx context.Context, ex *Exchange) error {
			called = true
			return nil
		})
		if called {
			t.Errorf("branch %s: upstream called", tt.branch)
		}
		if ex.Outcome != OutcomeRefused || !errors.Is(ex.Err, tt.want) || !strings.Contains(ex.Err.Error(), tt.hint) {
			t.Errorf("branch %s: outcome %q, err %v; want refused, %v, mentioning %q", tt.branch, ex.Outcome, ex.Err, tt.want, tt.hint)
		}
	}
}

func TestBudgetWhole(t *testing.T) {
	c := newCounter(t, "")
	tests := []struct {
		name       string
		branch     fold.Branch
		result     string
		wantRemain int
		wantOut    string
	}{
		{"unlimited root", fold.Branch{ID: "root-s1", Budget: 0, Used: 50}, `{"content":[{"type":"text","text":"hello world"}]}`, -1, OutcomeOK},
		{"branch", fold.Branch{ID: "b-1", Parent: "root-s1", Depth: 1, Budget: 1000, Used: 10}, `{"content":[{"type":"text","text":"hello world"}]}`, 990, OutcomeOK},
		{"error result", fold.Branch{ID: "b-1", Parent: "root-s1", Depth: 1, Budget: 1000}, `{"content":[{"type":"text","text":"boom"}],"isError":true}`, 1000, OutcomeError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(tt.branch)
			var remaining int
			ex := run(t, f, c, "tools/call", "", func(ctx context.Context, ex *Exchange) error {
				remaining = ex.Remaining
				ex.Result = json.RawMessage(tt.result)
				return nil
			})
			if ex.Err != nil || remaining != tt.wantRemain || ex.Outcome != tt.wantOut {
				t.Fatalf("err %v, remaining %d, outcome %q; want nil, %d, %q", ex.Err, remaining, ex.Outcome, tt.wantRemain, tt.wantOut)
			}
			if string(ex.Result) != tt.result {
				t.Errorf("result = %s, want it unchanged", ex.Result)
			}
			checkDelivered(t, c, ex)
			if ex.Branch != tt.branch.ID || ex.BudgetUsed != tt.branch.Used+ex.DeliveredTokens || ex.BudgetTotal != tt.branch.Budget {
				t.Errorf("branch %q used %d total %d", ex.Branch, ex.BudgetUsed, ex.BudgetTotal)
			}
		})
	}
}

func TestBudgetWarningsOncePerLevel(t *testing.T) {
	c := newCounter(t, "")
	f := newFake(fold.Branch{ID: "b-12", Parent: "root-s1", Depth: 1, Budget: 2000})
	chunk := strings.Repeat("word ", 40) // about 40 tokens
	res := string(textResult(t, chunk))
	var notices []string
	for i := 0; i < 80; i++ {
		ex := run(t, f, c, "tools/call", "", serve(res))
		if ex.Err != nil {
			if !errors.Is(ex.Err, fold.ErrBranchClosed) {
				t.Fatalf("call %d: %v", i, ex.Err)
			}
			break
		}
		checkDelivered(t, c, ex)
		for _, s := range texts(t, ex.Result) {
			if strings.HasPrefix(s, "[foldproxy]") {
				notices = append(notices, s)
			}
		}
	}
	var levels []string
	for _, n := range notices {
		for _, l := range []string{"caution", "warning", "critical"} {
			if strings.Contains(n, ", "+l+")") {
				levels = append(levels, l)
			}
		}
	}
	if got, want := strings.Join(levels, ","), "caution,warning,critical"; got != want {
		t.Errorf("warning notices by level = %s, want %s; notices:\n%s", got, want, strings.Join(notices, "\n"))
	}
	if !strings.Contains(notices[0], "[foldproxy] branch b-12 budget: ") || !strings.Contains(notices[0], "/2,000 tokens used (") {
		t.Errorf("first notice = %q", notices[0])
	}
	if last := notices[len(notices)-1]; !strings.Contains(last, "branch_recall") {
		t.Errorf("last notice = %q, want a cut notice", last)
	}
	if u := f.used("b-12"); u > 2000 || f.overdrawn != 0 {
		t.Errorf("used %d of 2000, %d overdrawn charges", u, f.overdrawn)
	}
}

func TestBudgetCut(t *testing.T) {
	c := newCounter(t, "")
	text := bigText(t, 60_000)
	res := string(textResult(t, text))
	for _, tt := range []struct {
		name   string
		branch fold.Branch
		forced bool
	}{
		{"branch", fold.Branch{ID: "b-12", Parent: "root-s1", Depth: 1, Budget: 8192, Used: 3000}, true},
		{"limited root", fold.Branch{ID: "root-s1", Budget: 4000, Used: 100}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(tt.branch)
			ex := run(t, f, c, "tools/call", "", serve(res))
			if ex.Err != nil || ex.Outcome != OutcomeCut || ex.CutHandle == "" {
				t.Fatalf("err %v, outcome %q, handle %q", ex.Err, ex.Outcome, ex.CutHandle)
			}
			checkDelivered(t, c, ex)
			left := tt.branch.Budget - tt.branch.Used
			if ex.DeliveredTokens > left || ex.DeliveredTokens < left-100 {
				t.Errorf("delivered %d tokens of %d left; want close to all", ex.DeliveredTokens, left)
			}
			got := texts(t, ex.Result)
			if len(got) != 2 {
				t.Fatalf("content has %d blocks, want the cut text and the notice", len(got))
			}
			notice := got[1]
			if !strings.Contains(notice, fmt.Sprintf("branch_recall with handle %q", ex.CutHandle)) || !strings.Contains(notice, "about") {
				t.Errorf("notice = %q", notice)
			}
			if strings.Contains(notice, "force-returned") != tt.forced {
				t.Errorf("notice = %q, force-returned mentioned: want %v", notice, tt.forced)
			}
			if got[0]+string(f.rests[ex.CutHandle]) != text {
				t.Errorf("kept text + rest differs from the original")
			}
			if !strings.HasSuffix(got[0], "\n") {
				t.Errorf("cut not at a line end: %q", got[0][len(got[0])-20:])
			}
			next := run(t, f, c, "tools/call", "", serve(res))
			if tt.forced && !errors.Is(next.Err, fold.ErrBranchClosed) {
				t.Errorf("next call: %v, want ErrBranchClosed", next.Err)
			}
		})
	}
}

func TestBudgetSummariesOnce(t *testing.T) {
	c := newCounter(t, "")
	f := newFake(fold.Branch{ID: "b-1", Parent: "root-s1", Depth: 1, Budget: 5000})
	f.branches["b-1"].summaries = []string{"branch b-3 was force-returned (budget exhausted): 4 calls, 8,192 tokens, 1 cut."}
	res := `{"content":[{"type":"text","text":"ok"}]}`
	first := run(t, f, c, "tools/call", "", serve(res))
	second := run(t, f, c, "tools/call", "", serve(res))
	checkDelivered(t, c, first)
	if got := texts(t, first.Result); len(got) != 2 || got[1] != "[foldproxy] branch b-3 was force-returned (budget exhausted): 4 calls, 8,192 tokens, 1 cut." {
		t.Errorf("first result texts = %q", got)
	}
	if got := texts(t, second.Result); len(got) != 1 {
		t.Errorf("second result texts = %q, want no summary", got)
	}
}

func TestBudgetNoticeShapes(t *testing.T) {
	c := newCounter(t, "")
	tests := []struct {
		method string
		result string
		want   string
	}{
		{"resources/read", `{"contents":[{"uri":"file:///a","text":"x"}]}`, `{"contents":[{"uri":"file:///a","text":"x"},{"uri":"foldproxy://notice","mimeType":"text/plain","text":"[foldproxy] S"}]}`},
		{"prompts/get", `{"messages":[]}`, `{"messages":[{"role":"user","content":{"type":"text","text":"[foldproxy] S"}}]}`},
		{"tools/call", `{"isError":false}`, `{"isError":false,"content":[{"type":"text","text":"[foldproxy] S"}]}`},
		{"tools/call", `{}`, `{"content":[{"type":"text","text":"[foldproxy] S"}]}`},
	}
	for _, tt := range tests {
		f := newFake(fold.Branch{ID: "b-1", Parent: "root-s1", Depth: 1, Budget: 5000})
		f.branches["b-1"].summaries = []string{"S"}
		ex := run(t, f, c, tt.method, "", serve(tt.result))
		if string(ex.Result) != tt.want {
			t.Errorf("%s: result = %s\nwant %s", tt.method, ex.Result, tt.want)
		}
		checkDelivered(t, c, ex)
	}
}

func TestBudgetUncuttableRefused(t *testing.T) {
	c := newCounter(t, "")
	f := newFake(fold.Branch{ID: "b-1", Parent: "root-s1", Depth: 1, Budget: 10, Used: 5})
	ex := run(t, f, c, "completion/complete", "", serve(`{"completion":{"values":["one two three four five six seven eight nine ten"]}}`))
	if ex.Outcome != OutcomeRefused || !errors.Is(ex.Err, ErrOverBudget) || ex.Result != nil {
		t.Fatalf("outcome %q, err %v, result %s", ex.Outcome, ex.Err, ex.Result)
	}
	if u := f.used("b-1"); u != 5 {
		t.Errorf("used %d, want 5 (nothing delivered)", u)
	}
}

func TestBudgetTinyRemaining(t *testing.T) {
	c := newCounter(t, "")
	text := strings.Repeat("line of output\n", 200)
	res := string(textResult(t, text))
	short := c.CountText(shortCutNotice("h-1"))
	for _, left := range []int{0, short - 1, short, short + 5, 120} {
		f := newFake(fold.Branch{ID: "b-1", Parent: "root-s1", Depth: 1, Budget: 1000, Used: 1000 - left})
		ex := run(t, f, c, "tools/call", "", serve(res))
		if f.overdrawn != 0 {
			t.Fatalf("left %d: %d overdrawn charges", left, f.overdrawn)
		}
		if left < short {
			// Not even the shortest notice fits: the result is refused with
			// an error that says why and where it is kept, and the branch
			// ends as by a cut.
			if ex.Outcome != OutcomeRefused || ex.Result != nil || ex.CutHandle != "h-1" {
				t.Fatalf("left %d: outcome %q, handle %q, result %s", left, ex.Outcome, ex.CutHandle, ex.Result)
			}
			if msg := ex.Err.Error(); !strings.Contains(msg, `branch_recall with handle "h-1"`) || !strings.Contains(msg, "force-returned") || !strings.Contains(msg, fmt.Sprintf("%d tokens left", left)) {
				t.Errorf("left %d: error %q", left, msg)
			}
			if string(f.rests["h-1"]) != text || f.branches["b-1"].Used != 1000-left || f.branches["b-1"].Status != fold.StatusForced {
				t.Errorf("left %d: rest %d bytes of %d, used %d, status %s", left, len(f.rests["h-1"]), len(text), f.branches["b-1"].Used, f.branches["b-1"].Status)
			}
			continue
		}
		if ex.Err != nil || ex.Outcome != OutcomeCut {
			t.Fatalf("left %d: err %v, outcome %q", left, ex.Err, ex.Outcome)
		}
		checkDelivered(t, c, ex)
		if ex.DeliveredTokens > left {
			t.Errorf("left %d: delivered %d", left, ex.DeliveredTokens)
		}
		got := texts(t, ex.Result)
		if len(got) == 0 || !strings.Contains(got[len(got)-1], "branch_recall") {
			t.Errorf("left %d: texts %q, want a notice", left, got)
		}
	}
}

// TestBudgetNeverSilent walks branches of many budgets down with results of
// many sizes, as fold gives the reserve: every result arrives whole or with
// a notice, and the result that ends a branch carries the full cut notice
// (the branch is force-returned early enough for it).
func TestBudgetNeverSilent(t *testing.T) {
	c := newCounter(t, "")
	outs := trajectoryOutputs(t)
	for _, budget := range []int{60, 90, 150, 400, 1000, 3000} {
		for _, root := range []bool{false, true} {
			b := fold.Branch{ID: "b-1", Parent: "root-s1", Depth: 1, Budget: budget}
			if root {
				b = fold.Branch{ID: "root-s1", Budget: budget}
			}
			f := newFake(b)
			f.count = c.CountText
			reserve := fold.NoticeReserve(c.CountText, b.ID, "h-1", root, budget)
			ended := false
			for i := 0; i < 40 && !ended; i++ {
				text := outs[(i*7+budget)%len(outs)]
				if i%3 == 1 {
					text = text[:min(len(text), 40+i)] // small results too
				}
				before := f.used(b.ID)
				ex := run(t, f, c, "tools/call", "", serve(string(textResult(t, text))))
				where := fmt.Sprintf("budget %d root %v call %d", budget, root, i)
				if f.overdrawn != 0 {
					t.Fatalf("%s: overdrawn", where)
				}
				switch {
				case errors.Is(ex.Err, fold.ErrBranchClosed):
					t.Fatalf("%s: the branch closed without a result saying so", where)
				case ex.Outcome == OutcomeRefused:
					if ex.CutHandle == "" || !strings.Contains(ex.Err.Error(), ex.CutHandle) {
						t.Fatalf("%s: refused without a handle: %v", where, ex.Err)
					}
					ended = true
					continue
				case ex.Err != nil:
					t.Fatalf("%s: %v", where, ex.Err)
				}
				checkDelivered(t, c, ex)
				got := texts(t, ex.Result)
				if ex.Outcome != OutcomeCut {
					if left := budget - f.used(b.ID); left < reserve && before+ex.DeliveredTokens == f.used(b.ID) {
						t.Fatalf("%s: delivered whole, leaving %d < reserve %d", where, left, reserve)
					}
					if strings.Join(got, "") == "" && text != "" {
						t.Fatalf("%s: empty result without a notice", where)
					}
					continue
				}
				notice := got[len(got)-1]
				if budget < reserve {
					// Below the reserve from the start: the short notice.
					if !strings.Contains(notice, fmt.Sprintf("branch_recall %q", ex.CutHandle)) && !strings.Contains(notice, fmt.Sprintf("branch_recall with handle %q", ex.CutHandle)) {
						t.Fatalf("%s: the notice is %q, want one naming the handle", where, notice)
					}
					ended = ended || !root
					continue
				}
				if !strings.Contains(notice, fmt.Sprintf("branch_recall with handle %q", ex.CutHandle)) {
					t.Fatalf("%s: the last result's notice is %q, want the full cut notice", where, notice)
				}
				if root && !strings.Contains(notice, "main thread has reached its token budget") {
					t.Fatalf("%s: the main thread's notice %q does not say it is at its limit", where, notice)
				}
				if !root {
					ended = true
				}
			}
			if !ended && !root {
				t.Errorf("budget %d: the branch never ended", budget)
			}
		}
	}
}

func TestBudgetParallel(t *testing.T) {
	c := newCounter(t, "")
	const budget = 3000
	f := newFake(fold.Branch{ID: "b-1", Parent: "root-s1", Depth: 1, Budget: budget})
	// The branch keeps its notice reserve, as fold.Manager's does: without
	// it, whole results may leave fewer tokens than the cut notice needs,
	// and the call that ends the branch is refused instead of cut,
	// depending on the order the goroutines charge in.
	f.count = c.CountText
	outs := trajectoryOutputs(t)
	var mu sync.Mutex
	delivered, cuts := 0, 0
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 10 {
				res := string(textResult(t, outs[(g*10+i)%len(outs)]))
				ex := run(t, f, c, "tools/call", "b-1", serve(res))
				if ex.Err != nil {
					if !errors.Is(ex.Err, fold.ErrBranchClosed) {
						t.Errorf("call: %v", ex.Err)
					}
					continue
				}
				mu.Lock()
				delivered += ex.DeliveredTokens
				if ex.Outcome == OutcomeCut {
					cuts++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if u := f.used("b-1"); u > budget || u != delivered || f.overdrawn != 0 {
		t.Errorf("used %d of %d, delivered %d in total, %d overdrawn", u, budget, delivered, f.overdrawn)
	}
	if cuts != 1 {
		t.Errorf("%d cuts, want exactly 1 (the branch is force-returned at the first)", cuts)
	}
}

func TestCommas(t *testing.T) {
	tests := []struct {
		in   int
		want string
	}{{0, "0"}, {999, "999"}, {1000, "1,000"}, {8192, "8,192"}, {120000, "120,000"}, {-1234567, "-1,234,567"}}
	for _, tt := range tests {
		if got := commas(tt.in); got != tt.want {
			t.Errorf("commas(%d) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// BenchmarkCut10MB measures the path of a 10 MB result cut into a branch
// with 8,192 tokens left: counting (Tokens) and charging (Budget).
func BenchmarkCut10MB(b *testing.B) {
	c := newCounter(b, "")
	res := string(textResult(b, bigText(b, 10<<20)))
	for b.Loop() {
		f := newFake(fold.Branch{ID: "b-1", Parent: "root-s1", Depth: 1, Budget: 8192})
		h := Chain(serve(res), Budget(f, c, nil), Tokens(c))
		ex := &Exchange{Session: "s1", Method: "tools/call"}
		if err := h(context.Background(), ex); err != nil || ex.Outcome != OutcomeCut {
			b.Fatalf("err %v, outcome %q", err, ex.Outcome)
		}
	}
}

// TestCountIsErrorFlag: what the count reads of a result's "isError", which
// Budget takes instead of parsing the result again, is what isErrorResult
// reads, for every method and shape, and a result the count cannot parse
// leaves it unknown.
func TestCountIsErrorFlag(t *testing.T) {
	c := newCounter(t, "")
	results := []string{
		`{"content":[{"type":"text","text":"x"}],"isError":true}`,
		`{"content":[{"type":"text","text":"x"}],"isError":false}`,
		`{"isError": true ,"content":[]}`,
		`{"isError":"true","content":[]}`,
		`{"isError":1,"content":[]}`,
		`{"isError":false,"isError":true,"content":[]}`,
		`{"isError":true,"isError":false}`,
		`{"content":[{"type":"text","text":"\"isError\":true"}]}`,
		`{"structuredContent":{"isError":true},"content":[]}`,
		`  {"contents":[{"uri":"a","text":"b"}],"isError":true}  `,
		`{}`, `[]`, `"isError"`, `true`, `null`,
		`{"content":[{"type":"text","text":"x"}],"isError":tru}`,
		`{"content":[{"type":"text","text":"x"}]`,
	}
	for _, method := range []string{"tools/call", "resources/read", "prompts/get", "completion/complete", "other/method"} {
		for _, r := range results {
			fl := c.CountExchange(nil, json.RawMessage(r), nil, method, -1).IsError
			_, _, err := c.CountResult(method, json.RawMessage(r), -1)
			if err != nil {
				if fl != tokens.IsErrorUnknown {
					t.Errorf("%s %s: the count failed (%v) but read isError %v", method, r, err, fl)
				}
				continue
			}
			if want := isErrorResult([]byte(r)); fl == tokens.IsErrorUnknown || (fl == tokens.IsErrorTrue) != want {
				t.Errorf("%s %s: the count read isError %v (known %v), isErrorResult %v", method, r, fl == tokens.IsErrorTrue, fl != tokens.IsErrorUnknown, want)
			}
		}
	}
	// Budget takes the count's reading only for the result it was made of.
	ex := &Exchange{Result: json.RawMessage(`{"content":[],"isError":true}`), resultErr: tokens.IsErrorFalse}
	ex.resultErrOf = ex.Result
	if deliveredIsError(ex, delivery{result: ex.Result}) {
		t.Error("deliveredIsError did not take the count's reading of the same result")
	}
	ex.resultErrOf = []byte(`{"content":[],"isError":true}`)
	if !deliveredIsError(ex, delivery{result: ex.Result}) {
		t.Error("deliveredIsError took the count's reading of another result")
	}
	ex.resultErrOf = ex.Result
	if !deliveredIsError(ex, delivery{result: ex.Result, cut: true}) {
		t.Error("deliveredIsError took the count's reading for a cut result")
	}
}
