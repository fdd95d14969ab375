package modelfront

import (
	"context"
	"crypto/sha256"
	"sync"
	"unsafe"
)

// scrubMemo remembers what the scrubber made of a text. An agent resends
// its whole history on every model request, so the same tool results are
// scrubbed turn after turn; the scrubber is a pure function of the text
// (its rules are fixed at start-up), so its answer can be reused. Only
// successful scans are kept, keyed by the text's SHA-256, holding the
// scrubbed text (never a raw secret) or nothing when it was clean. Two
// generations bound the memory (twoGen): maxEntries texts or maxBytes of
// scrubbed text each.
type scrubMemo struct {
	scrub func(ctx context.Context, text string) (string, error)
	gen   twoGen[memoEntry]
}

type memoEntry struct {
	clean    bool   // the text had nothing to redact
	scrubbed string // the scrubbed text, when not clean
}

func newScrubMemo(scrub func(ctx context.Context, text string) (string, error), maxEntries, maxBytes int) *scrubMemo {
	return &scrubMemo{scrub: scrub, gen: newTwoGen(maxEntries, maxBytes, func(e memoEntry) int { return len(e.scrubbed) })}
}

// Scrub has the signature of modelwire.Options.Scrub.
func (m *scrubMemo) Scrub(ctx context.Context, text string) (string, error) {
	key := sha256.Sum256(stringBytes(text))
	if e, ok := m.gen.get(key); ok {
		if e.clean {
			return text, nil
		}
		return e.scrubbed, nil
	}
	out, err := m.scrub(ctx, text)
	if err != nil {
		return "", err // not kept: a timeout may pass next time
	}
	e := memoEntry{clean: out == text}
	if !e.clean {
		e.scrubbed = out
	}
	m.gen.put(key, e)
	return out, nil
}

// countMemo remembers the token counts of texts, as scrubMemo remembers
// what the scrubber made of them: every model request carries the whole
// conversation, and the model front counts all of it (the context's size
// as sent, and as forwarded when it folded something), so without it a
// long session's history was counted again on every turn. The counter is
// a pure function of the text. Texts shorter than countMemoMin are counted
// directly (the hash would cost about as much). Two generations of at
// most maxEntries counts bound the memory.
type countMemo struct {
	count func(text string) int
	gen   twoGen[int]
}

// countMemoMin is the shortest text whose count is remembered.
const countMemoMin = 512

func newCountMemo(count func(string) int, maxEntries int) *countMemo {
	return &countMemo{count: count, gen: newTwoGen[int](maxEntries, 0, nil)}
}

// Count has the signature of modelwire.Options.Count.
func (m *countMemo) Count(text string) int {
	if len(text) < countMemoMin {
		return m.count(text)
	}
	key := sha256.Sum256(stringBytes(text))
	if n, ok := m.gen.get(key); ok {
		return n
	}
	n := m.count(text)
	m.gen.put(key, n)
	return n
}

// twoGen is a memo of two generations, keyed by SHA-256: when the current
// generation holds maxEntries values, or maxBytes of them by size (when
// maxBytes is not 0), it becomes the old one and the old one is dropped;
// a value found in the old generation moves forward.
type twoGen[V any] struct {
	maxEntries, maxBytes int
	size                 func(V) int

	mu       sync.Mutex
	cur, old map[[sha256.Size]byte]V
	curBytes int
}

func newTwoGen[V any](maxEntries, maxBytes int, size func(V) int) twoGen[V] {
	return twoGen[V]{maxEntries: maxEntries, maxBytes: maxBytes, size: size,
		cur: map[[sha256.Size]byte]V{}, old: map[[sha256.Size]byte]V{}}
}

func (g *twoGen[V]) get(key [sha256.Size]byte) (V, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	v, ok := g.cur[key]
	if !ok {
		if v, ok = g.old[key]; ok {
			g.putLocked(key, v)
		}
	}
	return v, ok
}

func (g *twoGen[V]) put(key [sha256.Size]byte, v V) {
	g.mu.Lock()
	g.putLocked(key, v)
	g.mu.Unlock()
}

func (g *twoGen[V]) putLocked(key [sha256.Size]byte, v V) {
	if _, ok := g.cur[key]; ok {
		return
	}
	n := 0
	if g.size != nil {
		n = g.size(v)
	}
	if len(g.cur) >= g.maxEntries || g.maxBytes > 0 && g.curBytes+n > g.maxBytes {
		g.old, g.cur, g.curBytes = g.cur, map[[sha256.Size]byte]V{}, 0
	}
	g.cur[key] = v
	g.curBytes += n
}

// stringBytes is a view of s's bytes, for hashing without a copy; it must
// not be written to.
func stringBytes(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// acrossMemo remembers which runs of texts ScrubAcross found nothing
// across (by far the most common answer), for the same reason as
// scrubMemo: the history's results and user messages come back on every
// request. A run with a secret across its parts is scanned again each
// time (rare, and nothing raw is kept).
type acrossMemo struct {
	across func(ctx context.Context, texts []string) ([]string, error)
	gen    twoGen[memoEntry]
}

func newAcrossMemo(across func(ctx context.Context, texts []string) ([]string, error), maxEntries int) *acrossMemo {
	return &acrossMemo{across: across, gen: newTwoGen[memoEntry](maxEntries, 0, nil)}
}

// ScrubAcross has the signature of modelwire.Options.ScrubAcross.
func (m *acrossMemo) ScrubAcross(ctx context.Context, texts []string) ([]string, error) {
	h := sha256.New()
	var n [8]byte
	for _, t := range texts {
		l := len(t)
		for i := range n {
			n[i] = byte(l >> (8 * i))
		}
		h.Write(n[:])
		h.Write(stringBytes(t))
	}
	var key [sha256.Size]byte
	h.Sum(key[:0])
	if _, ok := m.gen.get(key); ok {
		return texts, nil
	}
	out, err := m.across(ctx, texts)
	if err != nil {
		return nil, err
	}
	clean := len(out) == len(texts)
	for i := 0; clean && i < len(out); i++ {
		clean = out[i] == texts[i]
	}
	if clean {
		m.gen.put(key, memoEntry{clean: true})
	}
	return out, nil
}
