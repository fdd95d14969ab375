package memory

import (
	"hash/fnv"
	"math"
	"slices"
	"strings"
	"unicode"
)

// Sparse is a sparse vector: term ids (FNV-1a of the term) and weights,
// sorted by id. Qdrant indexes the same representation natively as a
// sparse vector; with its IDF modifier it computes the same ranking as the
// embedded index.
type Sparse struct {
	Indices []uint32
	Values  []float32
}

// BM25 constants. The document length is normalised against a fixed
// reference length rather than the corpus average so that a memory's
// weights never change after it is stored (Qdrant stores them as given).
const (
	bm25K1    = 1.2
	bm25B     = 0.75
	refLength = 48.0
)

// stopwords are dropped from both documents and queries: they match every
// memory and would only cost time in the index.
var stopwords = func() map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(`a an and are as at be been but by can could did do does done for from had has have he her his how i if in into is it its
		just me more most my no not now of on one only or our out over same should so some such than that the their them then there these they this those
		through to too under up very was we were what when where which while who why will with would you your about after again all also any because before
		being both each few further here just once other own until use used using via`) {
		m[w] = true
	}
	return m
}()

// Terms splits text into lowercase lexical terms: runs of letters and
// digits, with identifiers also split at underscores, dots and camelCase
// humps (so "ValueError" yields "valueerror", "value" and "error"). Stop
// words and one-letter terms are dropped.
func Terms(text string) []string {
	var out []string
	add := func(w string) {
		w = strings.ToLower(w)
		if len([]rune(w)) < 2 || stopwords[w] || len(w) > 64 {
			return
		}
		out = append(out, w)
	}
	word := func(w string) {
		add(w)
		parts := splitCamel(w)
		if len(parts) > 1 {
			for _, p := range parts {
				add(p)
			}
		}
	}
	start := -1
	for i, r := range text {
		ok := unicode.IsLetter(r) || unicode.IsDigit(r)
		switch {
		case ok && start < 0:
			start = i
		case !ok && start >= 0:
			word(text[start:i])
			start = -1
		}
	}
	if start >= 0 {
		word(text[start:])
	}
	return out
}

// splitCamel splits "parseHTTPHeader" into parse, HTTP, Header.
func splitCamel(w string) []string {
	rs := []rune(w)
	var parts []string
	start := 0
	for i := 1; i < len(rs); i++ {
		lowerToUpper := unicode.IsLower(rs[i-1]) && unicode.IsUpper(rs[i])
		acronymEnd := i+1 < len(rs) && unicode.IsUpper(rs[i-1]) && unicode.IsUpper(rs[i]) && unicode.IsLower(rs[i+1])
		letterDigit := unicode.IsLetter(rs[i-1]) != unicode.IsLetter(rs[i])
		if lowerToUpper || acronymEnd || letterDigit {
			parts = append(parts, string(rs[start:i]))
			start = i
		}
	}
	return append(parts, string(rs[start:]))
}

// TermID is a term's index in a Sparse vector.
func TermID(term string) uint32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(term))
	return h.Sum32()
}

// DocVector is a memory's lexical vector: each distinct term weighted by
// BM25's saturated, length-normalised term frequency. The inverse document
// frequency is applied at search time by the backend.
func DocVector(text string) Sparse {
	terms := Terms(text)
	tf := map[uint32]int{}
	for _, t := range terms {
		tf[TermID(t)]++
	}
	norm := bm25K1 * (1 - bm25B + bm25B*float64(len(terms))/refLength)
	return fromCounts(tf, func(n int) float32 {
		f := float64(n)
		return float32(f * (bm25K1 + 1) / (f + norm))
	})
}

// QueryVector is a query's lexical vector: each distinct term weighted by
// its saturated frequency in the query, tf*(k1+1)/(tf+k1), so that the
// words a long task text repeats count more than those it mentions once.
func QueryVector(text string) Sparse {
	tf := map[uint32]int{}
	for _, t := range Terms(text) {
		tf[TermID(t)]++
	}
	return fromCounts(tf, func(n int) float32 {
		f := float64(n)
		return float32(f * (bm25K1 + 1) / (f + bm25K1))
	})
}

func fromCounts(tf map[uint32]int, w func(int) float32) Sparse {
	s := Sparse{Indices: make([]uint32, 0, len(tf)), Values: make([]float32, 0, len(tf))}
	for id := range tf {
		s.Indices = append(s.Indices, id)
	}
	slices.Sort(s.Indices)
	for _, id := range s.Indices {
		s.Values = append(s.Values, w(tf[id]))
	}
	return s
}

// IDF is the inverse document frequency of a term found in n of total
// memories, as Qdrant's IDF modifier computes it.
func IDF(total, n int) float64 {
	return math.Log((float64(total)-float64(n)+0.5)/(float64(n)+0.5) + 1)
}

// Similarity is the Jaccard similarity of two texts' term sets, used to
// decide whether a new memory is a near-duplicate of a stored one.
func Similarity(a, b string) float64 {
	sa, sb := QueryVector(a).Indices, QueryVector(b).Indices
	if len(sa) == 0 && len(sb) == 0 {
		return 1
	}
	inter, i, j := 0, 0, 0
	for i < len(sa) && j < len(sb) {
		switch {
		case sa[i] == sb[j]:
			inter++
			i++
			j++
		case sa[i] < sb[j]:
			i++
		default:
			j++
		}
	}
	return float64(inter) / float64(len(sa)+len(sb)-inter)
}

// Cosine is the cosine similarity of two dense vectors; 0 when either is
// empty or their lengths differ.
func Cosine(a, b []float32) float64 {
	if len(a) == 0 || len(a) != len(b) {
		return 0
	}
	var dot, na, nb float64
	for i := range a {
		dot += float64(a[i]) * float64(b[i])
		na += float64(a[i]) * float64(a[i])
		nb += float64(b[i]) * float64(b[i])
	}
	if na == 0 || nb == 0 {
		return 0
	}
	return dot / math.Sqrt(na*nb)
}
