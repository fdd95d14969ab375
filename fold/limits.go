package fold

import (
	"context"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Length limits of the fold tools' texts, in characters (runes), counted
// after control characters are stripped.
const (
	MaxDescription = 500
	MaxPrompt      = 10_000
	MaxMessage     = 50_000 // return messages and return values
	maxIDLen       = 256    // branch ids and handles in arguments
	maxDependsOn   = 32
)

// cleanText strips control characters other than newline and tab, replaces
// invalid UTF-8, and refuses a text longer than limit runes.
func cleanText(field, s string, limit int) (string, error) {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.Map(func(r rune) rune {
		if r == '\n' || r == '\t' || !unicode.IsControl(r) {
			return r
		}
		return -1
	}, s)
	if n := utf8.RuneCountInString(s); n > limit {
		return "", fmt.Errorf("%w: %s is %d characters; the maximum is %d: shorten it", ErrInvalidArgument, field, n, limit)
	}
	return s, nil
}

// scanText scrubs a text at fold time. A scan failure refuses the
// operation: nothing unscanned is stored (fail closed).
func (m *Manager) scanText(ctx context.Context, field, text string) (string, error) {
	if text == "" || m.scan == nil {
		return text, nil
	}
	clean, _, err := m.scan.ScrubText(ctx, text)
	if err != nil {
		return "", fmt.Errorf("%w: the %s could not be scanned for secrets (%v); nothing was stored: retry, or shorten it", ErrScanFailed, field, err)
	}
	return clean, nil
}

// checkCreateLocked refuses a creation in s beyond the per-session and
// per-instance active limits, beyond the session's share of the instance
// (policy Fold.MayExceedShare) or the per-session rate, and otherwise
// reserves a slot when reserve is set. The caller holds m.mu.
func (m *Manager) checkCreateLocked(s *session, now time.Time, reserve bool) error {
	if s.ending {
		return fmt.Errorf("%w: session %q is ending", ErrSessionNotFound, s.id)
	}
	if n := len(s.active) + s.reserved; n >= m.set.MaxActivePerSess {
		return fmt.Errorf("%w: this session has %d active branches, the maximum; return one (branch_return) before creating another, or do the work in the current branch", ErrTooManyBranches, n)
	}
	if m.active >= m.set.MaxActiveInstance {
		return fmt.Errorf("%w: this proxy has %d active branches across its sessions, the maximum; return a branch first, or do the work in the current branch", ErrTooManyBranches, m.active)
	}
	if held := len(s.active) + s.reserved; !m.set.MayExceedShare(held, m.active, m.owedLocked(s)) {
		return fmt.Errorf("%w: this session holds %d active branches, beyond the %d every session is sure of, and the proxy keeps its last %d free slots for other sessions; return a branch first, or do the work in the current branch", ErrTooManyBranches, held, m.set.Guaranteed(), m.set.MaxActiveInstance-m.active)
	}
	// The times are in the order of the reservations (each taken just
	// before its own; two concurrent creations may swap by the moment
	// between reading the clock and taking m.mu): drop the ones a minute
	// old from the front, rather than pass over all of them at every
	// creation.
	old := 0
	for old < len(s.creates) && now.Sub(s.creates[old]) >= time.Minute {
		old++
	}
	s.creates = s.creates[old:]
	if len(s.creates) >= m.set.CreatesPerMinute {
		retry := max(time.Minute-now.Sub(s.creates[0]), time.Second).Round(time.Second)
		return fmt.Errorf("%w: this session created %d branches in the last minute, the limit; retry in %s, or keep working in the current branch", ErrRateLimited, len(s.creates), retry)
	}
	if reserve {
		s.creates = append(s.creates, now)
		s.reserved++
		m.active++
	}
	return nil
}

// owedLocked returns how many active branches the open sessions other
// than s are owed: the sum of how far each is below its guaranteed share
// (policy Fold.Guaranteed). An ending session is owed nothing. The caller
// holds m.mu.
func (m *Manager) owedLocked(s *session) int {
	g, owed := m.set.Guaranteed(), 0
	for _, o := range m.sessions {
		if o != s && !o.ending {
			owed += max(0, g-len(o.active)-o.reserved)
		}
	}
	return owed
}

// release undoes a reservation made by checkCreateLocked.
func (m *Manager) release(s *session, registered bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s.reserved--
	if !registered {
		m.active--
		if len(s.creates) > 0 {
			s.creates = s.creates[:len(s.creates)-1]
		}
	}
}
