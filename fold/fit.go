package fold

import (
	"strings"

	"github.com/foldproxy/foldproxy/policy"
)

// The budget decision: what of one result reaches the agent, with which
// notices, and what it costs its branch. It is written once, here, and
// every wire calls it from its fit function (Manager.Charge): the budget
// interceptor for MCP results (content blocks, resources, prompts,
// structured content), the model wire for tool results in a conversation.
// What a wire knows, and Fit does not, is how its results are shaped: how
// one is cut to a number of tokens, where a notice goes and what it costs.
// A wire hands that over as a Wire.
//
// The promise Fit keeps: a result never arrives empty without a word. A
// result is delivered whole only when it leaves the branch its notice
// reserve (Budget.Reserve), so that the result that ends the branch can
// still say why; a result that does not fit is cut, exactly, with the cut
// notice naming the handle that keeps the rest; with no room for content
// the notice comes alone, or its short form; and when not even that fits,
// the result is refused with SpentNotice, which names the handle that keeps
// the whole of it.

// Verdict says what becomes of a result.
type Verdict int

const (
	// FitWhole: the result is delivered whole, with the notices that fit
	// (children's forced-return summaries, a rising warning level).
	FitWhole Verdict = iota
	// FitCapped: the result was longer than the caller's cap (FitOptions.Cap)
	// and is cut to it with the cap's own notice. It fits the budget: the
	// branch goes on, unless this result spends the budget to its last
	// token.
	FitCapped
	// FitCut: the result is cut to fit the budget, with the cut notice (or
	// the short one), and ends the branch (a main thread is not ended: it
	// takes no more results).
	FitCut
	// FitSpent: not even the shortest notice fits what the branch has left.
	// Nothing of the result is delivered; Decision.Message (SpentNotice)
	// says why instead, costs nothing, and names the handle that keeps the
	// whole result. It ends the branch as a cut does.
	FitSpent
	// FitRefused: the result is over the budget and cannot be cut: it
	// carries no notices (Measured.Notices is false), or cutting it failed.
	// Nothing is delivered or charged, and the caller says why.
	FitRefused
)

var verdictNames = [...]string{"whole", "capped", "cut", "spent", "refused"}

// String returns the verdict's name.
func (v Verdict) String() string {
	if v < FitWhole || v > FitRefused {
		return "unknown"
	}
	return verdictNames[v]
}

// Piece is what a Wire's Cut made of a result: the figures Fit words
// its notices with.
type Piece struct {
	Kept      int // tokens of the result's own content kept
	Bytes     int // size of the cut result, notices not included
	RestBytes int // size of what was cut away (kept under the handle)
}

// Measured is one result as its wire measured it. R is the wire's form of
// a result (a JSON result, a kept prefix of a text, ...).
type Measured[R any] struct {
	// Result is the whole result.
	Result R
	// Tokens is the result's tokens: all of them, or, with Over, as many
	// as were counted before counting stopped at the branch's limit (a
	// lower bound). A result delivered whole is charged Tokens, so a
	// count may stop early only when the budget is limited (Remaining is
	// not -1): Over results are never delivered whole.
	Tokens int
	Over   bool
	// Bytes is the result's size. Fit estimates the whole of a result it
	// could not count (Over) from it, and words the first, provisional cut
	// notice with the larger of Tokens and Bytes/estimateBytesPerToken, so
	// that its figures have the digits of the final ones. A wire whose
	// Tokens is always the exact whole may leave it 0.
	Bytes int
	// Notices reports whether the result can carry notices. One that
	// cannot is delivered whole or refused: never cut, capped or warned
	// about, and it needs no reserve.
	Notices bool
}

// Wire is how one wire shapes its results of type R, for Fit. Fit passes
// values of R between its methods and returns the one delivered; the
// methods must be pure, since Fit calls them as often as it needs and keeps
// only its verdict. A wire is best a small value type: Fit takes it by
// value, and a result that fits costs no allocation.
type Wire[R any] interface {
	// NoticeTokens is what one notice adds to a result: its tokens, with
	// whatever the wire puts before it.
	NoticeTokens(notice string) int
	// Attach returns r with the notices appended, and the exact tokens of
	// what it built. tokens is r's tokens plus the notices' NoticeTokens,
	// which is the answer unless attaching changes the count (a wire that
	// must create the notices' container, say).
	Attach(r R, tokens int, notices []string) (R, int, error)
	// Cut returns the result cut to at most limit tokens of its own
	// content (limit 0: none of it, only its frame), with the figures of
	// the cut. Budget cuts keep the head of a result.
	Cut(limit int) (R, Piece, error)
}

// Cap is a limit below the budget that a caller sets on one result: keep at
// most Limit tokens of it, its notice included (an oversized result folded
// to its head and tail, say). Cutting a result to its cap is not a budget
// overrun: the branch is not force-returned, and the notice is the cap's.
type Cap[R any] struct {
	// Limit is the tokens kept at most, the notice included; 0 sets no cap.
	Limit int
	// Notice words the notice of a capped result: kept of total tokens
	// kept (total estimated when the result was not counted to its end).
	Notice func(kept, total int, estimated bool) string
	// Cut cuts the result for the cap, as Wire.Cut does (a head and a
	// tail, say); nil uses the wire's Cut.
	Cut func(limit int) (R, Piece, error)
}

// FitOptions are what Fit needs beyond the budget and the result.
type FitOptions[R any] struct {
	// Root is set for a session's main thread: it is never force-returned,
	// and is never given the short cut notice (it is told why and what to
	// do, in the full notice or in the refusal).
	Root bool
	// Thresholds are the warning thresholds, as policy.LevelOf takes them.
	Thresholds []float64
	// Cap, when its Limit is set, caps the result below the budget. A cap
	// applies only to a result that can carry notices, and not when not
	// even its notice fits it (the result is then decided as if uncapped).
	Cap Cap[R]
}

// Decision is the verdict on one result.
type Decision[R any] struct {
	Verdict Verdict
	// Result is what is delivered: the whole, capped or cut result with
	// its notices attached. With FitSpent it is the cut of nothing, which
	// the archive keeps; with FitRefused it is the zero R.
	Result R
	// Notices are the notices attached to Result, in order.
	Notices []string
	// Tokens is what the branch is charged: the exact tokens of Result as
	// delivered, never more than Budget.Remaining when that is not -1; 0
	// when nothing is delivered (FitSpent, FitRefused).
	Tokens int
	// Level is the branch's warning level after the charge; it never goes
	// below the level already reached.
	Level policy.Level
	// Forced reports whether the charge ends the branch (Manager.Charge
	// force-returns it): a budget cut or a spent budget, never the main
	// thread.
	Forced bool
	// Message, with FitSpent, is what the agent is told instead of the
	// result (SpentNotice).
	Message string
}

// estimateBytesPerToken is the bytes per token Fit assumes of what it did
// not count: about what BPE encodings average on English and code.
const estimateBytesPerToken = 4

// cutTries is how many cuts Fit tries before it gives up on keeping
// content: each corrects the room by what the last one overran (a notice's
// figures, and so its tokens, change with what is kept).
const cutTries = 4

// Fit decides what of a result, measured as m and shaped by w, reaches the
// agent from a branch with budget bud, and what it costs. It is pure: it
// reads its arguments and calls w's methods, nothing else.
//
// A result is delivered whole when the budget is unlimited, or when it
// fits what the branch has left beyond its reserve, with the children's
// forced-return summaries and, when the branch's warning level rises, a
// warning notice (left out rather than cutting a result that fits). A
// result over its cap (opt.Cap) is first cut to the cap, and then decided
// as if it were the whole. Otherwise a result that can carry notices is
// cut to fit what is left, notices included (FitCut), its notice alone
// comes when no content fits, and when not even the short notice fits it
// is refused with the spent notice (FitSpent); one that cannot is refused
// (FitRefused).
func Fit[R any, W Wire[R]](bud Budget, m Measured[R], w W, opt FitOptions[R]) Decision[R] {
	f := fitter[R, W]{bud: bud, w: w, tokens: m.Tokens, over: m.Over, bytes: m.Bytes, notices: m.Notices,
		root: opt.Root, thresholds: opt.Thresholds, capLimit: opt.Cap.Limit}
	f.old, _ = policy.ParseLevel(bud.Level)
	lim := bud.Remaining

	var sums []string
	sumTokens := 0
	if m.Notices {
		for _, s := range bud.Summaries {
			s = strings.TrimSpace(s)
			if s == "" {
				continue
			}
			if !strings.HasPrefix(s, "[foldproxy]") {
				s = "[foldproxy] " + s
			}
			sums = append(sums, s)
			sumTokens += w.NoticeTokens(s)
		}
	}
	// A result is delivered whole only when it leaves the branch its
	// reserve, so that the result that ends the branch can still carry its
	// cut notice; results that carry no notices need no reserve.
	room := lim
	if m.Notices && lim >= 0 {
		room = lim - bud.Reserve
	}

	whole := part[R]{r: m.Result, tokens: m.Tokens, over: m.Over}
	verdict := FitWhole
	capped := false
	if c := opt.Cap; c.Limit > 0 && c.Notice != nil && m.Notices && (m.Over || m.Tokens > c.Limit) {
		if p, ok := f.capTo(c); ok {
			whole, verdict, capped = p, FitCapped, true
		}
	}
	if lim < 0 || (!whole.over && whole.tokens+sumTokens <= room) {
		var d Decision[R]
		f.whole(&d, &whole, verdict, sums, sumTokens, room)
		return d
	}
	if !m.Notices {
		return f.refused()
	}
	return f.cut(sums, sumTokens, capped)
}

// fitter is one call of Fit. It holds what its steps read of Measured and
// FitOptions, not their copies: Fit runs once per result, and a result that
// fits the budget should cost it little more than a comparison.
type fitter[R any, W Wire[R]] struct {
	bud        Budget
	w          W
	tokens     int
	over       bool
	bytes      int
	notices    bool
	root       bool
	thresholds []float64
	capLimit   int
	old        policy.Level // the level before this result
}

// part is a result as it stands in the decision: the whole, or its capped
// form with the cap's notice.
type part[R any] struct {
	r       R
	tokens  int
	over    bool
	notices []string
}

// whole delivers p with the summaries and the warning that fit room.
func (f *fitter[R, W]) whole(d *Decision[R], p *part[R], v Verdict, sums []string, sumTokens, room int) {
	lim := f.bud.Remaining
	notices := sums
	total := p.tokens + sumTokens
	if f.notices && policy.LevelOf(f.bud.Used+total, f.bud.Total, f.thresholds) > f.old {
		w, wt := f.warning(total)
		// A warning that would push the result over the budget is left out
		// rather than cutting a result that fits; the next result is cut
		// anyway.
		if lim < 0 || total+wt <= room {
			notices = append(notices, w)
			total += wt
		}
	}
	d.Result = p.r
	if len(notices) > 0 {
		r, n, err := f.w.Attach(p.r, total, notices)
		if err != nil || (lim >= 0 && n > room) {
			// The notices cannot go with it, or make it too long: the
			// result goes alone.
			notices, total = nil, p.tokens
		} else {
			d.Result, total = r, n
		}
	}
	d.Verdict, d.Notices, d.Tokens = v, append(p.notices, notices...), total
	f.level(d, false)
}

// warning returns the notice of a rising warning level for a result of
// tokens tokens (notices before it included), and the notice's own tokens.
// The figures it prints include the notice itself: a fixed point, found in
// a few rounds (the notice's tokens change with its figures).
func (f *fitter[R, W]) warning(tokens int) (string, int) {
	var text string
	t := 0
	for range cutTries {
		used := f.bud.Used + tokens + t
		lvl := policy.LevelOf(used, f.bud.Total, f.thresholds)
		text = WarningText(f.bud.Branch, f.root, used, f.bud.Total, lvl)
		n := f.w.NoticeTokens(text)
		if n == t {
			break
		}
		t = n
	}
	return text, t
}

// total is the whole result's tokens as a notice states them after cut p:
// counted, or, when counting stopped early, estimated from what the cut
// kept (its bytes per token) or from bytes.
func (f *fitter[R, W]) total(p Piece) int {
	rt := f.tokens
	if !f.over {
		return rt
	}
	if p.Kept > 0 && p.Bytes > 0 {
		return max(rt, p.Kept+int(float64(p.RestBytes)*float64(p.Kept)/float64(p.Bytes)))
	}
	return max(rt, p.Kept+p.RestBytes/estimateBytesPerToken)
}

// provisional returns the tokens of a first notice worded by notice with
// kept as given and the largest total the result can show: its figures
// have at least the digits of the final notice's.
func (f *fitter[R, W]) provisional(notice func(kept, total int, estimated bool) string, kept int) int {
	est := max(f.tokens, f.bytes/estimateBytesPerToken)
	return f.w.NoticeTokens(notice(kept, est, f.over))
}

// fitCut cuts with cut to fit limit tokens with the notices of each cut,
// starting from room tokens of content and correcting it by what each try
// overran. ok is false when no try fits; err when cutting fails.
func (f *fitter[R, W]) fitCut(cut func(int) (R, Piece, error), room, limit int, notices func(Piece) []string) (R, []string, int, bool, error) {
	var zero R
	for i := 0; i < cutTries && room > 0; i++ {
		r, p, err := cut(room)
		if err != nil {
			return zero, nil, 0, false, err
		}
		ns := notices(p)
		out, n, err := f.w.Attach(r, p.Kept+f.noticeTokens(ns), ns)
		if err != nil {
			return zero, nil, 0, false, err
		}
		if n <= limit {
			return out, ns, n, true, nil
		}
		room -= n - limit
	}
	return zero, nil, 0, false, nil
}

func (f *fitter[R, W]) noticeTokens(ns []string) int {
	n := 0
	for _, s := range ns {
		n += f.w.NoticeTokens(s)
	}
	return n
}

// capTo cuts the result to its cap, the cap's notice included; ok is false
// when the cap cannot be met (its notice alone is over it) or the cut
// fails.
func (f *fitter[R, W]) capTo(c Cap[R]) (part[R], bool) {
	cut := c.Cut
	if cut == nil {
		cut = f.w.Cut
	}
	stub := func(p Piece) []string { return []string{c.Notice(p.Kept, f.total(p), f.over)} }
	room := c.Limit - f.provisional(c.Notice, c.Limit)
	out, ns, n, ok, err := f.fitCut(cut, room, c.Limit, stub)
	if err != nil {
		return part[R]{}, false
	}
	if !ok {
		// No content fits beside the notice: the notice alone.
		r, p, err := cut(0)
		if err != nil {
			return part[R]{}, false
		}
		p.Kept = 0
		ns = stub(p)
		if out, n, err = f.w.Attach(r, f.noticeTokens(ns), ns); err != nil || n > c.Limit {
			return part[R]{}, false
		}
	}
	return part[R]{r: out, tokens: n, notices: ns}, true
}

// cut cuts the result to fit the budget with its notices: the summaries
// and the cut notice. When no content fits beside the notices, the notices
// are delivered alone (the cut notice alone when the summaries do not fit,
// or, for a branch, the shortest form of it). When not even that fits
// (Budget.Reserve makes it rare: a branch created with less than its
// reserve, or one that paid answers down to its last tokens), nothing is
// delivered: FitSpent. A result held to its cap (capped) keeps no more
// content than the cap.
func (f *fitter[R, W]) cut(sums []string, sumTokens int, capped bool) Decision[R] {
	bud, lim, root := f.bud, f.bud.Remaining, f.root
	notice := func(kept, total int, estimated bool) string {
		return CutNotice(bud.Branch, bud.Handle, root, kept, total, estimated)
	}
	full := func(p Piece) []string {
		return append(append([]string(nil), sums...), notice(p.Kept, f.total(p), f.over))
	}
	room := lim - sumTokens - f.provisional(notice, lim)
	if capped {
		room = min(room, f.capLimit)
	}
	out, ns, n, ok, err := f.fitCut(f.w.Cut, room, lim, full)
	if err != nil {
		return f.refused()
	}
	if ok {
		return f.decide(FitCut, out, ns, n, true)
	}

	// No content fits beside the notices.
	r, p, err := f.w.Cut(0)
	if err != nil {
		return f.refused()
	}
	p.Kept = 0
	fallbacks := [][]string{full(p)}
	if len(sums) > 0 {
		fallbacks = append(fallbacks, full(p)[len(sums):])
	}
	if !root {
		// A main thread at its limit is told why and what to do, in the
		// full notice or in the refusal, never in the short form.
		fallbacks = append(fallbacks, []string{ShortCutNotice(bud.Handle)})
	}
	for _, ns := range fallbacks {
		if out, n, err := f.w.Attach(r, f.noticeTokens(ns), ns); err == nil && n <= lim {
			return f.decide(FitCut, out, ns, n, true)
		}
	}
	out, n, err = f.w.Attach(r, 0, nil)
	if err != nil || n > lim {
		return f.refused()
	}
	// The archive keeps the empty cut; the agent gets the message instead.
	d := f.decide(FitSpent, out, nil, 0, true)
	d.Message = SpentNotice(bud.Branch, bud.Handle, root, max(lim, 0), bud.Total)
	return d
}

// refused is the verdict on a result over the budget that cannot be cut.
func (f *fitter[R, W]) refused() Decision[R] {
	return Decision[R]{Verdict: FitRefused, Level: f.old, Forced: f.spent(0)}
}

// decide completes a verdict that charges tokens; ends is set for a budget
// cut (or a spent budget), which ends a branch.
func (f *fitter[R, W]) decide(v Verdict, r R, notices []string, tokens int, ends bool) Decision[R] {
	d := Decision[R]{Verdict: v, Result: r, Notices: notices, Tokens: tokens}
	f.level(&d, ends)
	return d
}

// level sets the level after d's charge, and whether it ends the branch.
func (f *fitter[R, W]) level(d *Decision[R], ends bool) {
	d.Level = max(policy.LevelOf(f.bud.Used+d.Tokens, f.bud.Total, f.thresholds), f.old)
	d.Forced = !f.root && (ends || f.spent(d.Tokens))
}

// spent reports whether a branch that pays tokens more has used its whole
// budget (Manager.Charge then force-returns it).
func (f *fitter[R, W]) spent(tokens int) bool {
	return !f.root && f.bud.Total > 0 && f.bud.Used+tokens >= f.bud.Total
}
