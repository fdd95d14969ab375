package main

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/foldproxy/foldproxy/fold"
	"github.com/foldproxy/foldproxy/fold/store"
	"github.com/foldproxy/foldproxy/intercept"
)

// reportDefaultAudit is the audit log in the default state folder, which
// serve puts beside the config file.
const reportDefaultAudit = ".foldproxy/audit.jsonl"

// reportLargest is how many of the largest results the report lists.
const reportLargest = 10

const reportUsage = `Usage: foldproxy report [--audit FILE] [--state DIR] [--session S] [--json]

Summarises foldproxy's token-accounting audit log, with its rotated files
FILE.N … FILE.1: tokens by session, branch, upstream and tool, the
compression achieved by branches, the largest results and redactions.

With --state it reads the branch records from the state folder DIR (the
--state of serve; its Badger store, DIR/badger, is opened read-only): every
branch with its session, parent, depth, status, reason, budget used and
total, calls, archived calls and cut handles. Stop the proxy first: the
store can be read only while no proxy holds it. A store left open by a
proxy that is gone (kill -9, a crash) has its log replayed first, as the
proxy's next start would, and is then read. With --state alone only the
branches are printed; give --audit too for both.

FILE defaults to .foldproxy/audit.jsonl, the log in the default state
folder, which is .foldproxy beside the config file: run report from the
config file's folder, or pass --audit (audit.path or stateDir may have moved
it).

Flags:
`

// reportCommand prints the token-accounting report of an audit log.
type reportCommand struct {
	stdout, stderr io.Writer
}

// Run parses the flags, reads the log and prints the report.
func (c *reportCommand) Run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("report", flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	fs.Usage = func() {
		fmt.Fprint(c.stderr, reportUsage)
		fs.PrintDefaults()
	}
	path := fs.String("audit", reportDefaultAudit, "the audit log `FILE`")
	session := fs.String("session", "", "report on session `S` only")
	state := fs.String("state", "", "read the branch records of the state folder `DIR` (read-only; stop the proxy first; a store left by kill -9 is recovered first)")
	asJSON := fs.Bool("json", false, "print one JSON object instead of tables")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	auditSet := false
	fs.Visit(func(f *flag.Flag) { auditSet = auditSet || f.Name == "audit" })

	var store *repStore
	if *state != "" {
		var err error
		if store, err = readStore(ctx, *state, *session); err != nil {
			return err
		}
		if !auditSet {
			if *asJSON {
				enc := json.NewEncoder(c.stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(struct {
					Store *repStore `json:"store"`
				}{store})
			}
			return store.writeText(c.stdout)
		}
	}

	files, err := intercept.AuditFiles(*path)
	if err != nil {
		return err
	}
	agg := newRepAggregator(*session)
	st, err := intercept.ReadAuditStats(files, func(r intercept.Record) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		agg.add(r)
		return nil
	})
	if err != nil {
		return err
	}
	if st.Skipped > 0 {
		fmt.Fprintf(c.stderr, "foldproxy report: warning: skipped %d line(s) that are not audit records (first at %s)\n",
			st.Skipped, st.FirstSkipped)
	}
	rep := agg.reportData(files, st)
	rep.Store = store
	if *asJSON {
		enc := json.NewEncoder(c.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	if err := rep.writeText(c.stdout); err != nil {
		return err
	}
	if store != nil {
		fmt.Fprintln(c.stdout)
		return store.writeText(c.stdout)
	}
	return nil
}

// repStore is what the report reads from a state folder's store.
type repStore struct {
	Dir string `json:"dir"` // the Badger folder that was read
	// Recovered is set when the store had been left open by a process
	// that is gone (kill -9, a crash) and its log was replayed first.
	Recovered bool             `json:"recovered,omitempty"`
	Session   string           `json:"session_filter,omitempty"`
	Branches  []repStoreBranch `json:"branches"`
	// Strategy is the project's strategy score over its closed branches
	// (fold.StrategyScore).
	Strategy fold.Score `json:"strategy"`
}

// repStoreBranch is one branch record as the store holds it.
type repStoreBranch struct {
	Session     string `json:"session"`
	Branch      string `json:"branch"`
	Parent      string `json:"parent,omitempty"`
	Depth       int    `json:"depth"`
	Description string `json:"description,omitempty"`
	Status      string `json:"status"`
	Reason      string `json:"reason,omitempty"`
	BudgetUsed  int    `json:"budget_used"`
	BudgetTotal int    `json:"budget_total"` // 0: unlimited
	Calls       int    `json:"calls"`
	// Archived is the number of calls archived under the branch, which
	// branch_recall can still read.
	Archived int `json:"archived_calls"`
	// CutHandles are the handles of the branch's latest cut results (at
	// most 16: a branch's record keeps no more), CutCount all of them.
	CutHandles []string  `json:"cut_handles"`
	CutCount   int       `json:"cut_count"`
	Created    time.Time `json:"created"`
	Closed     time.Time `json:"closed,omitzero"`
	// ModelContext (roots) is the main thread's context as the model last
	// saw it on the model wire, before and after folding.
	ModelContext *fold.ModelContext `json:"model_context,omitempty"`
}

// reportArchivePage is how many archived calls are read at a time to count
// them.
const reportArchivePage = 64

// readStore opens the Badger store of the state folder dir for reading
// (store.OpenBadgerReader: read-only, or recovered first after a crash) and
// reads its branch records, of session only when not empty. dir may also
// be the Badger folder itself.
func readStore(ctx context.Context, dir, session string) (*repStore, error) {
	bdir := filepath.Join(dir, "badger")
	if fi, err := os.Stat(bdir); err != nil || !fi.IsDir() {
		if _, err := os.Stat(filepath.Join(dir, "MANIFEST")); err != nil {
			return nil, fmt.Errorf("--state %s: no Badger store in it (want %s, as serve --state %s writes): %w", dir, bdir, dir, os.ErrNotExist)
		}
		bdir = dir
	}
	st, recovered, err := store.OpenBadgerReader(bdir, nil)
	if err != nil {
		return nil, fmt.Errorf("--state %s: %w", dir, err)
	}
	defer st.Close()
	bs, err := st.Branches(ctx, session)
	if err != nil {
		return nil, fmt.Errorf("--state %s: reading branches: %w", dir, err)
	}
	out := &repStore{Dir: bdir, Session: session, Recovered: recovered, Branches: make([]repStoreBranch, 0, len(bs)), Strategy: fold.StrategyScore(bs)}
	for _, b := range bs {
		n, err := countArchived(ctx, st, b.ID)
		if err != nil {
			return nil, fmt.Errorf("--state %s: %w", dir, err)
		}
		out.Branches = append(out.Branches, repStoreBranch{
			Session: b.Session, Branch: b.ID, Parent: b.Parent, Depth: b.Depth, Description: b.Description,
			Status: string(b.Status), Reason: b.Reason, BudgetUsed: b.Used, BudgetTotal: b.Budget,
			Calls: b.Calls, Archived: n, CutHandles: append([]string{}, b.Cuts...), CutCount: b.CutCount,
			Created: b.Created, Closed: b.Closed, ModelContext: b.ModelContext,
		})
	}
	slices.SortStableFunc(out.Branches, func(x, y repStoreBranch) int {
		return cmp.Or(cmp.Compare(x.Session, y.Session), cmp.Compare(x.Depth, y.Depth), x.Created.Compare(y.Created), cmp.Compare(x.Branch, y.Branch))
	})
	return out, nil
}

// countArchived counts the archived calls of a branch, a page at a time.
func countArchived(ctx context.Context, st fold.Store, branch string) (int, error) {
	n, from := 0, 0
	for {
		calls, err := st.Calls(ctx, branch, from, reportArchivePage)
		if err != nil {
			return 0, fmt.Errorf("reading the archive of %s: %w", branch, err)
		}
		n += len(calls)
		if len(calls) < reportArchivePage {
			return n, nil
		}
		from = calls[len(calls)-1].Seq + 1
	}
}

// writeText prints the branch records as a table.
func (s *repStore) writeText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	p := func(format string, args ...any) { fmt.Fprintf(tw, format, args...) }
	how := "read-only"
	if s.Recovered {
		how = "left open by a process that is gone; its log replayed, then read"
	}
	p("State store: %s (%s)\nBranches: %d", repCell(s.Dir), how, len(s.Branches))
	if s.Session != "" {
		p(" for session %s", repCell(s.Session))
	}
	sc := s.Strategy
	p("\nStrategy score: %.3f (token efficiency %.3f x 0.4, velocity %.3f x 0.3, accuracy %.3f x 0.3) over %d closed branches, %d returned, %d force-returned",
		sc.Score, sc.TokenEfficiency, sc.Velocity, sc.Accuracy, sc.Branches, sc.Returned, sc.Forced)
	p("\n\nBranches in the store\n")
	p("SESSION\tBRANCH\tPARENT\tDEPTH\tSTATUS\tREASON\tUSED\tBUDGET\tCALLS\tARCHIVED\tCUT HANDLES\n")
	for _, b := range s.Branches {
		budget := "unlimited"
		if b.BudgetTotal > 0 {
			budget = strconv.Itoa(b.BudgetTotal)
		}
		cuts := "-"
		if len(b.CutHandles) > 0 {
			cuts = repCell(strings.Join(b.CutHandles, ","))
			if b.CutCount > len(b.CutHandles) {
				cuts = fmt.Sprintf("%d, the last: %s", b.CutCount, cuts)
			}
		}
		p("%s\t%s\t%s\t%d\t%s\t%s\t%d\t%s\t%d\t%d\t%s\n", repOrDash(b.Session), repOrDash(b.Branch), repOrDash(b.Parent),
			b.Depth, repOrDash(b.Status), repOrDash(b.Reason), b.BudgetUsed, budget, b.Calls, b.Archived, cuts)
	}
	first := true
	for _, b := range s.Branches {
		if mc := b.ModelContext; mc != nil {
			if first {
				p("\nModel context (main thread as the model last saw it)\nSESSION\tREQUESTS\tBEFORE FOLDING\tAFTER FOLDING\tBRANCHES FOLDED\n")
				first = false
			}
			p("%s\t%d\t%d\t%d\t%d\n", repOrDash(b.Session), mc.Requests, mc.TokensBefore, mc.TokensAfter, mc.Folded)
		}
	}
	return tw.Flush()
}

// repSums are the totals of a group of calls.
type repSums struct {
	Calls           int `json:"calls"`
	ArgTokens       int `json:"arg_tokens"`
	ResultTokens    int `json:"result_tokens"`
	DeliveredTokens int `json:"delivered_tokens"`
	Cuts            int `json:"cuts"`
	Errors          int `json:"errors"` // error, refused and withheld outcomes
}

func (s *repSums) add(r intercept.Record) {
	s.Calls++
	s.ArgTokens += r.ArgTokens
	s.ResultTokens += r.ResultTokens
	s.DeliveredTokens += r.DeliveredTokens
	switch r.Outcome {
	case intercept.OutcomeCut:
		s.Cuts++
	case intercept.OutcomeError, intercept.OutcomeRefused, intercept.OutcomeWithheld:
		s.Errors++
	}
}

type repSession struct {
	Session string `json:"session"`
	repSums
	Branches int `json:"branches"` // branches created
}

type repBranch struct {
	Session string `json:"session"`
	Branch  string `json:"branch"`
	Parent  string `json:"parent,omitempty"`
	Depth   int    `json:"depth"`
	Status  string `json:"status,omitempty"`
	Reason  string `json:"reason,omitempty"`
	repSums
	// ReturnedTokens are the tokens its parent received for the branch:
	// the branch_create and branch_return answers, as charged to it.
	ReturnedTokens int `json:"returned_tokens"`

	first time.Time // first record, for ordering
}

type repUpstream struct {
	Upstream string `json:"upstream"`
	repSums
}

type repTool struct {
	Upstream string `json:"upstream"`
	Method   string `json:"method"`
	Tool     string `json:"tool"`
	repSums
}

type repCompression struct {
	// InsideBranches is the sum of delivered tokens of calls attributed to
	// branches other than the root.
	InsideBranches int `json:"tokens_inside_branches"`
	// Returned is what parents received for their branches instead of
	// what the branches saw: the branch_create answers and the
	// branch_return answers (message and return value included), as
	// charged to the parents.
	Returned int `json:"tokens_returned"`
	// Ratio is InsideBranches/Returned; nil when nothing was returned.
	Ratio *float64 `json:"ratio"`
}

type repResult struct {
	Time            time.Time `json:"time"`
	Session         string    `json:"session"`
	Branch          string    `json:"branch"`
	Upstream        string    `json:"upstream"`
	Method          string    `json:"method"`
	Tool            string    `json:"tool"`
	ResultTokens    int       `json:"result_tokens"`
	DeliveredTokens int       `json:"delivered_tokens"`
	Outcome         string    `json:"outcome"`
}

type repRedaction struct {
	Rule  string `json:"rule"`
	Count int    `json:"count"`
}

// reportData is everything the report prints, in text or as JSON.
type reportData struct {
	Files          []string       `json:"files"`
	Session        string         `json:"session_filter,omitempty"`
	Records        int            `json:"records"`
	SkippedLines   int            `json:"skipped_lines"`
	Sessions       []repSession   `json:"sessions"`
	Branches       []repBranch    `json:"branches"`
	Upstreams      []repUpstream  `json:"upstreams"`
	Tools          []repTool      `json:"tools"`
	Compression    repCompression `json:"compression"`
	LargestResults []repResult    `json:"largest_results"`
	Redactions     []repRedaction `json:"redactions"`
	// Store holds the branch records of the state folder, with --state.
	Store *repStore `json:"store,omitempty"`
	// Model is the model wire: per model session and in total.
	Model repModel `json:"model"`
}

// repModel is the model wire's part of the report.
type repModel struct {
	Sessions []repModelSession `json:"sessions"`
	Total    repModelSums      `json:"total"`
	// Folds are the automatic folds decided, oldest first (the newest
	// reportFolds).
	Folds []repFold `json:"folds"`
	// EstimateMethod says how EstimatedWithout is made.
	EstimateMethod string `json:"estimate_method"`
}

// reportFolds bounds the folds listed.
const reportFolds = 200

type repModelSession struct {
	Session string `json:"session"`
	repModelSums
}

// repModelSums add up model requests: the conversation's tokens as the
// client sent them and as forwarded, automatic folds (and in observe mode
// what they would have done), the usage the model APIs reported with its
// billed input at the cache prices, and the modelled bills.
type repModelSums struct {
	Requests      int     `json:"requests"`
	Received      int     `json:"tokens_received"`
	Forwarded     int     `json:"tokens_forwarded"`
	Folds         int     `json:"folds"`
	FoldSaved     int     `json:"fold_saved_tokens"`
	WouldFolds    int     `json:"observe_would_fold"`
	WouldSave     int     `json:"observe_would_save_tokens"`
	Recalls       int     `json:"recalls"`
	UsageRequests int     `json:"usage_requests"` // requests whose answer reported usage
	Input         int     `json:"usage_input"`
	CacheRead     int     `json:"usage_cache_read"`
	CacheWrite    int     `json:"usage_cache_write"`
	Output        int     `json:"usage_output"`
	Billed        float64 `json:"billed_input"`
	// EstimatedWithout is the billed input estimated without foldproxy
	// (see repModel.EstimateMethod), over the requests that reported usage.
	EstimatedWithout float64 `json:"billed_input_without_estimate"`
	ModelledBilled   float64 `json:"modelled_billed"`
	ModelledWithout  float64 `json:"modelled_without"`
}

func (s *repModelSums) add(r intercept.Record) {
	s.Requests++
	s.Received += r.ResultTokens
	s.Forwarded += r.DeliveredTokens
	m := r.Model
	if m == nil {
		return
	}
	s.Folds += len(m.Folds)
	s.FoldSaved += m.FoldSaved
	s.WouldFolds += len(m.WouldFolds)
	s.WouldSave += m.WouldSave
	s.Recalls += m.Recalls
	s.ModelledBilled += m.ModelledBilled
	s.ModelledWithout += m.ModelledWithout
	if u := m.Usage; u != nil {
		s.UsageRequests++
		s.Input += u.Input
		s.CacheRead += u.CacheRead
		s.CacheWrite += u.CacheWrite
		s.Output += u.Output
		s.Billed += u.Billed
		est := u.Billed
		switch {
		case u.CacheRead == 0 && u.CacheWrite == 0 && r.DeliveredTokens > 0:
			// No prompt cache at work: the bill follows the tokens sent.
			est = u.Billed * float64(r.ResultTokens) / float64(r.DeliveredTokens)
		case m.ModelledBilled > 0:
			est = u.Billed * m.ModelledWithout / m.ModelledBilled
		}
		s.EstimatedWithout += est
	}
}

// repFold is one automatic fold in the report.
type repFold struct {
	Time    time.Time `json:"time"`
	Session string    `json:"session"`
	intercept.FoldNote
}

// modelEstimateMethod is repModel.EstimateMethod.
const modelEstimateMethod = "Each request's billed input as the model API reported it, scaled by the ratio of two modelled bills of its input in o200k tokens at the cache prices: " +
	"without foldproxy (the conversation as the client sent it, the session's previous request read from the cache and the growth written) " +
	"over as forwarded (read up to the first message that differs from the session's previous forwarded request, the rest written); " +
	"for an answer that reports no cache read or write, by the ratio of the tokens the client sent to those forwarded."

type repBranchKey struct{ session, branch string }
type repToolKey struct{ upstream, method, tool string }

// repAggregator folds records into the report's groups.
type repAggregator struct {
	filter     string
	records    int
	sessions   map[string]*repSession
	branches   map[repBranchKey]*repBranch
	upstreams  map[string]*repUpstream
	tools      map[repToolKey]*repTool
	comp       repCompression
	results    []repResult
	redactions map[string]int

	model         repModel
	modelSessions map[string]*repModelSession
}

func newRepAggregator(session string) *repAggregator {
	return &repAggregator{
		filter:     session,
		sessions:   map[string]*repSession{},
		branches:   map[repBranchKey]*repBranch{},
		upstreams:  map[string]*repUpstream{},
		tools:      map[repToolKey]*repTool{},
		redactions: map[string]int{},

		modelSessions: map[string]*repModelSession{},
	}
}

func (a *repAggregator) session(id string) *repSession {
	s, ok := a.sessions[id]
	if !ok {
		s = &repSession{Session: id}
		a.sessions[id] = s
	}
	return s
}

func (a *repAggregator) branch(r intercept.Record) *repBranch {
	k := repBranchKey{r.Session, r.Branch}
	b, ok := a.branches[k]
	if !ok {
		b = &repBranch{Session: r.Session, Branch: r.Branch, Depth: r.Depth, first: r.Time}
		a.branches[k] = b
	}
	if b.Parent == "" {
		b.Parent = r.Parent
	}
	if r.Depth > b.Depth {
		b.Depth = r.Depth
	}
	return b
}

func (a *repAggregator) add(r intercept.Record) {
	if a.filter != "" && r.Session != a.filter {
		return
	}
	a.records++
	switch r.Kind {
	case intercept.KindCall:
		a.addCall(r)
	case intercept.KindBranch:
		a.addEvent(r)
	case intercept.KindModel:
		a.addModel(r)
	}
}

func (a *repAggregator) addModel(r intercept.Record) {
	if r.Model == nil {
		return // a request relayed without the context manager
	}
	a.model.Total.add(r)
	s, ok := a.modelSessions[r.Session]
	if !ok {
		s = &repModelSession{Session: r.Session}
		a.modelSessions[r.Session] = s
	}
	s.add(r)
	for _, f := range r.Model.Folds {
		a.model.Folds = append(a.model.Folds, repFold{Time: r.Time, Session: r.Session, FoldNote: f})
	}
	if n := len(a.model.Folds); n > 2*reportFolds {
		a.model.Folds = append(a.model.Folds[:0], a.model.Folds[n-reportFolds:]...)
	}
}

func (a *repAggregator) addCall(r intercept.Record) {
	a.session(r.Session).add(r)
	a.branch(r).add(r)
	u, ok := a.upstreams[r.Upstream]
	if !ok {
		u = &repUpstream{Upstream: r.Upstream}
		a.upstreams[r.Upstream] = u
	}
	u.add(r)
	tk := repToolKey{r.Upstream, r.Method, r.Tool}
	t, ok := a.tools[tk]
	if !ok {
		t = &repTool{Upstream: r.Upstream, Method: r.Method, Tool: r.Tool}
		a.tools[tk] = t
	}
	t.add(r)
	if r.Depth > 0 {
		a.comp.InsideBranches += r.DeliveredTokens
	}
	if r.ResultTokens > 0 {
		a.results = append(a.results, repResult{
			Time: r.Time, Session: r.Session, Branch: r.Branch, Upstream: r.Upstream, Method: r.Method,
			Tool: r.Tool, ResultTokens: r.ResultTokens, DeliveredTokens: r.DeliveredTokens, Outcome: r.Outcome,
		})
	}
	for rule, n := range r.Redactions {
		if n > 0 {
			a.redactions[rule] += n
		}
	}
}

func (a *repAggregator) addEvent(r intercept.Record) {
	if r.Branch == "" {
		return // a refusal of a creation names no branch
	}
	b := a.branch(r)
	switch r.Event {
	case "created":
		a.session(r.Session).Branches++
		if b.Status == "" {
			b.Status = "active"
		}
		b.ReturnedTokens += r.Tokens
		a.comp.Returned += r.Tokens
	case "returned", "forced", "failed":
		b.Status = r.Status
		if b.Status == "" {
			b.Status = r.Event
		}
		b.Reason = r.Reason
		if r.Event != "failed" {
			b.ReturnedTokens += r.Tokens
			a.comp.Returned += r.Tokens
		}
	}
}

// reportData sorts the groups into the report.
func (a *repAggregator) reportData(files []string, st intercept.ReadStats) *reportData {
	rep := &reportData{
		Files:          files,
		Session:        a.filter,
		Records:        a.records,
		SkippedLines:   st.Skipped,
		Sessions:       []repSession{},
		Branches:       []repBranch{},
		Upstreams:      []repUpstream{},
		Tools:          []repTool{},
		LargestResults: []repResult{},
		Redactions:     []repRedaction{},
		Compression:    a.comp,
	}
	if a.comp.Returned > 0 {
		ratio := float64(a.comp.InsideBranches) / float64(a.comp.Returned)
		rep.Compression.Ratio = &ratio
	}
	byDelivered := func(x, y repSums) int { return cmp.Compare(y.DeliveredTokens, x.DeliveredTokens) }
	for _, s := range a.sessions {
		rep.Sessions = append(rep.Sessions, *s)
	}
	slices.SortFunc(rep.Sessions, func(x, y repSession) int {
		return cmp.Or(byDelivered(x.repSums, y.repSums), cmp.Compare(x.Session, y.Session))
	})
	for _, b := range a.branches {
		rep.Branches = append(rep.Branches, *b)
	}
	slices.SortFunc(rep.Branches, func(x, y repBranch) int {
		return cmp.Or(cmp.Compare(x.Session, y.Session), x.first.Compare(y.first), cmp.Compare(x.Branch, y.Branch))
	})
	for _, u := range a.upstreams {
		rep.Upstreams = append(rep.Upstreams, *u)
	}
	slices.SortFunc(rep.Upstreams, func(x, y repUpstream) int {
		return cmp.Or(byDelivered(x.repSums, y.repSums), cmp.Compare(x.Upstream, y.Upstream))
	})
	for _, t := range a.tools {
		rep.Tools = append(rep.Tools, *t)
	}
	slices.SortFunc(rep.Tools, func(x, y repTool) int {
		return cmp.Or(byDelivered(x.repSums, y.repSums), cmp.Compare(x.Upstream, y.Upstream),
			cmp.Compare(x.Method, y.Method), cmp.Compare(x.Tool, y.Tool))
	})
	slices.SortStableFunc(a.results, func(x, y repResult) int { return cmp.Compare(y.ResultTokens, x.ResultTokens) })
	rep.LargestResults = append(rep.LargestResults, a.results[:min(len(a.results), reportLargest)]...)
	for rule, n := range a.redactions {
		rep.Redactions = append(rep.Redactions, repRedaction{rule, n})
	}
	slices.SortFunc(rep.Redactions, func(x, y repRedaction) int {
		return cmp.Or(cmp.Compare(y.Count, x.Count), cmp.Compare(x.Rule, y.Rule))
	})
	rep.Model = a.model
	rep.Model.EstimateMethod = modelEstimateMethod
	rep.Model.Sessions = []repModelSession{}
	for _, s := range a.modelSessions {
		rep.Model.Sessions = append(rep.Model.Sessions, *s)
	}
	slices.SortFunc(rep.Model.Sessions, func(x, y repModelSession) int {
		return cmp.Or(cmp.Compare(y.Received, x.Received), cmp.Compare(x.Session, y.Session))
	})
	if n := len(rep.Model.Folds); n > reportFolds {
		rep.Model.Folds = rep.Model.Folds[n-reportFolds:]
	}
	if rep.Model.Folds == nil {
		rep.Model.Folds = []repFold{}
	}
	return rep
}

// cell makes a name safe for a table cell: control characters (tabs,
// newlines, terminal escapes from a tampered log) become spaces.
func repCell(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
}

// repOrDash shows an empty name as "-".
func repOrDash(s string) string {
	if s == "" {
		return "-"
	}
	return repCell(s)
}

// repUpstreamName shows foldproxy's own tools, which have no upstream.
func repUpstreamName(s string) string {
	if s == "" {
		return "(foldproxy)"
	}
	return repCell(s)
}

// writeText prints the report as tables.
func (rep *reportData) writeText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	p := func(format string, args ...any) { fmt.Fprintf(tw, format, args...) }
	section := func(title string) { p("\n%s\n", title) }
	sums := func(s repSums) string {
		return fmt.Sprintf("%d\t%d\t%d\t%d\t%d\t%d", s.Calls, s.ArgTokens, s.ResultTokens, s.DeliveredTokens, s.Cuts, s.Errors)
	}
	const sumsHead = "CALLS\tARG\tRESULT\tDELIVERED\tCUTS\tERRORS"

	p("Audit log: %s", repCell(rep.Files[len(rep.Files)-1]))
	if n := len(rep.Files) - 1; n > 0 {
		p(" (+%d rotated)", n)
	}
	p("\nRecords: %d", rep.Records)
	if rep.SkippedLines > 0 {
		p(" (%d unreadable lines skipped)", rep.SkippedLines)
	}
	if rep.Session != "" {
		p(" for session %s", repCell(rep.Session))
	}
	p("\n")

	section("Tokens by session")
	p("SESSION\t%s\tBRANCHES\n", sumsHead)
	for _, s := range rep.Sessions {
		p("%s\t%s\t%d\n", repOrDash(s.Session), sums(s.repSums), s.Branches)
	}

	section("Tokens by branch")
	p("SESSION\tBRANCH\tPARENT\tDEPTH\tSTATUS\t%s\tRETURNED\n", sumsHead)
	for _, b := range rep.Branches {
		p("%s\t%s\t%s\t%d\t%s\t%s\t%d\n", repOrDash(b.Session), repOrDash(b.Branch), repOrDash(b.Parent), b.Depth,
			repOrDash(b.Status), sums(b.repSums), b.ReturnedTokens)
	}

	section("Tokens by upstream")
	p("UPSTREAM\t%s\n", sumsHead)
	for _, u := range rep.Upstreams {
		p("%s\t%s\n", repUpstreamName(u.Upstream), sums(u.repSums))
	}

	section("Tokens by tool")
	p("UPSTREAM\tMETHOD\tTOOL\t%s\n", sumsHead)
	for _, t := range rep.Tools {
		p("%s\t%s\t%s\t%s\n", repUpstreamName(t.Upstream), repOrDash(t.Method), repOrDash(t.Tool), sums(t.repSums))
	}

	section("Compression")
	ratio := "n/a (no branch returned)"
	if r := rep.Compression.Ratio; r != nil {
		ratio = strconv.FormatFloat(*r, 'f', 1, 64) + ":1"
	}
	p("tokens received inside branches\t%d\n", rep.Compression.InsideBranches)
	p("tokens returned to parents\t%d\n", rep.Compression.Returned)
	p("ratio\t%s\n", ratio)

	section(fmt.Sprintf("Largest results (top %d)", reportLargest))
	p("TIME\tUPSTREAM\tTOOL\tRESULT\tDELIVERED\tOUTCOME\tBRANCH\n")
	for _, r := range rep.LargestResults {
		p("%s\t%s\t%s\t%d\t%d\t%s\t%s\n", r.Time.UTC().Format(time.RFC3339), repUpstreamName(r.Upstream), repOrDash(r.Tool),
			r.ResultTokens, r.DeliveredTokens, repOrDash(r.Outcome), repOrDash(r.Branch))
	}

	section("Redactions by rule")
	p("RULE\tCOUNT\n")
	for _, r := range rep.Redactions {
		p("%s\t%d\n", repOrDash(r.Rule), r.Count)
	}
	if len(rep.Redactions) == 0 {
		p("(none)\n")
	}
	rep.Model.writeText(p, section)
	return tw.Flush()
}

// writeText prints the model wire's part of the report.
func (m *repModel) writeText(p func(string, ...any), section func(string)) {
	if m.Total.Requests == 0 {
		return
	}
	section("Model requests by session (tokens: o200k as received and forwarded; usage and billed input as the model APIs reported them)")
	p("SESSION\tREQUESTS\tRECEIVED\tFORWARDED\tFOLDS\tFOLD SAVED\tRECALLS\tINPUT\tCACHE READ\tCACHE WRITE\tOUTPUT\tBILLED\tWITHOUT (EST.)\tSAVED\n")
	row := func(name string, s repModelSums) {
		saved := "-"
		if s.EstimatedWithout > 0 {
			saved = fmt.Sprintf("%.1f%%", 100*(1-s.Billed/s.EstimatedWithout))
		}
		p("%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%.0f\t%.0f\t%s\n", name, s.Requests, s.Received, s.Forwarded, s.Folds, s.FoldSaved, s.Recalls,
			s.Input, s.CacheRead, s.CacheWrite, s.Output, s.Billed, s.EstimatedWithout, saved)
	}
	for _, s := range m.Sessions {
		row(repOrDash(s.Session), s.repModelSums)
	}
	row("(total)", m.Total)
	if m.Total.WouldFolds > 0 || m.Total.WouldSave > 0 {
		p("observe mode, nothing folded: would have folded %d results, keeping %d tokens out of the requests\n", m.Total.WouldFolds, m.Total.WouldSave)
	}
	p("modelled input bill (o200k): %.0f forwarded, %.0f without foldproxy\n", m.Total.ModelledBilled, m.Total.ModelledWithout)
	p("estimate: %s\n", m.EstimateMethod)
	if len(m.Folds) > 0 {
		section(fmt.Sprintf("Automatic folds (newest %d)", reportFolds))
		p("TIME\tSESSION\tKIND\tTOOL\tINPUT\tTOKENS\tHANDLE\n")
		for _, f := range m.Folds {
			p("%s\t%s\t%s\t%s\t%s\t%d\t%s\n", f.Time.UTC().Format(time.RFC3339), repOrDash(f.Session), repOrDash(f.Kind), repOrDash(f.Tool),
				repOrDash(f.Brief), f.Tokens, repOrDash(f.Handle))
		}
	}
}
