package intercept

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"unsafe"

	"github.com/foldproxy/foldproxy/fold"
	"github.com/foldproxy/foldproxy/intercept/tokens"
	"github.com/foldproxy/foldproxy/policy"
	"github.com/foldproxy/foldproxy/policy/jsonscan"
)

// lateArchiver keeps a result whose branch closed while the call ran
// (fold.Manager implements it).
type lateArchiver interface {
	ArchiveLate(ctx context.Context, session, branch string, ch fold.Charge) (string, error)
}

// Brancher is the branch manager as the budget interceptor uses it;
// *fold.Manager satisfies it.
type Brancher interface {
	// Attribute returns the branch a call of the session is charged to: the
	// explicit branch id when not empty, else the session's innermost
	// active branch, else its root. It fails with fold.ErrBranchClosed or
	// fold.ErrBranchNotFound. The branch is shared: read it, never write
	// it.
	Attribute(ctx context.Context, session, explicit string) (*fold.Branch, error)
	// Charge runs fit under the branch's charge lock with the branch's
	// budget as it is now, then records the charge it returns (archive,
	// usage, cut remainder, forced return) before returning. Calls on one
	// branch are serialized; fit must not call back into the Brancher.
	Charge(ctx context.Context, session, branch string, fit func(fold.Budget) (fold.Charge, error)) (*fold.ChargeResult, error)
}

var _ Brancher = (*fold.Manager)(nil)

// ErrOverBudget is wrapped by the refusal of a result that is over its
// branch's remaining budget and cannot be cut (completion/complete, or a
// result of a shape its method does not define).
var ErrOverBudget = errors.New("ErrOverBudget")

// Budget returns the interceptor that charges each result to its branch.
//
// On the way in it attributes the call (refusing it, without calling the
// upstream, when the branch is closed or unknown) and sets Branch, Parent,
// Depth and Remaining. On the way out it charges the result under the
// branch's charge lock, as fold.Fit decides: a result that fits is
// delivered whole; one that
// does not is cut to fit exactly, at a clean boundary, and its remainder is
// kept under a recall handle named in a cut notice, after which fold
// force-returns the branch. The result that makes the branch's warning level
// rise carries a one-line notice, and forced-return summaries of children not
// yet seen are appended once. Notices are extra content blocks (tools/call),
// extra contents (resources/read) or extra user messages (prompts/get);
// other methods carry none and are never cut: over the budget they are
// refused.
//
// It expects Tokens to run inside it (see the chain order): it reuses
// ResultTokens and Over and counts the result itself only when they are
// unset. thresholds are the three warning fractions; nil or malformed means
// the policy default. A nil Brancher or Counter makes every call fail with
// an error that says so.
func Budget(b Brancher, c *tokens.Counter, thresholds []float64) Interceptor {
	if len(thresholds) != 3 {
		thresholds = policy.Default().Fold.Thresholds
	}
	bi := &budgeter{b: b, c: c, thresholds: thresholds}
	return func(next Handler) Handler {
		return func(ctx context.Context, ex *Exchange) error {
			return bi.handle(ctx, ex, next)
		}
	}
}

// budgeter holds the budget interceptor's configuration; it is read-only.
type budgeter struct {
	b          Brancher
	c          *tokens.Counter
	thresholds []float64
}

// delivery is what the fit function decided.
type delivery struct {
	result json.RawMessage
	tokens int
	cut    bool
	refuse error
}

func (bi *budgeter) handle(ctx context.Context, ex *Exchange, next Handler) error {
	if bi.b == nil || bi.c == nil {
		ex.Outcome = OutcomeRefused
		ex.Err = errors.New("foldproxy is misconfigured: the budget interceptor has no branch manager or token counter")
		return ex.Err
	}
	br, err := bi.b.Attribute(ctx, ex.Session, ex.ExplicitBranch)
	if err != nil {
		ex.Outcome = OutcomeRefused
		ex.Err = refusal(ex.ExplicitBranch, err)
		return ex.Err
	}
	ex.Branch, ex.Parent, ex.Depth = br.ID, br.Parent, br.Depth
	ex.Remaining = -1
	if br.Budget > 0 {
		ex.Remaining = max(br.Budget-br.Used, 0)
	}
	ex.BudgetUsed, ex.BudgetTotal = br.Used, br.Budget

	err = next(ctx, ex)
	if ex.Result == nil {
		return err
	}
	var d delivery
	res, cerr := bi.b.Charge(ctx, ex.Session, br.ID, func(bud fold.Budget) (fold.Charge, error) {
		var ch fold.Charge
		d, ch = bi.fit(ex, bud)
		return ch, nil
	})
	if cerr != nil && errors.Is(cerr, fold.ErrStoreFull) {
		ex.Outcome = OutcomeRefused
		ex.Result = nil
		ex.Err = fmt.Errorf("foldproxy could not record this result, so it was not delivered (the upstream did run the call): %w", cerr)
		return ex.Err
	}
	if cerr != nil && errors.Is(cerr, fold.ErrBranchClosed) {
		// The branch closed (its deadline passed, say) while the call ran:
		// the result is kept in its archive, and the agent told where.
		if la, ok := bi.b.(lateArchiver); ok {
			handle, aerr := la.ArchiveLate(ctx, ex.Session, br.ID, fold.Charge{
				Upstream: ex.Upstream, Method: ex.Method, Name: ex.Name, Args: string(ex.Args), Result: ex.Result,
			})
			if aerr == nil {
				ex.Outcome = OutcomeRefused
				ex.Result = nil
				ex.Err = fmt.Errorf("foldproxy did not deliver this result: %w. The call ran and its whole result is archived: branch_recall with handle %q reads it (from an active branch or the main thread)", cerr, handle)
				return ex.Err
			}
			cerr = errors.Join(cerr, aerr)
		}
	}
	if cerr != nil {
		ex.Outcome = OutcomeRefused
		ex.Result = nil
		ex.Err = fmt.Errorf("foldproxy could not charge the result to branch %s, so it was not delivered: %w. Call branch_status to see the branch, then continue in an active branch", br.ID, cerr)
		return ex.Err
	}
	ex.BudgetUsed, ex.BudgetTotal = res.Used, res.Total
	if d.refuse != nil {
		ex.Outcome = OutcomeRefused
		ex.Result = nil
		ex.Err = d.refuse
		if d.cut {
			ex.CutHandle = res.Handle
		}
		return ex.Err
	}
	isErr := deliveredIsError(ex, d)
	ex.Result = d.result
	ex.DeliveredTokens = d.tokens
	if d.cut {
		ex.CutHandle = res.Handle
	}
	switch {
	case isErr:
		// An error result stays an error in the record even when cut (a
		// cut keeps isError, and checking the delivered result spares a
		// scan of a large original); CutHandle still tells that it was.
		ex.Outcome = OutcomeError
	case d.cut:
		ex.Outcome = OutcomeCut
	default:
		ex.Outcome = OutcomeOK
	}
	return err
}

// refusal explains to the agent why a call could not be attributed.
func refusal(explicit string, err error) error {
	switch {
	case errors.Is(err, fold.ErrBranchClosed):
		return fmt.Errorf("foldproxy refused the call: %w. A closed branch takes no more calls: continue in its parent (pass the parent's branch_id, or none for the main thread); branch_status shows the tree", err)
	case errors.Is(err, fold.ErrBranchNotFound):
		return fmt.Errorf("foldproxy refused the call: branch_id %q is not a branch of this session (%w). Pass a branch_id returned by branch_create, or none for the current branch; branch_status lists them", explicit, err)
	}
	return fmt.Errorf("foldproxy refused the call: it could not find the branch to charge: %w. Retry, or call branch_status", err)
}

// fit decides, under the charge lock, what the agent receives and what it
// costs: it measures the result and hands the decision to fold.Fit, with
// the MCP wire's ways to cut a result and append notices (mcpWire).
// Charge.Tokens is the exact count of what is delivered, notices included,
// and never exceeds bud.Remaining when that is not -1.
func (bi *budgeter) fit(ex *Exchange, bud fold.Budget) (delivery, fold.Charge) {
	c := bi.c
	ch := fold.Charge{
		Upstream:  ex.Upstream,
		Method:    ex.Method,
		Name:      ex.Name,
		Args:      string(ex.Args),
		Result:    ex.Result,
		ArgTokens: ex.ArgTokens,
	}
	if ch.ArgTokens == 0 && len(ex.Args) > 0 {
		ch.ArgTokens = c.CountArgs(ex.Args)
	}
	lim := bud.Remaining
	rt, over := ex.ResultTokens, ex.Over
	if (rt == 0 && !over) || (over && (lim < 0 || lim > ex.Remaining && ex.Remaining >= 0)) {
		// Tokens did not count this result, or counted it against a
		// smaller limit than the branch now has.
		var err error
		if rt, over, err = c.CountResult(ex.Method, ex.Result, lim); err != nil {
			rt, over = c.CountUpTo(string(ex.Result), lim)
		}
	}
	if lim >= 0 && !over && rt > lim {
		// Over the limit: its count is stated as an estimate, as one that
		// stopped at the limit is.
		over = true
	}
	notify := canNotify(ex.Method, ex.Result)
	d := fold.Fit(bud,
		fold.Measured[mcpResult]{Result: mcpResult{raw: ex.Result}, Tokens: rt, Over: over, Bytes: len(ex.Result), Notices: notify},
		mcpWire{c: c, method: ex.Method, orig: ex.Result},
		fold.FitOptions[mcpResult]{Root: ex.Depth == 0 || ex.Parent == "", Thresholds: bi.thresholds})
	ch.Tokens = d.Tokens
	ch.Level = d.Level.String()
	switch d.Verdict {
	case fold.FitRefused:
		if !notify {
			return delivery{refuse: fmt.Errorf("foldproxy refused the result: %w: the %s result has more than %s tokens and branch %s has %s left; %s results cannot be cut. Narrow the request, or make it in a branch with a larger budget",
				ErrOverBudget, ex.Method, commas(rt), bud.Branch, commas(lim), ex.Method)}, ch
		}
		return delivery{refuse: fmt.Errorf("foldproxy refused the result: %w: it has more than %s tokens, branch %s has %s left, and it could not be cut. Narrow the request",
			ErrOverBudget, commas(rt), bud.Branch, commas(lim))}, ch
	case fold.FitCut, fold.FitSpent:
		ch.Cut = true // a refusal too: the branch ends, and its result is kept
		ch.Rest = d.Result.rest
		// The archive keeps what was delivered (the empty cut, when the
		// agent gets the error instead); the remainder is stored once,
		// under the handle, instead of twice.
		ch.Result = d.Result.raw
		dl := delivery{result: d.Result.raw, tokens: d.Tokens, cut: true}
		if d.Verdict == fold.FitSpent {
			dl.refuse = errors.New(d.Message)
		}
		return dl, ch
	}
	// FitWhole (no cap is set, so never FitCapped).
	return delivery{result: d.Result.raw, tokens: d.Tokens}, ch
}

// mcpResult is an MCP result as fold.Fit passes it around: its JSON, and,
// once cut, what the cut left out.
type mcpResult struct {
	raw  json.RawMessage
	rest []byte // the remainder of a cut; nil for a result not cut
	cut  bool
}

// mcpWire is how MCP results are cut and carry notices, for fold.Fit: a
// result is cut by Counter.CutResult (whole items, then text at a clean
// boundary), and notices are extra items of its notice array (content
// blocks, resource contents, prompt messages).
type mcpWire struct {
	c      *tokens.Counter
	method string
	orig   json.RawMessage // the whole result
}

var _ fold.Wire[mcpResult] = mcpWire{}

// NoticeTokens is the tokens of a notice: its text, counted as an item.
func (w mcpWire) NoticeTokens(notice string) int { return w.c.CountText(notice) }

// Cut cuts the whole result to limit tokens of content.
func (w mcpWire) Cut(limit int) (mcpResult, fold.Piece, error) {
	cut, rest, kept, err := w.c.CutResult(w.method, w.orig, limit)
	if err != nil {
		return mcpResult{}, fold.Piece{}, err
	}
	if rest == nil {
		// Within the limit after all (counted against a larger limit
		// before); still a cut by contract, with nothing left over.
		rest = []byte{}
	}
	return mcpResult{raw: cut, rest: rest, cut: true}, fold.Piece{Kept: kept, Bytes: len(cut), RestBytes: len(rest)}, nil
}

// Attach appends the notices to r's notice array. A cut result that lost
// its structuredContent is marked an error (markCutError), and is counted
// again, as is a result whose notice array had to be created (it was
// counted as raw JSON; with the array it is counted by its items).
func (w mcpWire) Attach(r mcpResult, tokens int, notices []string) (mcpResult, int, error) {
	out, created, err := appendNotices(w.method, r.raw, notices)
	if err != nil {
		return mcpResult{}, 0, err
	}
	if r.cut {
		if out, err = markCutError(w.method, w.orig, out); err != nil {
			return mcpResult{}, 0, err
		}
	}
	if r.cut || created {
		if tokens, _, err = w.c.CountResult(w.method, out, -1); err != nil {
			return mcpResult{}, 0, err
		}
	}
	return mcpResult{raw: out, rest: r.rest, cut: r.cut}, tokens, nil
}

// shortCutNotice is the shortest cut notice, for a branch with almost no
// budget left.
func shortCutNotice(handle string) string { return fold.ShortCutNotice(handle) }

// commas formats n with thousands separators.
func commas(n int) string { return fold.Commas(n) }

// noticeArray names the array notices are appended to in a result of
// method, "" when its results carry no notices.
func noticeArray(method string) string {
	switch method {
	case "tools/call":
		return "content"
	case "resources/read":
		return "contents"
	case "prompts/get":
		return "messages"
	}
	return ""
}

// canNotify reports whether notices can be appended to a result of method:
// the method has a notice array and the result is an object.
func canNotify(method string, result []byte) bool {
	r := jsonscan.TrimSpace(result)
	return noticeArray(method) != "" && len(r) > 0 && r[0] == '{'
}

// noticeJSON returns one notice as an element of method's notice array.
func noticeJSON(method, text string) []byte {
	q := jsonscan.AppendQuote(nil, text)
	var b []byte
	switch method {
	case "resources/read":
		b = append(b, `{"uri":"foldproxy://notice","mimeType":"text/plain","text":`...)
		b = append(b, q...)
		b = append(b, '}')
	case "prompts/get":
		b = append(b, `{"role":"user","content":{"type":"text","text":`...)
		b = append(b, q...)
		b = append(b, `}}`...)
	default:
		b = append(b, `{"type":"text","text":`...)
		b = append(b, q...)
		b = append(b, '}')
	}
	return b
}

// appendNotices appends the notices to the result's notice array (creating
// the array when the result has none, which created reports), leaving every
// other byte as it was.
func appendNotices(method string, result json.RawMessage, notices []string) (out json.RawMessage, created bool, err error) {
	if len(notices) == 0 {
		return result, false, nil
	}
	key := noticeArray(method)
	if key == "" {
		return nil, false, fmt.Errorf("%s results carry no notices", method)
	}
	raw := jsonscan.TrimSpace(result)
	members, err := jsonscan.Object(raw)
	if err != nil {
		return nil, false, fmt.Errorf("%s result: %w", method, err)
	}
	var add []byte
	for i, n := range notices {
		if i > 0 {
			add = append(add, ',')
		}
		add = append(add, noticeJSON(method, n)...)
	}
	for _, m := range members {
		if m.Key != key {
			continue
		}
		v := raw[m.Value.Start:m.Value.End]
		if !isArray(v) {
			return nil, false, fmt.Errorf("%s result: %s is not an array", method, key)
		}
		out = make([]byte, 0, len(raw)+len(add)+1)
		out = append(out, raw[:m.Value.End-1]...)
		if len(jsonscan.TrimSpace(v[1:len(v)-1])) > 0 {
			out = append(out, ',')
		}
		out = append(out, add...)
		out = append(out, raw[m.Value.End-1:]...)
		return out, false, nil
	}
	out = make([]byte, 0, len(raw)+len(add)+len(key)+8)
	out = append(out, raw[:len(raw)-1]...)
	if len(members) > 0 {
		out = append(out, ',')
	}
	out = append(out, '"')
	out = append(out, key...)
	out = append(out, `":[`...)
	out = append(out, add...)
	out = append(out, "]}"...)
	return out, true, nil
}

// deliveredIsError reports whether d.result, the result fit delivers for
// ex.Result, has "isError": true. A result delivered whole is ex.Result,
// or ex.Result with notices appended (every other byte as it was): it has
// the isError of ex.Result, which Tokens read when it counted ex.Result.
// A cut result is read (a cut may mark it an error).
func deliveredIsError(ex *Exchange, d delivery) bool {
	if !d.cut && ex.resultErr != tokens.IsErrorUnknown && sameBytes(ex.resultErrOf, ex.Result) {
		return ex.resultErr == tokens.IsErrorTrue
	}
	return isErrorResult(d.result)
}

// sameBytes reports whether a and b are the same slice of the same array.
func sameBytes(a, b []byte) bool {
	return len(a) == len(b) && unsafe.SliceData(a) == unsafe.SliceData(b)
}

// isErrorResult reports whether a result has "isError": true.
func isErrorResult(result []byte) bool {
	ms, err := jsonscan.Object(jsonscan.TrimSpace(result))
	if err != nil {
		return false
	}
	raw := jsonscan.TrimSpace(result)
	for _, m := range ms {
		if m.Key == "isError" {
			return string(raw[m.Value.Start:m.Value.End]) == "true"
		}
	}
	return false
}

// markCutError marks a cut tools/call result that lost its
// structuredContent as a tool error ("isError": true). A tool that declares
// an outputSchema must return structuredContent that matches it unless the
// result is an error, and clients enforce it (the TypeScript SDK, which
// Claude Code uses, throws -32600 "has an output schema but did not return
// structured content"): a cut structured value would not match the schema
// either. An error result is shown to the model as it is, so the cut text
// and the notice with its recall handle reach the model, and the notice
// says the result was cut, not that the tool failed. Other results are
// returned unchanged.
func markCutError(method string, orig, cut json.RawMessage) (json.RawMessage, error) {
	if method != "tools/call" {
		return cut, nil
	}
	om, err := jsonscan.Object(jsonscan.TrimSpace(orig))
	if err != nil {
		return cut, nil
	}
	hadSC := false
	for _, m := range om {
		if m.Key == "structuredContent" {
			hadSC = true
		}
	}
	raw := jsonscan.TrimSpace(cut)
	cm, err := jsonscan.Object(raw)
	if err != nil {
		return nil, err
	}
	for _, m := range cm {
		if m.Key == "structuredContent" {
			return cut, nil // kept: nothing to mark
		}
		if m.Key == "isError" && hadSC {
			if string(raw[m.Value.Start:m.Value.End]) == "true" {
				return cut, nil
			}
			out := make([]byte, 0, len(raw)+4)
			out = append(out, raw[:m.Value.Start]...)
			out = append(out, "true"...)
			return append(out, raw[m.Value.End:]...), nil
		}
	}
	if !hadSC {
		return cut, nil
	}
	out := make([]byte, 0, len(raw)+16)
	out = append(out, raw[:len(raw)-1]...)
	if len(cm) > 0 {
		out = append(out, ',')
	}
	out = append(out, `"isError":true}`...)
	return out, nil
}

// isArray reports whether a JSON value (a valid one, no leading space) is
// an array.
func isArray(b []byte) bool { return len(b) > 0 && b[0] == '[' }
