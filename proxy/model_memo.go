package proxy

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
// generations bound the memory: when the current one holds maxEntries
// texts or maxBytes of scrubbed text, it becomes the old one and the old
// one is dropped; a hit in the old generation moves the entry forward.
type scrubMemo struct {
	scrub      func(ctx context.Context, text string) (string, error)
	maxEntries int
	maxBytes   int

	mu       sync.Mutex
	cur, old map[[sha256.Size]byte]memoEntry
	curBytes int
}

type memoEntry struct {
	clean    bool   // the text had nothing to redact
	scrubbed string // the scrubbed text, when not clean
}

func newScrubMemo(scrub func(ctx context.Context, text string) (string, error), maxEntries, maxBytes int) *scrubMemo {
	return &scrubMemo{scrub: scrub, maxEntries: maxEntries, maxBytes: maxBytes,
		cur: map[[sha256.Size]byte]memoEntry{}, old: map[[sha256.Size]byte]memoEntry{}}
}

// Scrub has the signature of modelwire.Options.Scrub.
func (m *scrubMemo) Scrub(ctx context.Context, text string) (string, error) {
	key := sha256.Sum256(stringBytes(text))
	m.mu.Lock()
	e, ok := m.cur[key]
	if !ok {
		if e, ok = m.old[key]; ok {
			m.putLocked(key, e)
		}
	}
	m.mu.Unlock()
	if ok {
		if e.clean {
			return text, nil
		}
		return e.scrubbed, nil
	}
	out, err := m.scrub(ctx, text)
	if err != nil {
		return "", err // not kept: a timeout may pass next time
	}
	e = memoEntry{clean: out == text}
	if !e.clean {
		e.scrubbed = out
	}
	m.mu.Lock()
	m.putLocked(key, e)
	m.mu.Unlock()
	return out, nil
}

func (m *scrubMemo) putLocked(key [sha256.Size]byte, e memoEntry) {
	if _, ok := m.cur[key]; ok {
		return
	}
	if len(m.cur) >= m.maxEntries || m.curBytes+len(e.scrubbed) > m.maxBytes {
		m.old, m.cur, m.curBytes = m.cur, map[[sha256.Size]byte]memoEntry{}, 0
	}
	m.cur[key] = e
	m.curBytes += len(e.scrubbed)
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
	count      func(text string) int
	maxEntries int

	mu       sync.Mutex
	cur, old map[[sha256.Size]byte]int
}

// countMemoMin is the shortest text whose count is remembered.
const countMemoMin = 512

func newCountMemo(count func(string) int, maxEntries int) *countMemo {
	return &countMemo{count: count, maxEntries: maxEntries,
		cur: map[[sha256.Size]byte]int{}, old: map[[sha256.Size]byte]int{}}
}

// Count has the signature of modelwire.Options.Count.
func (m *countMemo) Count(text string) int {
	if len(text) < countMemoMin {
		return m.count(text)
	}
	key := sha256.Sum256(stringBytes(text))
	m.mu.Lock()
	n, ok := m.cur[key]
	if !ok {
		if n, ok = m.old[key]; ok {
			m.putLocked(key, n)
		}
	}
	m.mu.Unlock()
	if ok {
		return n
	}
	n = m.count(text)
	m.mu.Lock()
	m.putLocked(key, n)
	m.mu.Unlock()
	return n
}

func (m *countMemo) putLocked(key [sha256.Size]byte, n int) {
	if _, ok := m.cur[key]; ok {
		return
	}
	if len(m.cur) >= m.maxEntries {
		m.old, m.cur = m.cur, map[[sha256.Size]byte]int{}
	}
	m.cur[key] = n
}

// stringBytes is a view of s's bytes, for hashing without a copy; it must
// not be written to.
func stringBytes(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }
