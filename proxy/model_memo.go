package proxy

import (
	"context"
	"crypto/sha256"
	"sync"
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
	key := sha256.Sum256([]byte(text))
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
