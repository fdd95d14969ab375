package modelwire

import (
	"fmt"
	"strings"
)

// Automatic folding: the model wire folds the tool results an agent left in
// its context, without being asked, and keeps every fold frozen.
//
// Rules. A result is a candidate for a fold when it is text, at least
// MinTokens long, not a fold tool's and not excluded, and
//   - stale: it is older than the newest KeepRecent results and the results
//     of the newest turn, once the conversation's tool-result tokens (folded
//     or not) pass Trigger;
//   - superseded: a later read of the same file (the built-in Read, cat,
//     sed -n, an MCP read of the path) covers what it read, or the same
//     command was run again later;
//   - repeated: a later result has the same text, byte for byte.
// A result above Oversize tokens keeps only its head and tail from the
// first request that carries it (the middle is archived under the handle
// named in the notice between them).
//
// Prices. Under prompt caching a request pays ReadPrice for the prefix it
// shares with the request before it and WritePrice for everything after the
// first byte that changed. Folding a batch that starts at position p saves
// its tokens, less the stubs' (F), on every later request, read from the
// cache: about ReadPrice·F each; it costs rewriting, once, what the
// previous request had cached after p: (WritePrice−ReadPrice)·tail, tail
// being the tokens from p to the start of the newest turn as folded (the
// newest turn is written anyway). The number of later requests is unknown; a conversation that has
// gone on for R requests is taken to go on for about R more (at least
// MinRequests). Among the batches that fold every candidate from some
// candidate on (folding an earlier one moves p back and lengthens the tail),
// the one with the largest ReadPrice·F·R − (WritePrice−ReadPrice)·tail is
// folded when that is positive and F is at least MinBatch. So folds come in
// batches, near the end of the cached prefix, and a fold far back in the
// conversation (an early read superseded much later) waits until it is
// worth its rewrite. On Anthropic's API a cached prefix is only found at a
// breakpoint or up to about 20 content blocks before one (Claude Code
// keeps its breakpoint on the newest message), so a change further back
// than that is priced as rewriting the whole conversation: small batches
// just behind the newest results are the cheap ones.
//
// Frozen. A decision is recorded by the State (Folder) with its anchor, the
// newest result of the request that made it, before that request is
// forwarded, and repeated, byte for byte, on every request that holds the
// anchor: the folded set only grows and earlier folds keep their bytes. The
// text a stub hides is archived, scrubbed, under a handle that
// branch_recall reads back exactly.

// afConfig is AutoFold with the defaults filled in.
type afConfig struct {
	AutoFold
	exclude map[string]bool
}

func (f AutoFold) resolve() afConfig {
	c := afConfig{AutoFold: f}
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.KeepRecent, DefaultKeepRecent)
	def(&c.Trigger, DefaultTrigger)
	def(&c.MinTokens, DefaultMinTokens)
	def(&c.MinBatch, DefaultMinBatch)
	def(&c.Oversize, DefaultOversize)
	def(&c.KeepHead, DefaultKeepHead)
	def(&c.KeepTail, DefaultKeepTail)
	def(&c.MinRequests, DefaultMinRequests)
	if c.ReadPrice == 0 {
		c.ReadPrice = DefaultReadPrice
	}
	if c.WritePrice == 0 {
		c.WritePrice = DefaultWritePrice
	}
	c.exclude = map[string]bool{}
	for _, n := range f.Exclude {
		c.exclude[n] = true
	}
	return c
}

// active reports whether automatic folding runs for this request, and in
// which mode.
func (a *applier) afActive() (Folder, bool) {
	fo, ok := a.st.(Folder)
	if !ok {
		return nil, false
	}
	switch a.opt.AutoFold.Mode {
	case ModeOn:
		return fo, true
	case ModeObserve:
		return fo, true
	}
	return nil, false
}

func (a *applier) observing() bool { return a.opt.AutoFold.Mode == ModeObserve }

// foldKey is the key of a result's fold record; its oversize record is
// keyed by the handle alone.
func foldKey(handle string) string { return handle + "/fold" }

// eligible reports whether a delivered result may be folded at all.
func (a *applier) eligible(d *delivery, cfg *afConfig) bool {
	r := d.r
	return !d.withheld && !r.other && d.text != "" && !isFoldTool(d.name) && !cfg.exclude[d.name]
}

// oversize cuts a result above the Oversize threshold to its head and tail,
// once and for good: the decision is recorded the first time the result
// is seen and repeated after. It runs before the result is charged, so a
// branch is charged what the model reads.
func (a *applier) oversize(d *delivery) error {
	fo, ok := a.afActive()
	if !ok {
		return nil
	}
	cfg := a.afCfg()
	if cfg.Oversize < 0 || !a.eligible(d, cfg) || len(d.text) < cfg.Oversize {
		return nil // fewer bytes than tokens: under the threshold
	}
	handle := a.opt.Memo.handle(fo, d.r.callID, d.text)
	recs, err := fo.Folds(a.ctx, a.observing(), []string{handle})
	if err != nil {
		return fmt.Errorf("modelwire: read the automatic folds: %w", err)
	}
	rec, ok := recs[handle]
	if !ok {
		if a.afSkip {
			return nil
		}
		tokens := a.count(d.text)
		if tokens <= cfg.Oversize {
			return nil
		}
		stub := a.headTail(d.text, tokens, handle, cfg)
		if stub == "" {
			return nil
		}
		rec = FoldRecord{Handle: handle, ToolUseID: d.r.callID, Anchor: d.r.callID, Kind: FoldOversized,
			Tool: d.name, Brief: a.brief(d), Tokens: tokens, Stub: stub, StubTokens: a.count(stub), Session: a.opt.Session}
		if err := fo.RecordFolds(a.ctx, a.observing(), []FoldRecord{rec}, []string{d.text}); err != nil {
			return fmt.Errorf("modelwire: record the automatic fold of %s: %w", d.r.callID, err)
		}
		a.res.AutoFold.New = append(a.res.AutoFold.New, rec)
	}
	a.res.AutoFold.Folded++
	a.res.AutoFold.Saved += rec.Tokens - rec.StubTokens
	if !a.observing() {
		d.setValue(rec.Stub)
	}
	return nil
}

// headTail is an oversized result's head, a notice naming the handle and
// the offset of the middle it leaves out, and its tail, cut at line ends
// where one is near; "" when there is no middle to leave out.
func (a *applier) headTail(text string, tokens int, handle string, cfg *afConfig) string {
	h := a.prefixWithin(text, cfg.KeepHead)
	t := len(text) - a.suffixWithin(text, cfg.KeepTail)
	if i := strings.LastIndexByte(text[:h], '\n'); i > h*3/4 {
		h = i + 1
	}
	if i := strings.IndexByte(text[t:], '\n'); i >= 0 && i < (len(text)-t)/4 {
		t += i + 1
	}
	if t <= h {
		return ""
	}
	mid := tokens - a.count(text[:h]) - a.count(text[t:])
	notice := fmt.Sprintf("[foldproxy] %s tokens of this result were folded out here (bytes %s to %s of %s): branch_recall with handle %q and offset %d reads them.",
		commas(max(mid, 0)), commas(h), commas(t), commas(len(text)), handle, h)
	return text[:h] + "\n\n" + notice + "\n\n" + text[t:]
}

// prefixWithin returns the length of the longest prefix of s of at most
// limit tokens, at a rune boundary.
func (a *applier) prefixWithin(s string, limit int) int {
	lo, hi := 0, len(s)
	for lo < hi {
		mid := alignRune(s, (lo+hi+1)/2)
		if mid <= lo {
			mid = lo + 1
			for mid < hi && !isRuneStart(s, mid) {
				mid++
			}
		}
		if a.count(s[:mid]) <= limit {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return alignRune(s, lo)
}

// suffixWithin returns the length of the longest suffix of s of at most
// limit tokens, starting at a rune boundary.
func (a *applier) suffixWithin(s string, limit int) int {
	lo, hi := 0, len(s)
	for lo < hi {
		n := (lo + hi + 1) / 2
		start := len(s) - n
		for start < len(s) && !isRuneStart(s, start) {
			start++
		}
		if a.count(s[start:]) <= limit {
			lo = n
		} else {
			hi = n - 1
		}
	}
	start := len(s) - lo
	for start < len(s) && !isRuneStart(s, start) {
		start++
	}
	return len(s) - start
}

func isRuneStart(s string, i int) bool { return i >= len(s) || s[i]&0xC0 != 0x80 }

// afItem is a result that stays in the request, as the planner sees it.
type afItem struct {
	d        *delivery
	eligible bool
	tokens   int
	handle   string
	stub     string // for a new fold
	stubTok  int
	folded   bool // folded by a record
	recStub  int  // the record's stub tokens, when folded
	kind     string
	spec     callSpec  // what its call read or ran
	hash     [2]uint64 // of its text, for repeats
}

// autoFold folds the results that stay: it repeats the recorded folds whose
// anchors the conversation holds, then plans a new batch.
func (a *applier) autoFold() error {
	fo, ok := a.afActive()
	if !ok || len(a.dels) == 0 {
		return nil
	}
	cfg := a.afCfg()
	c := a.c
	items := make([]afItem, len(a.dels))
	var keys []string
	for x := range a.dels {
		d := &a.dels[x]
		it := &items[x]
		it.d = d
		if d.text != "" {
			it.tokens = a.opt.Memo.countText(d.text, a.count)
		}
		if !a.eligible(d, cfg) || it.tokens < cfg.MinTokens {
			continue
		}
		it.eligible = true
		it.handle = a.opt.Memo.handle(fo, d.r.callID, d.text)
		keys = append(keys, foldKey(it.handle))
	}
	recs, err := fo.Folds(a.ctx, a.observing(), keys)
	if err != nil {
		return fmt.Errorf("modelwire: read the automatic folds: %w", err)
	}
	// Repeat the recorded folds whose anchors are here.
	for x := range items {
		it := &items[x]
		if !it.eligible {
			continue
		}
		rec, ok := recs[foldKey(it.handle)]
		if !ok {
			continue
		}
		if _, here := c.res[rec.Anchor]; !here {
			continue
		}
		it.folded, it.kind, it.recStub = true, rec.Kind, rec.StubTokens
		a.res.AutoFold.Folded++
		a.res.AutoFold.Saved += rec.Tokens - rec.StubTokens
		if !a.observing() {
			it.d.stub = rec.Stub
		}
	}
	if a.afSkip {
		return nil
	}
	batch := a.plan(items, cfg)
	if len(batch) == 0 {
		return nil
	}
	anchor := a.dels[len(a.dels)-1].r.callID
	newRecs := make([]FoldRecord, 0, len(batch))
	texts := make([]string, 0, len(batch))
	for _, x := range batch {
		it := &items[x]
		rec := FoldRecord{Handle: it.handle, ToolUseID: it.d.r.callID, Anchor: anchor, Kind: it.kind,
			Tool: it.d.name, Brief: a.brief(it.d), Tokens: it.tokens, Stub: it.stub, StubTokens: it.stubTok, Session: a.opt.Session}
		newRecs = append(newRecs, rec)
		texts = append(texts, it.d.text)
	}
	if err := fo.RecordFolds(a.ctx, a.observing(), newRecs, texts); err != nil {
		return fmt.Errorf("modelwire: record %d automatic folds: %w", len(newRecs), err)
	}
	for i, x := range batch {
		it := &items[x]
		a.res.AutoFold.New = append(a.res.AutoFold.New, newRecs[i])
		a.res.AutoFold.Folded++
		a.res.AutoFold.Saved += it.tokens - it.stubTok
		if !a.observing() {
			it.d.stub = it.stub
		}
	}
	return nil
}

// plan chooses the batch of new folds (indexes into items); see the
// comment at the top of this file.
func (a *applier) plan(items []afItem, cfg *afConfig) []int {
	cands := a.candidates(items, cfg)
	if len(cands) == 0 {
		return nil
	}
	return a.choose(items, cands, cfg)
}

// candidates marks the results a rule would fold (their kind, stub and
// the stub's tokens) and returns them, oldest first: never one of the
// newest turn, nor one whose stub would not be smaller.
func (a *applier) candidates(items []afItem, cfg *afConfig) []int {
	n := len(items)
	// The newest results: every result of the newest turn, and the newest
	// KeepRecent.
	lastMsg := items[n-1].d.msg
	newestTurn := n - 1
	for newestTurn > 0 && a.sameRun(items[newestTurn-1].d.msg, lastMsg) {
		newestTurn--
	}
	keepFrom := min(newestTurn, max(n-cfg.KeepRecent, 0))
	// The conversation's tool-result tokens, folded or not.
	total := 0
	for x := range items {
		total += items[x].tokens // the stubs of the folded ones were theirs
	}
	stale := total >= cfg.Trigger
	// Superseded and repeated: the last result of each read, run and text.
	var sup supersession
	lastHash := map[[2]uint64]int{}
	for x := range items {
		it := &items[x]
		if !it.eligible {
			continue
		}
		if !cfg.NoSuperseded {
			it.spec = a.opt.Memo.spec(it.d.name, a.callInput(it.d.r.callID))
			sup.add(x, it.spec)
		}
		if !cfg.NoRepeats {
			it.hash = a.opt.Memo.sum128(it.d.text)
			lastHash[it.hash] = x
		}
	}
	var cands []int
	for x := range items {
		it := &items[x]
		if !it.eligible || it.folded || x >= newestTurn {
			continue
		}
		switch {
		case !cfg.NoSuperseded && sup.superseded(x, it.spec):
			it.kind = FoldSuperseded
		case !cfg.NoRepeats && lastHash[it.hash] > x:
			it.kind = FoldRepeat
		case stale && x < keepFrom:
			it.kind = FoldStale
		default:
			continue
		}
		it.stub = a.stubText(it)
		it.stubTok = a.count(it.stub)
		if it.stubTok >= it.tokens {
			continue
		}
		cands = append(cands, x)
	}
	return cands
}

// choose prices every batch of the newest candidates (cands[k:]) against
// the prompt cache and returns the one that pays best, or nil when none
// pays or the best folds fewer than MinBatch tokens.
func (a *applier) choose(items []afItem, cands []int, cfg *afConfig) []int {
	c := a.c
	// S[m]: the tokens of messages m.. as forwarded without the batch.
	msgTok := a.msgTokens()
	// A message's tokens as received, less what the results it holds lose
	// before any new fold (scrubbed, cut, already folded).
	adj := make([]int, len(c.msgs))
	for x := range items {
		it := &items[x]
		recv := it.tokens
		if it.d.text != it.d.r.text {
			recv = a.opt.Memo.countText(it.d.r.text, a.count)
		}
		now := it.tokens
		if it.folded {
			now = it.recStub
		}
		adj[it.d.msg] += now - recv
	}
	S := make([]int, len(c.msgs)+1)
	for m := len(c.msgs) - 1; m >= 0; m-- {
		S[m] = S[m+1] + max(msgTok[m]+adj[m], 0)
	}
	// Anthropic's cache reads a prefix at a breakpoint, or at a block
	// boundary at most lookbackBlocks before one (the newest message
	// carries the breakpoint): a change further back than that rewrites
	// everything after the system prompt. OpenAI's caches read any prefix.
	far := len(c.msgs)
	if c.d == Anthropic {
		blocks := 0
		for m := len(c.msgs) - 1; m >= 0; m-- {
			blocks += max(len(c.msgs[m].blocks), 1)
			if blocks > lookbackBlocks {
				far = m
				break
			}
		}
	}
	// The newest turn (the model's last answer and the results it asked
	// for) is new in this request: it is written to the cache whatever is
	// folded. A fold rewrites what the previous request had in the cache,
	// from the fold to there.
	newFrom := len(c.msgs)
	for newFrom > 0 && c.msgs[newFrom-1].role != "assistant" {
		newFrom--
	}
	for newFrom > 0 && c.msgs[newFrom-1].role == "assistant" {
		newFrom--
	}
	R := max(a.requests(), cfg.MinRequests)
	best, bestNet, F := -1, 0.0, 0
	var bestF int
	for k := len(cands) - 1; k >= 0; k-- {
		it := &items[cands[k]]
		F += it.tokens - it.stubTok
		from := it.d.msg
		if from <= far {
			from = 0
		}
		tail := max(S[from]-S[max(newFrom, from)]-F, 0)
		net := cfg.ReadPrice*float64(F)*float64(R) - (cfg.WritePrice-cfg.ReadPrice)*float64(tail)
		if net > bestNet {
			best, bestNet, bestF = k, net, F
		}
	}
	if best < 0 || bestF < cfg.MinBatch {
		return nil
	}
	return cands[best:]
}

// lookbackBlocks is how far before a cache breakpoint Anthropic's API
// looks for a cached prefix (about 20 content blocks, its documentation
// says).
const lookbackBlocks = 20

// sameRun reports whether messages i and j (i <= j) are in one run of
// result messages (no assistant message between them).
func (a *applier) sameRun(i, j int) bool {
	for m := i; m <= j; m++ {
		if a.c.msgs[m].role == "assistant" {
			return false
		}
	}
	return true
}

// requests is the number of requests the conversation took so far: its
// assistant turns.
func (a *applier) requests() int {
	n := 0
	prev := ""
	for i := range a.c.msgs {
		r := a.c.msgs[i].role
		if r == "assistant" && prev != "assistant" {
			n++
		}
		prev = r
	}
	return n
}

// msgTokens are the tokens of each message as received (countContext).
func (a *applier) msgTokens() []int { return a.msgTok }

// callInput is the input of the call a result answers.
func (a *applier) callInput(callID string) string {
	cr, ok := a.c.calls[callID]
	if !ok {
		return ""
	}
	return a.c.msgs[cr.msg].calls[cr.idx].input
}

// stubText is what replaces a folded result: the tool, its input in
// brief, its size, why when it was superseded or repeated, and the handle
// that reads it back, in as few tokens as say it (about 37).
func (a *applier) stubText(it *afItem) string {
	why := ""
	switch it.kind {
	case FoldSuperseded:
		why = ", superseded"
	case FoldRepeat:
		why = ", repeated"
	}
	brief := a.brief(it.d)
	if brief != "" {
		brief = " " + quoteBrief(brief)
	}
	return fmt.Sprintf("[foldproxy: folded %s%s (%s tokens%s); branch_recall with handle %q]",
		toolLabel(it.d.name), brief, commas(it.tokens), why, it.handle)
}

// brief is a result's call input in brief.
func (a *applier) brief(d *delivery) string { return briefOf(a.callInput(d.r.callID)) }

// afCfg returns the resolved configuration, once per request.
func (a *applier) afCfg() *afConfig {
	if a.af == nil {
		cfg := a.opt.AutoFold.resolve()
		a.af = &cfg
	}
	return a.af
}

// commas formats n with thousands separators.
func commas(n int) string {
	s := fmt.Sprint(n)
	if n < 0 {
		return "-" + commas(-n)
	}
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// toolLabel is a tool's name as a stub shows it: an MCP tool without its
// client prefix.
func toolLabel(name string) string {
	if strings.HasPrefix(name, "mcp__") {
		if i := strings.LastIndex(name, "__"); i > 4 {
			return name[i+2:]
		}
	}
	if name == "" {
		return "result"
	}
	return name
}
