package memory

import (
	"cmp"
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
	if len(q.Tags) > 0 && !slices.ContainsFunc(q.Tags, func(t string) bool { return slices.Contains(m.Tags, t) }) {
		return false
	}
	return true
}

// rrfK is the constant of reciprocal rank fusion.
const rrfK = 60

// Rank orders lexical hits best first (score, then confidence, then id)
// and keeps q.Limit of them. With a dense query vector, the best lexical
// candidates (five times the limit, at least 50) are reranked by
// reciprocal rank fusion of their lexical and dense ranks.
func Rank(hits []Hit, q Query) []Hit {
	slices.SortFunc(hits, func(a, b Hit) int {
		return cmp.Or(cmp.Compare(b.Score, a.Score), cmp.Compare(b.Memory.Confidence, a.Memory.Confidence), cmp.Compare(a.Memory.ID, b.Memory.ID))
	})
	if len(q.Dense) > 0 && len(hits) > 1 {
		n := min(len(hits), max(5*q.Limit, 50))
		cand := hits[:n]
		lex := make(map[string]int, n)
		for i, h := range cand {
			lex[h.Memory.ID] = i
		}
		byDense := slices.Clone(cand)
		cos := make(map[string]float64, n)
		for _, h := range byDense {
			cos[h.Memory.ID] = Cosine(q.Dense, h.Memory.Dense)
		}
		slices.SortStableFunc(byDense, func(a, b Hit) int { return cmp.Compare(cos[b.Memory.ID], cos[a.Memory.ID]) })
		for i, h := range byDense {
			fused := 1.0/float64(rrfK+lex[h.Memory.ID]+1) + 1.0/float64(rrfK+i+1)
			cand[lex[h.Memory.ID]].Score = fused
		}
		slices.SortStableFunc(cand, func(a, b Hit) int { return cmp.Compare(b.Score, a.Score) })
		hits = cand
	}
	if len(hits) > q.Limit {
		hits = hits[:q.Limit]
	}
	return hits
}
