package intercept

import (
	"sync"

	"github.com/tiktoken-go/tokenizer"
)

// Byte-pair merging without the library's splitter.
//
// The codec's Count runs its regexp2 splitter over every text it is given,
// even a single piece, and that costs far more than the merge of a short
// piece: on text where few pieces repeat (random identifiers, base64, hex
// without spaces) the fast path's cache misses each paid it, and such text
// counted at well under 1 MB/s. The splitter of tokens_fast.go already
// yields the library's pieces for ASCII, so a piece only needs the merge,
// which is done here with the encoding's ranks, exactly as the library does
// it (merge the adjacent pair whose token has the lowest rank, the leftmost
// first, until no pair is a token; see codec.mergePairsHeap).

// bpeRanks holds, per encoding name, a function returning the encoding's
// ranks (token bytes → rank, which is the token id), built once from the
// codec's own vocabulary through Decode.
var bpeRanks sync.Map

// bpeTable is an encoding's ranks: every token's, and the two-byte
// tokens' in an array, for the first round of lookups of a merge.
type bpeTable struct {
	ranks map[string]uint32
	pair  *[1 << 16]uint32
}

// ranksOf returns the ranks of codec's encoding.
func ranksOf(codec tokenizer.Codec) *bpeTable {
	f, _ := bpeRanks.LoadOrStore(codec.GetName(), sync.OnceValue(func() *bpeTable {
		m := make(map[string]uint32, 1<<18)
		pair := new([1 << 16]uint32)
		for i := range pair {
			pair[i] = bpeNoRank
		}
		// Token ids are dense from 0; stop after a long run of ids the
		// codec does not know (special tokens are not merged and not
		// in its vocabulary).
		for id, misses := uint(0), 0; misses < 4096; id++ {
			s, err := codec.Decode([]uint{id})
			if err != nil || s == "" {
				misses++
				continue
			}
			misses = 0
			m[s] = uint32(id)
			if len(s) == 2 {
				pair[uint16(s[0])<<8|uint16(s[1])] = uint32(id)
			}
		}
		return &bpeTable{ranks: m, pair: pair}
	}))
	return f.(func() *bpeTable)()
}

// bpeNode is a part boundary of a piece being merged, in a linked list.
// rank is that of the token made by merging this part with the next.
type bpeNode struct {
	prev, next int32
	rank       uint32
}

const bpeNoRank = ^uint32(0)

// bpeCand is a pair that can merge: the part starting at off with the
// next one, into a token of rank rank.
type bpeCand struct {
	rank uint32
	off  int32
}

// bpeCount returns the number of tokens byte-pair merging makes of piece,
// as the library counts a piece its splitter yields.
func bpeCount(t *bpeTable, piece string) int {
	n := int32(len(piece))
	if n <= 1 {
		return int(n)
	}
	ranks := t.ranks
	if _, ok := ranks[piece]; ok {
		return 1
	}
	nodes := make([]bpeNode, n+1)
	for i := range nodes {
		nodes[i] = bpeNode{prev: int32(i) - 1, next: int32(i) + 1, rank: bpeNoRank}
	}
	nodes[n].next = -1
	rankOf := func(i int32) uint32 {
		j := nodes[i].next
		if j < 0 {
			return bpeNoRank
		}
		k := nodes[j].next
		if k < 0 {
			return bpeNoRank
		}
		if k-i == 2 {
			return t.pair[uint16(piece[i])<<8|uint16(piece[i+1])]
		}
		if r, ok := ranks[piece[i:k]]; ok {
			return r
		}
		return bpeNoRank
	}
	h := make(bpeHeap, 0, n)
	for i := int32(0); i+2 <= n; i++ {
		if r := rankOf(i); r != bpeNoRank {
			nodes[i].rank = r
			h = append(h, bpeCand{r, i})
		}
	}
	h.init()
	parts := int(n)
	for len(h) > 0 {
		top := h.pop()
		i := top.off
		if nodes[i].rank != top.rank {
			continue // stale: the pair changed since
		}
		j := nodes[i].next
		k := nodes[j].next
		nodes[j].rank = bpeNoRank
		nodes[i].next = k
		if k >= 0 {
			nodes[k].prev = i
		}
		parts--
		for _, b := range [2]int32{i, nodes[i].prev} {
			if b < 0 {
				continue
			}
			nodes[b].rank = rankOf(b)
			if nodes[b].rank != bpeNoRank {
				h.push(bpeCand{nodes[b].rank, b})
			}
		}
	}
	return parts
}

// bpeHeap is a min-heap of candidates by rank, then offset: among equal
// ranks the leftmost pair merges first.
type bpeHeap []bpeCand

func (h bpeHeap) less(a, b int) bool {
	if h[a].rank != h[b].rank {
		return h[a].rank < h[b].rank
	}
	return h[a].off < h[b].off
}

func (h bpeHeap) init() {
	for i := len(h)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

func (h *bpeHeap) push(c bpeCand) {
	*h = append(*h, c)
	h.up(len(*h) - 1)
}

func (h *bpeHeap) pop() bpeCand {
	old := *h
	top := old[0]
	last := len(old) - 1
	old[0] = old[last]
	*h = old[:last]
	h.down(0)
	return top
}

func (h bpeHeap) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !h.less(i, p) {
			return
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

func (h bpeHeap) down(i int) {
	for {
		c := 2*i + 1
		if c >= len(h) {
			return
		}
		if c+1 < len(h) && h.less(c+1, c) {
			c++
		}
		if !h.less(c, i) {
			return
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
}
