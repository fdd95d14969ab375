package main

import (
	"cmp"
	"slices"

	"github.com/foldproxy/foldproxy/intercept"
)

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
