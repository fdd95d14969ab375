package intercept

import (
	"log/slog"
	"time"
)

// KindRelay is the audit record of a message relayed from an upstream to
// the agent outside a call's result (a notification or a server-to-client
// request) that had secrets removed.
const KindRelay = "relay"

// Observer records what the proxy sees beside the calls' chain: sessions
// opened and closed (metrics) and the secrets removed from a relayed
// message (metrics and a KindRelay audit record). It has the methods of
// proxy's Observer; serve adds the model front's to it. Its methods are
// safe for concurrent use.
type Observer struct {
	auditor *Auditor
	metrics *Metrics
	logger  *slog.Logger
}

// Observer returns the observer over p's Auditor and Metrics, logging a
// record it cannot write to logger (nil discards).
func (p Parts) Observer(logger *slog.Logger) *Observer {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Observer{auditor: p.Auditor, metrics: p.Metrics, logger: logger}
}

// SessionOpened counts a session opened.
func (o *Observer) SessionOpened() { o.metrics.SessionOpened() }

// SessionClosed counts a session closed.
func (o *Observer) SessionClosed() { o.metrics.SessionClosed() }

// Relayed records the secrets removed, by rule, from a message relayed
// from upstream to the agent outside a call's result.
func (o *Observer) Relayed(upstream, method string, redactions map[string]int) {
	o.metrics.Redacted(redactions)
	rec := Record{Time: time.Now(), Kind: KindRelay, Upstream: upstream, Method: method, Redactions: redactions, Outcome: OutcomeOK}
	if err := o.auditor.Write(rec); err != nil {
		o.logger.Warn("audit record of a relayed message", "err", err)
	}
}
