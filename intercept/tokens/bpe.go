package tokens

import (
	"hash/maphash"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/tiktoken-go/tokenizer"
)

// Byte-pair merging without the library's splitter.
//
// The codec's Count runs its regexp2 splitter over every text it is given,
// even a single piece, and that costs far more than the merge of a short
// piece: on text where few pieces repeat (random identifiers, base64, hex
// without spaces) the fast path's cache misses each paid it, and such text
// counted at well under 1 MB/s. The splitter of fast.go already
// yields the library's pieces for ASCII, so a piece only needs the merge,
// which is done here with the encoding's ranks, exactly as the library does
// it (merge the adjacent pair whose token has the lowest rank, the leftmost
// first, until no pair is a token; see codec.mergePairsHeap).

// bpeRanks holds, per encoding name, a *rankLoad: the encoding's ranks
// (token bytes → rank, which is the token id), built once from the codec's
// own vocabulary through Decode. Decode builds and keeps a reverse
// vocabulary (3 MB for o200k_base), so the ranks are read through a codec
// of their own, dropped once they are built.
var bpeRanks sync.Map

// rankLoad is the loading of one encoding's ranks.
type rankLoad struct {
	once sync.Once
	t    atomic.Pointer[bpeTable]
}

// loadedRanks returns the ranks of the encoding name if they are loaded,
// or nil.
func loadedRanks(name string) *bpeTable {
	if l, ok := bpeRanks.Load(name); ok {
		return l.(*rankLoad).t.Load()
	}
	return nil
}

// bpeTable is an encoding's ranks: every token's, and the two-byte
// tokens' in an array, for the first round of lookups of a merge.
type bpeTable struct {
	ranks *rankTable
	pair  *[1 << 16]uint32
	// short holds the ASCII tokens of 3 to 8 bytes by their bytes packed
	// (pack): the merge of an ASCII piece looks its parts up there,
	// cheaper than hashing a string.
	short map[uint64]uint32
}

// ranksOf returns the ranks of codec's encoding, loading them on first
// use (about 130 ms of CPU and 7 MB kept for o200k_base).
func ranksOf(codec tokenizer.Codec) *bpeTable {
	v, _ := bpeRanks.LoadOrStore(codec.GetName(), new(rankLoad))
	l := v.(*rankLoad)
	l.once.Do(func() { l.t.Store(buildRanks(codec)) })
	return l.t.Load()
}

// buildRanks builds the ranks of codec's encoding.
func buildRanks(codec tokenizer.Codec) *bpeTable {
	if own, err := tokenizer.Get(tokenizer.Encoding(codec.GetName())); err == nil {
		codec = own
	}
	pair := new([1 << 16]uint32)
	short := make(map[uint64]uint32, 1<<16)
	for i := range pair {
		pair[i] = bpeNoRank
	}
	// Token ids are dense from 0; stop after a long run of ids the
	// codec does not know (special tokens are not merged and not
	// in its vocabulary). The tokens' bytes go end to end into data,
	// sized for o200k_base (1.4 MB in 200,000 tokens), so that the
	// load copies nothing twice.
	var data strings.Builder
	data.Grow(3 << 19)
	off := make([]uint32, 0, 1<<18)
	for id, misses := uint(0), 0; misses < 4096; id++ {
		off = append(off, uint32(data.Len()))
		s, err := codec.Decode([]uint{id})
		if err != nil || s == "" {
			misses++
			continue
		}
		misses = 0
		data.WriteString(s)
		if len(s) == 2 {
			pair[uint16(s[0])<<8|uint16(s[1])] = uint32(id)
		}
		if len(s) >= 3 && len(s) <= maxPacked && indexNonASCII(s, 0) < 0 {
			short[pack(s)] = uint32(id)
		}
	}
	off = append(off, uint32(data.Len()))
	return &bpeTable{ranks: newRankTable(data.String(), off), pair: pair, short: short}
}

// rankTable maps a token's bytes to its rank (its id). It is an
// open-addressing hash table over the tokens' bytes laid end to end:
// about 4 MB for o200k_base's 200,000 tokens, where a map[string]uint32
// and its strings take about 18 MB (every foldproxy holds one for as long
// as it runs).
type rankTable struct {
	data  string   // every token's bytes, in id order
	off   []uint32 // token id's bytes are data[off[id]:off[id+1]]
	slots []uint32 // id+1 of the token hashed there; 0 is empty
	mask  uint64
	seed  maphash.Seed
}

// newRankTable indexes the tokens whose bytes are data[off[id]:off[id+1]]
// (empty for an id with no token).
func newRankTable(data string, off []uint32) *rankTable {
	t := &rankTable{data: data, off: off, seed: maphash.MakeSeed()}
	ids := uint32(len(off) - 1)
	n := 0
	for id := range ids {
		if off[id+1] > off[id] {
			n++
		}
	}
	size := 1
	for size < 2*n {
		size <<= 1
	}
	t.slots, t.mask = make([]uint32, size), uint64(size-1)
	for id := range ids {
		s := t.token(id)
		if s == "" {
			continue
		}
		i := maphash.String(t.seed, s) & t.mask
		for t.slots[i] != 0 && t.token(t.slots[i]-1) != s {
			i = (i + 1) & t.mask
		}
		t.slots[i] = id + 1 // a duplicate: the highest id, as a map would
	}
	return t
}

func (t *rankTable) token(id uint32) string { return t.data[t.off[id]:t.off[id+1]] }

// rank returns the rank of the token whose bytes are s.
func (t *rankTable) rank(s string) (uint32, bool) {
	i := maphash.String(t.seed, s) & t.mask
	for {
		v := t.slots[i]
		if v == 0 {
			return 0, false
		}
		if t.token(v-1) == s {
			return v - 1, true
		}
		i = (i + 1) & t.mask
	}
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
	if len(piece) <= 1 {
		return len(piece)
	}
	if _, ok := t.ranks.rank(piece); ok {
		return 1
	}
	_, parts := bpeMerge(t, piece)
	return parts
}

// bpeEnds appends to dst the end offsets of the tokens byte-pair merging
// makes of piece, in order, and returns it.
func bpeEnds(t *bpeTable, piece string, dst []int32) []int32 {
	if len(piece) <= 1 {
		return append(dst, int32(len(piece)))
	}
	if _, ok := t.ranks.rank(piece); ok {
		return append(dst, int32(len(piece)))
	}
	nodes, _ := bpeMerge(t, piece)
	for i := nodes[0].next; i >= 0; i = nodes[i].next {
		dst = append(dst, i)
	}
	return dst
}

// bpeMerge merges the bytes of piece (two bytes or more) by rank and
// returns the list of parts, nodes[i].next the end of the part that
// starts at i, and how many parts there are.
func bpeMerge(t *bpeTable, piece string) ([]bpeNode, int) {
	n := int32(len(piece))
	ascii := indexNonASCII(piece, 0) < 0
	ranks := t.ranks
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
		if k-i <= maxPacked && ascii {
			if r, ok := t.short[pack(piece[i:k])]; ok {
				return r
			}
			return bpeNoRank
		}
		if r, ok := ranks.rank(piece[i:k]); ok {
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
	return nodes, parts
}

// Long pieces.
//
// Merging a piece whole costs O(n log n) time and 20 bytes of memory per
// byte, too much for the pieces of megabytes that text without spaces
// makes (a base64 blob, a minified file). Such a piece is merged a window
// at a time, and the result is still exactly the merge of the whole piece,
// by three properties of byte-pair encoding (proved in the README of
// github.com/github/rust-gems, crates/bpe, for the merge defined as here:
// lowest rank first, leftmost among equals):
//
//   - a token sequence is valid when merging the text it spells gives it
//     back; every text has exactly one valid sequence, its encoding;
//   - a part of a valid sequence is valid (nothing merged across its
//     borders);
//   - two valid sequences joined are valid when the last token of the
//     first and the first of the second are a valid pair (merging the
//     two tokens' text gives them back).
//
// So the windows are merged one after the other, each from the end of
// the tokens kept of the one before; of a window, the tokens that end at
// least longMargin bytes before its end are kept (near its end a window
// may merge otherwise than the whole piece). Where the tokens kept so far
// and the next window's first token are not a valid pair, the last kept
// token is dropped and the next window merged from its start, until they
// are; were every token kept of a window dropped, the piece is merged
// whole. Every join is checked, so the result is the piece's encoding
// whatever the windows' sizes; they only decide how often a join fails
// (on real and random text, about never: a window forgets its far left
// within a few tokens). Windows that repeat (a run of one byte, a
// repeated pattern) are merged once.
const (
	longWindow = 2048
	longMargin = 64
)

// bpeLongEnds returns the end offsets of the tokens of piece, exactly as
// bpeEnds does, in time linear in its length (see Long pieces).
//
// hook, when not nil, is called with the length of every text merged
// (tests use it to bound the work).
func bpeLongEnds(t *bpeTable, piece string, hook func(int)) []int32 {
	ends, _, _ := bpeWindowed(t, piece, hook, longWindow, longMargin)
	return ends
}

// bpeWindowed is bpeLongEnds with the window and the margin given; it also
// returns how many joins failed and were mended, and whether the piece was
// merged whole in the end.
func bpeWindowed(t *bpeTable, piece string, hook func(int), win, margin int) (ends []int32, mended int, whole bool) {
	merge := func(s string, dst []int32) []int32 {
		if hook != nil {
			hook(len(s))
		}
		return bpeEnds(t, s, dst)
	}
	if len(piece) <= win {
		return merge(piece, nil), 0, false
	}
	// The windows merged last, for runs that repeat; bounded, so that
	// text that never repeats keeps no more than a few.
	seen := map[string][]int32{}
	window := func(w string) []int32 {
		if e, ok := seen[w]; ok {
			return e
		}
		if len(seen) >= 16 {
			clear(seen)
		}
		e := merge(w, nil)
		seen[w] = e
		return e
	}
	// Joins checked last, for the same reason.
	pairs := map[string]bool{}
	validPair := func(a, b string) bool {
		ab := a + b
		if ok, found := pairs[ab]; found {
			return ok
		}
		if len(pairs) >= 16 {
			clear(pairs)
		}
		var buf [2]int32
		e := merge(ab, buf[:0])
		ok := len(e) == 2 && int(e[0]) == len(a)
		pairs[ab] = ok
		return ok
	}
	ends = make([]int32, 0, len(piece)/3)
	// ends[:fixed] are final; ends[fixed:] are the kept tokens of the
	// last window, which the next window's first token must pair with.
	fixed := 0
	for {
		start := int32(0)
		if len(ends) > 0 {
			start = ends[len(ends)-1]
		}
		rest := piece[start:]
		w := rest[:min(len(rest), win)]
		we := window(w)
		if len(ends) > 0 {
			prevStart := int32(0)
			if len(ends) > 1 {
				prevStart = ends[len(ends)-2]
			}
			if !validPair(piece[prevStart:start], w[:we[0]]) {
				if len(ends)-1 == fixed {
					return merge(piece, nil), mended, true // nothing left to drop
				}
				ends = ends[:len(ends)-1]
				mended++
				continue
			}
		}
		fixed = len(ends)
		if len(w) == len(rest) {
			for _, e := range we {
				ends = append(ends, start+e)
			}
			return ends, mended, false
		}
		// Keep the tokens that end before the margin, at least one.
		ends = append(ends, start+we[0])
		for _, e := range we[1:] {
			if int(e) > win-margin {
				break
			}
			ends = append(ends, start+e)
		}
	}
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
