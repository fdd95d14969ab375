package proxy

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"time"

	"github.com/foldproxy/foldproxy/upstreams"
)

// This file holds the negotiation of client capabilities: which of the
// agent's capabilities the upstreams are told about, on the agent's
// initialize (Options.ClientCapabilities).

// relayedCaps are the client capabilities foldproxy relays to an agent,
// with what it advertises upstream for each.
var relayedCaps = map[string]json.RawMessage{
	"roots":       json.RawMessage(`{"listChanged":true}`),
	"sampling":    json.RawMessage(`{}`),
	"elicitation": json.RawMessage(`{}`),
}

// AdvertiseClientCaps is foldproxy's rule for the client capabilities
// upstreams are told about: upstreams start advertising none, and each
// of roots, sampling and elicitation is added (to every upstream, which
// sessions share) once an agent that declares it initializes. An upstream
// must be initialized again to learn a capability, so one connected
// without it reconnects; the agent's initialize waits for that: at most
// wait for an upstream that was up, and for one still starting only as the
// catalogue's readiness rule says (Options.ReadyWait), so that a slow
// upstream does not hold the agent's initialize (it joins later with
// list_changed). It never waits for an upstream whose attempts fail. The
// set only grows: a capability some agent declared stays advertised, and a
// request for it from an upstream goes to a session that declared it or is
// refused (Server.UpstreamRequest).
//
// It returns the hook for Options.ClientCapabilities over ups: readyWait
// is Options.ReadyWait, wait the bound for an upstream that was up.
func AdvertiseClientCaps(ups []*upstreams.Upstream, readyWait, wait time.Duration, logger *slog.Logger) func(ctx context.Context, declared json.RawMessage) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return func(ctx context.Context, declared json.RawMessage) {
		advertiseClientCaps(ctx, ups, declared, readyWait, wait, logger)
	}
}

// advertiseClientCaps tells ups the capabilities an agent declared (see
// AdvertiseClientCaps) and waits as it says.
func advertiseClientCaps(ctx context.Context, ups []*upstreams.Upstream, declared json.RawMessage, readyWait, wait time.Duration, logger *slog.Logger) {
	var d map[string]json.RawMessage
	if err := json.Unmarshal(declared, &d); err != nil {
		return
	}
	add := map[string]json.RawMessage{}
	for k, v := range relayedCaps {
		if _, ok := d[k]; ok {
			add[k] = v
		}
	}
	if len(add) == 0 {
		return
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	var wg sync.WaitGroup
	for _, u := range ups {
		// An upstream that is up reconnects for the new capabilities and
		// is waited for (at most wait): a tools/list right after
		// initialize must list what the upstream offers an agent with
		// those capabilities (server-everything adds tools for roots,
		// sampling and elicitation), and the catalogue of the old
		// connection would not. One on its first attempt is waited for as
		// a catalogue request waits; one that is down gets them with its
		// next initialize and is never waited for.
		wasUp := u.State() == upstreams.StateUp
		if !u.Advertise(add) {
			continue
		}
		wg.Go(func() {
			ctx := wctx
			if !wasUp {
				// Within readyWait of its start or of now, whichever
				// came first; one whose attempts fail is never waited
				// for.
				from := time.Now()
				if t := u.StartedAt(); !t.IsZero() && t.Before(from) {
					from = t
				}
				sctx, cancel := context.WithDeadline(wctx, from.Add(readyWait))
				defer cancel()
				ctx = sctx
				if u.WaitAttempted(ctx) != nil {
					return
				}
				if st, _ := u.Status(); st != upstreams.StateUp {
					return
				}
			}
			if err := u.WaitAdvertised(ctx); err != nil {
				logger.Debug("upstream not yet reconnected with the agent's capabilities", "upstream", u.Name(), "err", err)
			}
		})
	}
	wg.Wait()
}
