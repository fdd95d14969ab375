package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/foldproxy/foldproxy/policy/jsonscan"
	"github.com/foldproxy/foldproxy/upstreams"
)

// awaitUpstreams waits for upstreams still making their first connection
// attempt, so that an agent that lists tools right after starting sees the
// ones that come up at once: each for at most ReadyWait from the session's
// opening or from the upstream's start, whichever came first (an upstream
// that has been starting for longer than that is slow, and a session that
// opens later does not wait for it again). It never waits for an upstream
// whose attempts have failed (it is retried in the background) nor past
// the bound: what is not up by then joins later with list_changed.
func (s *Server) awaitUpstreams(ctx context.Context, sess *Session) {
	if s.ready.Load() {
		return
	}
	var wg sync.WaitGroup
	var pending atomic.Int32
	for _, u := range s.upstreams {
		w, ok := u.(interface{ WaitAttempted(context.Context) error })
		if !ok {
			continue
		}
		from := sess.opened
		if st, ok := u.(interface{ StartedAt() time.Time }); ok {
			if t := st.StartedAt(); !t.IsZero() && t.Before(from) {
				from = t
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			wctx, cancel := context.WithDeadline(ctx, from.Add(s.opts.ReadyWait))
			defer cancel()
			if w.WaitAttempted(wctx) != nil {
				pending.Add(1)
			}
		}()
	}
	wg.Wait()
	if pending.Load() == 0 {
		s.ready.Store(true)
		s.invalidate()
	}
}

// unavailableText is unavailable joined with "; ", scrubbed (an error may
// quote a URL or a command line); empty when every upstream is up or the
// text could not be scanned.
func (s *Server) unavailableText(ctx context.Context) string {
	down := s.unavailable()
	if len(down) == 0 {
		return ""
	}
	clean, ok := s.scrub(ctx, "", "upstream status", jsonscan.Quote(strings.Join(down, "; ")))
	var text string
	if !ok || json.Unmarshal(clean, &text) != nil {
		return ""
	}
	return text
}

// unavailable describes the upstreams that are not up, sorted by name:
// "name (starting)" or "name (down: why)". Empty when all are up.
func (s *Server) unavailable() []string {
	var out []string
	for _, name := range s.names {
		st, ok := s.upstreams[name].(interface {
			Status() (upstreams.State, error)
		})
		if !ok {
			continue
		}
		state, err := st.Status()
		switch {
		case state == upstreams.StateUp:
		case state == upstreams.StateStarting && err == nil:
			out = append(out, name+" (starting)")
		case err != nil:
			out = append(out, fmt.Sprintf("%s (%s: %v)", name, state, err))
		default:
			out = append(out, fmt.Sprintf("%s (%s)", name, state))
		}
	}
	return out
}

// noteUnavailable appends to a branch_status answer a line naming the
// upstreams that are not up, so that an agent missing a tool learns why.
// The answer is unchanged when every upstream is up.
func (s *Server) noteUnavailable(ctx context.Context, res json.RawMessage) json.RawMessage {
	down := s.unavailableText(ctx)
	if down == "" {
		return res
	}
	var top map[string]json.RawMessage
	var content []json.RawMessage
	if json.Unmarshal(res, &top) != nil || json.Unmarshal(top["content"], &content) != nil {
		return res
	}
	content = append(content, marshalNoEscape(map[string]string{
		"type": "text",
		"text": "Upstreams not available: " + down + ". Their tools join the list when they come up.",
	}))
	top["content"] = marshalNoEscape(content)
	return marshalNoEscape(top)
}
