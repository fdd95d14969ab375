package memory

import (
	"cmp"
	"container/heap"
	"math"
	"slices"
)

// Admit reports whether m passes q's filters: project, confidence,
// suspicion and tags. Backends that cannot filter natively call it on
// their candidates.
func Admit(m *Memory, q Query) bool {
	if m.Project != q.Project || m.Confidence < q.MinConfidence {
		return false
	}
	if q.ExcludeSuspicious && len(m.Suspicious) > 0 {
		return false
	}
	if q.Principal != "" && m.Provenance.Principal != q.Principal {
		return false
	}
	if len(q.Tags) > 0 && !slices.ContainsFunc(q.Tags, func(t string) bool { return slices.Contains(m.Tags, t) }) {
		return false
	}
	return true
}

// better orders hits best first: score, then confidence, then id.
func better(a, b Hit) int {
	return cmp.Or(cmp.Compare(b.Score, a.Score), cmp.Compare(b.Memory.Confidence, a.Memory.Confidence), cmp.Compare(a.Memory.ID, b.Memory.ID))
}

// TopK keeps the best hits offered to it, for backends that score many
// candidates: Offer is O(log k), and Hits hands them to Rank.
type TopK struct {
	k int
	h hitHeap
}

// NewTopK keeps as many hits as Rank needs for q: q.Limit, or with a
// dense query the candidates of its rerank.
func NewTopK(q Query) *TopK {
	k := q.Limit
	if len(q.Dense) > 0 {
		k = max(5*q.Limit, 50)
	}
	return &TopK{k: k}
}

// Offer considers one hit.
func (t *TopK) Offer(h Hit) {
	if t.k <= 0 {
		return
	}
	if len(t.h) < t.k {
		heap.Push(&t.h, h)
		return
	}
	if better(h, t.h[0]) < 0 {
		t.h[0] = h
		heap.Fix(&t.h, 0)
	}
}

// Hits returns the hits kept, in no order.
func (t *TopK) Hits() []Hit { return t.h }

// hitHeap is a min-heap: the worst kept hit on top.
type hitHeap []Hit

func (h hitHeap) Len() int           { return len(h) }
func (h hitHeap) Less(i, j int) bool { return better(h[i], h[j]) > 0 }
func (h hitHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *hitHeap) Push(x any)        { *h = append(*h, x.(Hit)) }
func (h *hitHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// denseWeight is the weight of the dense similarity in the fused score.
const denseWeight = 0.5

// Rank orders lexical hits best first (score, then confidence, then id)
// and keeps q.Limit of them. With a dense query vector, the best lexical
// candidates (five times the limit, at least 50) are reranked by a convex
// fusion: half their lexical score relative to the best, half the cosine
// similarity of their embedding with the query's.
func Rank(hits []Hit, q Query) []Hit {
	slices.SortFunc(hits, better)
	if len(q.Dense) > 0 && len(hits) > 1 {
		cand := hits[:min(len(hits), max(5*q.Limit, 50))]
		top := cand[0].Score
		for i := range cand {
			lex := 0.0
			if top > 0 {
				lex = cand[i].Score / top
			}
			cand[i].Score = (1-denseWeight)*lex + denseWeight*max(Cosine(q.Dense, cand[i].Memory.Dense), 0)
		}
		slices.SortStableFunc(cand, func(a, b Hit) int { return cmp.Compare(b.Score, a.Score) })
		hits = cand
	}
	if len(hits) > q.Limit {
		hits = hits[:q.Limit]
	}
	return hits
}

// Relevance is how alike a task's text and a memory are, in [0, 1]: the
// cosine of their sets of terms, each term weighed by its inverse
// document frequency among the project's memories (idf; nil weighs every
// term 1). So the words every memory shares (a project's name, "test",
// "file") count for little, words no memory holds count against a match,
// and unlike a search score it does not grow with the length of the query
// or the size of the store: it is the injection floor's measure.
func Relevance(query, doc Sparse, idf func(term uint32) float64) float64 {
	w := func(t uint32) float64 {
		if idf == nil {
			return 1
		}
		return idf(t)
	}
	var dot, nq, nd float64
	for _, t := range query.Indices {
		x := w(t)
		nq += x * x
	}
	j := 0
	for _, t := range doc.Indices {
		x := w(t)
		nd += x * x
		for j < len(query.Indices) && query.Indices[j] < t {
			j++
		}
		if j < len(query.Indices) && query.Indices[j] == t {
			dot += x * x
		}
	}
	if nq == 0 || nd == 0 {
		return 0
	}
	return dot / math.Sqrt(nq*nd)
}
