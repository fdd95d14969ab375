package secrets

import (
	"slices"
	"unicode/utf8"
)

// pieceWindow is the window of a rule without keywords for the piece
// text[lo:hi]: the piece, widened by the longest match, or by pad and
// stretched.
func (e *engine) pieceWindow(rs *ruleScanner, text string, lo, hi int) [][2]int {
	n := len(text)
	if rs.bounded() {
		return [][2]int{{max(lo-rs.maxLen, 0), min(hi+rs.maxLen+64, n)}}
	}
	a, b := max(lo-e.pad, 0), min(hi+e.pad, n)
	var st stretcher
	a, b = st.stretch(rs.reach, text, a, b)
	return [][2]int{{a, b}}
}

// stretcher extends windows through runs of a rule's reach, remembering
// the last run it walked so that many keywords in one long run cost one
// walk, not one each.
type stretcher struct {
	fwdFrom, fwdTo int // text[fwdFrom:fwdTo] is all reach
	bwdFrom, bwdTo int // text[bwdFrom:bwdTo] is all reach
}

func (st *stretcher) stretch(reach *[256]bool, text string, a, b int) (int, int) {
	n := len(text)
	if st.bwdFrom < a && a <= st.bwdTo {
		a = st.bwdFrom
	}
	a0 := a
	for a > 0 && reach[text[a-1]] {
		a--
	}
	if a < a0 {
		st.bwdFrom, st.bwdTo = a, a0
	}
	if st.fwdFrom <= b && b < st.fwdTo {
		b = st.fwdTo
	}
	b0 := b
	for b < n && reach[text[b]] {
		b++
	}
	if b > b0 {
		st.fwdFrom, st.fwdTo = b0, b
	}
	return a, min(b+stretchTail, n)
}

// windows returns the merged windows of text that rule rs must scan, given
// the positions of its keywords.
func (e *engine) windows(rs *ruleScanner, hits []int, text string, nls []int) [][2]int {
	n := len(text)
	wins := make([][2]int, 0, len(hits))
	var st stretcher
	for _, p := range hits {
		a, b := p-e.pad, p+e.pad
		if rs.bounded() {
			a, b = p-rs.maxLen, p+rs.maxLen+64
		}
		if rs.maxNL >= 0 {
			// Intersect with the lines a match can reach.
			nl := min(rs.maxNL, maxWindowLines)
			li, _ := slices.BinarySearch(nls, p) // newlines before p
			a = max(a, lineStart(nls, li-nl))
			b = min(b, lineEnd(nls, li+nl, n))
		}
		a, b = max(a, 0), min(b, n)
		for i := 0; i < snapLimit && a > 0 && isWordByte(text[a-1]); i++ {
			a--
		}
		for i := 0; i < snapLimit && b < n && isWordByte(text[b]); i++ {
			b++
		}
		if rs.reach != nil {
			a, b = st.stretch(rs.reach, text, a, b)
		}
		wins = append(wins, [2]int{a, b})
	}
	slices.SortFunc(wins, func(x, y [2]int) int { return x[0] - y[0] })
	merged := wins[:1]
	total := 0
	for _, w := range wins[1:] {
		last := &merged[len(merged)-1]
		if w[0] <= last[1] {
			last[1] = max(last[1], w[1])
			continue
		}
		merged = append(merged, w)
	}
	for _, w := range merged {
		total += w[1] - w[0]
	}
	if span := merged[len(merged)-1][1] - merged[0][0]; len(merged) > 1 && total*4 >= span*3 {
		return [][2]int{{merged[0][0], merged[len(merged)-1][1]}}
	}
	return merged
}

// splitPoint returns the first offset at or after i (and before n) where
// text can be cut into pieces without cutting a run that a stretched rule
// could stretch over, or len(text) when there is none. Pieces cut there do
// not each walk and scan the same long run.
func (e *engine) splitPoint(text string, i int) int {
	for ; i < len(text); i++ {
		if i > 0 && !e.loud[text[i-1]][text[i]] && utf8.RuneStart(text[i]) {
			return i
		}
	}
	return len(text)
}
