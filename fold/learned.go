package fold

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/foldproxy/foldproxy/fold/memory"
)

// Learned budgets. When branch_create gives no budget, the Manager
// proposes one from the branches of the project that came before: how
// many tokens the branches most like the new one (by description and
// prompt, and the tools they used) actually used, and how often they were
// force-returned, rounded up to the design's tiers (BudgetTiers) within
// fold.maxBudget. With fewer than minSimilar similar branches the default
// stands. The answer says where a learned budget came from (budget_from);
// the default leaves the field out.

// BudgetTiers are the budgets the design allocates by task complexity.
var BudgetTiers = []int{4096, 8192, 16384}

const (
	// maxSamples bounds the closed branches kept for learning (the latest).
	maxSamples = 2000
	// minSimilar is how many similar branches a learned budget needs.
	minSimilar = 3
	// topSimilar is how many of the most similar branches it uses.
	topSimilar = 10
	// minSimilarity is the Relevance a branch needs to count as similar.
	minSimilarity = 0.3
	// budgetHeadroom is the margin over the need of the similar branches
	// (the largest among them): a create answer, notices, a larger file.
	budgetHeadroom = 1.25
	// forcedRate: when more than this share of the similar branches were
	// force-returned, their need is taken twice over.
	forcedRate = 0.25
)

// sample is what a closed branch teaches learned budgets.
type sample struct {
	doc    memory.Sparse // its description, prompt and tools
	used   int
	budget int
	forced bool // force-returned at its budget or deadline
}

// sampleOf returns the sample of a closed branch, and false for a branch
// that teaches nothing (the root; closed by its parent, its session or a
// restart; unlimited).
func sampleOf(b *Branch) (sample, bool) {
	if b.Depth == 0 || b.Budget <= 0 {
		return sample{}, false
	}
	forced := b.Reason == ReasonBudget || b.Reason == ReasonDeadline
	if b.Status != StatusReturned && !forced {
		return sample{}, false
	}
	tools := make([]string, 0, len(b.ByTool))
	for t := range b.ByTool {
		if !strings.HasPrefix(t, "foldproxy/") {
			tools = append(tools, t)
		}
	}
	slices.Sort(tools)
	text := b.Description + "\n" + b.Prompt + "\n" + strings.Join(tools, " ")
	return sample{doc: memory.DocVector(text), used: b.Used, budget: b.Budget, forced: forced}, true
}

// learn keeps what a branch that just closed teaches.
func (m *Manager) learn(b *Branch) {
	s, ok := sampleOf(b)
	if !ok {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.history) == maxSamples {
		m.history = slices.Delete(m.history, 0, 1)
	}
	m.history = append(m.history, s)
}

// learnFrom loads the samples of the stored branches, oldest closed first
// (Recover).
func (m *Manager) learnFrom(all []*Branch) {
	closed := slices.Clone(all)
	slices.SortStableFunc(closed, func(x, y *Branch) int { return cmp.Or(x.Closed.Compare(y.Closed), cmp.Compare(x.ID, y.ID)) })
	var ss []sample
	for _, b := range closed {
		if s, ok := sampleOf(b); ok && b.Status != StatusActive {
			ss = append(ss, s)
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.history = append(m.history, ss...)
	if n := len(m.history); n > maxSamples {
		m.history = slices.Clone(m.history[n-maxSamples:])
	}
}

// proposeBudget returns a learned budget for a branch described by text
// and where it came from, or 0 when too few similar branches came before.
func (m *Manager) proposeBudget(text string) (int, string) {
	m.mu.Lock()
	hist := m.history
	m.mu.Unlock()
	if len(hist) < minSimilar {
		return 0, ""
	}
	q := memory.QueryVector(text)
	df := map[uint32]int{}
	for _, t := range q.Indices {
		df[t] = 0
	}
	for _, s := range hist {
		for _, t := range s.doc.Indices {
			if _, ok := df[t]; ok {
				df[t]++
			}
		}
	}
	idfs := map[uint32]float64{}
	idf := func(t uint32) float64 {
		if v, ok := idfs[t]; ok {
			return v
		}
		n, ok := df[t]
		if !ok {
			// A term of a past branch the query does not hold: its weight
			// only scales that branch's norm; count it as common.
			n = len(hist) / 2
		}
		v := memory.IDF(len(hist), n)
		idfs[t] = v
		return v
	}
	type hit struct {
		s   sample
		rel float64
		i   int
	}
	var hits []hit
	for i, s := range hist {
		if rel := memory.Relevance(q, s.doc, idf); rel >= minSimilarity {
			hits = append(hits, hit{s, rel, i})
		}
	}
	if len(hits) < minSimilar {
		return 0, ""
	}
	// The most similar first; among equals, the most recent.
	slices.SortStableFunc(hits, func(a, b hit) int { return cmp.Or(cmp.Compare(b.rel, a.rel), cmp.Compare(b.i, a.i)) })
	hits = hits[:min(len(hits), topSimilar)]
	needs := make([]int, 0, len(hits))
	forced := 0
	for _, h := range hits {
		need := h.s.used
		if h.s.forced {
			forced++
			need = max(need, h.s.budget) * 2 // it needed more than it had
		}
		needs = append(needs, need)
	}
	slices.Sort(needs)
	need := float64(needs[len(needs)-1]) * budgetHeadroom
	if float64(forced) > forcedRate*float64(len(hits)) {
		need *= 2
	}
	return m.tier(int(math.Ceil(need))), fmt.Sprintf("%d similar branches", len(hits))
}

// tier rounds a need up to the smallest of BudgetTiers that holds it (the
// largest when none does), within fold.maxBudget.
func (m *Manager) tier(need int) int {
	t := BudgetTiers[len(BudgetTiers)-1]
	for _, x := range BudgetTiers {
		if x >= need {
			t = x
			break
		}
	}
	return min(t, m.set.MaxBudget)
}

// Score is the design's composite strategy score of a project's branches
// (StrategyScore): 40% token efficiency, 30% velocity, 30% accuracy, each
// in [0, 1].
type Score struct {
	Branches int `json:"branches"` // closed branches scored
	Returned int `json:"returned"`
	Forced   int `json:"forced"` // force-returned at their budget or deadline
	// TokenEfficiency is the mean share of its budget a returned branch
	// used: 1 when budgets fit the work, low when they were far too large.
	TokenEfficiency float64 `json:"token_efficiency"`
	// Velocity is the mean share of its time a returned branch had left.
	Velocity float64 `json:"velocity"`
	// Accuracy is the share of branches that returned rather than being
	// force-returned.
	Accuracy float64 `json:"accuracy"`
	Score    float64 `json:"score"`
}

// StrategyScore scores the closed branches of bs (roots, open branches and
// those closed by their parent, session or a restart are left out).
func StrategyScore(bs []*Branch) Score {
	var sc Score
	var eff, vel float64
	velN := 0
	for _, b := range bs {
		if _, ok := sampleOf(b); !ok || b.Status == StatusActive {
			continue
		}
		sc.Branches++
		if b.Status != StatusReturned {
			sc.Forced++
			continue
		}
		sc.Returned++
		eff += min(float64(b.Used)/float64(b.Budget), 1)
		if span := b.Deadline.Sub(b.Created); span > 0 && !b.Closed.IsZero() {
			vel += min(max(1-float64(b.Closed.Sub(b.Created))/float64(span), 0), 1)
			velN++
		}
	}
	if sc.Branches == 0 {
		return sc
	}
	if sc.Returned > 0 {
		sc.TokenEfficiency = eff / float64(sc.Returned)
	}
	if velN > 0 {
		sc.Velocity = vel / float64(velN)
	}
	sc.Accuracy = float64(sc.Returned) / float64(sc.Branches)
	sc.Score = 0.4*sc.TokenEfficiency + 0.3*sc.Velocity + 0.3*sc.Accuracy
	round := func(v *float64) { *v = math.Round(*v*1000) / 1000 }
	round(&sc.TokenEfficiency)
	round(&sc.Velocity)
	round(&sc.Accuracy)
	round(&sc.Score)
	return sc
}
