package modelwire

import (
	"hash/maphash"
	"sync"
)

// Memo remembers, across the requests of a front, what Apply worked out of
// bytes it saw before: the tokens of messages and texts, what a call read
// or ran, the fold handle of a result. An agent resends its whole history
// on every request, and each of these is a pure function of the bytes
// (the counter's encoding, the State's key), so a resent message costs a
// digest instead of a parse and a count. It also lends its seed to the
// digests of Result.Pieces, so that they compare across requests. Each
// table holds at most max entries a generation, two generations. Safe for
// concurrent use; a nil *Memo remembers nothing.
type Memo struct {
	seed, seed2 maphash.Seed
	tokens      twoGen[uint64, int]
	specs       twoGen[uint64, callSpec]
	handles     twoGen[[2]uint64, string]
	unique      twoGen[[2]uint64, bool] // messages found without a duplicate key
}

// NewMemo returns a Memo of at most max entries a table and generation.
func NewMemo(max int) *Memo {
	m := &Memo{seed: maphash.MakeSeed(), seed2: maphash.MakeSeed()}
	m.tokens.max, m.specs.max, m.handles.max, m.unique.max = max, max, max, max
	return m
}

// sum is the digest of b.
func (m *Memo) sum(b []byte) uint64 {
	if m == nil {
		return fnv64(b)
	}
	return maphash.Bytes(m.seed, b)
}

// sum128 is a 128-bit digest of s, for identities that must not collide
// (a repeated result).
func (m *Memo) sum128(s string) [2]uint64 {
	if m == nil {
		return [2]uint64{fnv64([]byte(s)), uint64(len(s))}
	}
	return [2]uint64{maphash.String(m.seed, s), maphash.String(m.seed2, s)}
}

// countText counts s through count, remembering the count.
func (m *Memo) countText(s string, count func(string) int) int {
	if m == nil || len(s) < 256 {
		return count(s)
	}
	k := maphash.String(m.seed2, s)
	if n, ok := m.tokens.get(k); ok {
		return n
	}
	n := count(s)
	m.tokens.put(k, n)
	return n
}

func (m *Memo) getTokens(k uint64) (int, bool) {
	if m == nil {
		return 0, false
	}
	return m.tokens.get(k)
}

func (m *Memo) putTokens(k uint64, n int) {
	if m != nil {
		m.tokens.put(k, n)
	}
}

// spec is specOf(name, input), remembered.
func (m *Memo) spec(name, input string) callSpec {
	if m == nil {
		return specOf(name, input)
	}
	k := maphash.String(m.seed, name+"\x00"+input)
	if sp, ok := m.specs.get(k); ok {
		return sp
	}
	sp := specOf(name, input)
	m.specs.put(k, sp)
	return sp
}

// handle is fo.FoldHandle(id, text), remembered.
func (m *Memo) handle(fo Folder, id, text string) string {
	if m == nil {
		return fo.FoldHandle(id, text)
	}
	k := [2]uint64{maphash.String(m.seed, id), maphash.String(m.seed2, text)}
	if h, ok := m.handles.get(k); ok {
		return h
	}
	h := fo.FoldHandle(id, text)
	m.handles.put(k, h)
	return h
}

// twoGen is a map of at most max entries a generation, two generations:
// when the current one fills, it becomes the old one and the oldest is
// dropped; a hit in the old one moves the entry back.
type twoGen[K comparable, V any] struct {
	mu       sync.Mutex
	max      int
	cur, old map[K]V
}

func (g *twoGen[K, V]) get(k K) (V, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if v, ok := g.cur[k]; ok {
		return v, true
	}
	v, ok := g.old[k]
	if ok {
		g.putLocked(k, v)
	}
	return v, ok
}

func (g *twoGen[K, V]) put(k K, v V) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.putLocked(k, v)
}

func (g *twoGen[K, V]) putLocked(k K, v V) {
	if g.cur == nil {
		g.cur = make(map[K]V)
	}
	if len(g.cur) >= max(g.max, 1) {
		g.old, g.cur = g.cur, make(map[K]V, len(g.cur))
	}
	g.cur[k] = v
}

func fnv64(b []byte) uint64 {
	h := uint64(14695981039346656037)
	for _, x := range b {
		h ^= uint64(x)
		h *= 1099511628211
	}
	return h
}
