package upstreams

import (
	"context"
	"fmt"
	"time"
)

// backoffDelay is the wait after the last connection attempt before the
// next one, given how many attempts in a row have failed: MinBackoff after a
// success (a restart after a crash), then MinBackoff, 2×, 4×... capped at
// MaxBackoff.
func backoffDelay(failures int, minB, maxB time.Duration) time.Duration {
	d := minB
	for i := 1; i < failures && d < maxB; i++ {
		d *= 2
	}
	return min(d, maxB)
}

// Start starts the supervisor and returns at once. The supervisor connects,
// retries failed attempts in the background with exponential backoff, and
// logs each failure. Cancelling ctx stops it as Close does, except that
// Close must still be called to wait for the goroutines to end. Calling
// Start again does nothing.
func (u *Upstream) Start(ctx context.Context) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.started || u.closed {
		return
	}
	u.started = true
	u.startedAt = time.Now()
	u.life, u.stop = context.WithCancel(ctx)
	u.wg.Go(u.supervise)
}

// WaitReady blocks until the upstream has been up once, ctx ends or the
// upstream is closed.
func (u *Upstream) WaitReady(ctx context.Context) error {
	for {
		u.mu.Lock()
		ready, closed, changed := u.everUp, u.closed, u.changed
		lastErr := u.lastErr
		u.mu.Unlock()
		switch {
		case ready:
			return nil
		case closed:
			return unavailable(nil, "upstream %q is closed", u.Name())
		}
		select {
		case <-changed:
		case <-ctx.Done():
			if lastErr != nil {
				return unavailable(ctx.Err(), "upstream %q is not ready: %v (last attempt: %v)", u.Name(), ctx.Err(), u.clean(lastErr))
			}
			return unavailable(ctx.Err(), "upstream %q is not ready: %v", u.Name(), ctx.Err())
		}
	}
}

// StartedAt returns when Start began the upstream's first connection
// attempt, zero before Start.
func (u *Upstream) StartedAt() time.Time {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.startedAt
}

// WaitAttempted blocks until the upstream's first connection attempt has
// finished, whether it came up or failed, or until ctx ends or the
// upstream is closed. A caller that must answer quickly waits with it for
// an upstream that is starting, and never for one whose attempts fail and
// are retried with backoff.
func (u *Upstream) WaitAttempted(ctx context.Context) error {
	return u.waitFor(ctx, func() bool { return u.everUp || u.attempts > 0 })
}

// waitFor blocks until done (called with u.mu held) reports true, ctx ends
// or the upstream is closed.
func (u *Upstream) waitFor(ctx context.Context, done func() bool) error {
	for {
		u.mu.Lock()
		ok, closed, changed := done(), u.closed, u.changed
		u.mu.Unlock()
		switch {
		case ok:
			return nil
		case closed:
			return unavailable(nil, "upstream %q is closed", u.Name())
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Status returns the current state and, when the upstream is not up, why:
// the error of the last failed connection attempt (nil while the first
// attempt runs or when it was simply lost and not yet restarted).
func (u *Upstream) Status() (State, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.state == StateUp {
		return StateUp, nil
	}
	return u.state, u.clean(u.lastErr)
}

// supervise runs the connection attempts: in the background while they
// fail, and on demand (a waiting call) after a connection was lost.
func (u *Upstream) supervise() {
	for {
		u.mu.Lock()
		for !u.closed && u.life.Err() == nil && (u.liveLocked() != nil || (u.failures == 0 && u.everUp && u.demand == 0 && !u.reconnect)) {
			u.mu.Unlock()
			select {
			case <-u.wake:
			case <-u.life.Done():
			}
			u.mu.Lock()
		}
		if u.closed || u.life.Err() != nil {
			c := u.conn
			u.conn = nil
			u.mu.Unlock()
			if c != nil {
				c.fail(errClosing)
			}
			return
		}
		wait := time.Duration(0)
		if !u.lastAttempt.IsZero() {
			wait = time.Until(u.lastAttempt.Add(backoffDelay(u.failures, u.opts.MinBackoff, u.opts.MaxBackoff)))
		}
		u.mu.Unlock()
		if wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-u.life.Done():
				t.Stop()
				continue
			}
		}

		u.mu.Lock()
		u.lastAttempt = time.Now()
		u.attempting = true
		u.reconnect = false
		seq := u.setStateLocked(StateStarting, false)
		u.mu.Unlock()
		u.notifyState(seq, StateStarting)

		c, cat, err := u.connect(u.life)
		if err == nil && c.isDead() {
			// Lost between the catalogue fetch and now (a stdio server
			// that exited at once, say).
			err = fmt.Errorf("the connection was lost as soon as it started: %w", c.cause)
		}

		u.mu.Lock()
		u.attempting = false
		u.attempts++
		if err == nil && (u.closed || u.life.Err() != nil) {
			u.mu.Unlock()
			c.fail(errClosing)
			continue
		}
		var state State
		if err != nil {
			u.failures++
			u.lastErr = err
			state = StateDown
			next := backoffDelay(u.failures, u.opts.MinBackoff, u.opts.MaxBackoff)
			seq = u.setStateLocked(StateDown, false)
			u.broadcastLocked()
			u.mu.Unlock()
			if u.life.Err() == nil {
				u.log.Warn("upstream failed to start", "err", err, "failures", u.failures, "retry_in", next)
			}
		} else {
			if c.capsGen != u.capsGen {
				// The capabilities widened during the attempt: connect
				// again with them.
				u.reconnect = true
				u.mu.Unlock()
				c.fail(errWidened)
				continue
			}
			u.failures = 0
			u.lastErr = nil
			c.up.Store(true)
			u.conn = c
			u.catalog = cat
			if u.everUp {
				u.restarts++
			}
			u.everUp = true
			state = StateUp
			seq = u.setStateLocked(StateUp, false)
			u.broadcastLocked()
			u.mu.Unlock()
			c.startQueue()
			u.log.Info("upstream up", "protocol_version", cat.ProtocolVersion, "tools", len(cat.Tools),
				"resources", len(cat.Resources), "resource_templates", len(cat.ResourceTemplates), "prompts", len(cat.Prompts))
		}
		u.notifyState(seq, state)
	}
}

// connLost is called once a connection has been torn down.
func (u *Upstream) connLost(c *conn) {
	u.mu.Lock()
	if u.conn != c {
		u.mu.Unlock()
		return
	}
	u.conn = nil
	seq := u.setStateLocked(StateDown, false)
	u.mu.Unlock()
	u.poke() // a call may be waiting for a new connection
	u.notifyState(seq, StateDown)
}

// setCatalog stores a refreshed catalogue fetched on c, if c is still the
// current connection, and reports it through OnState.
func (u *Upstream) setCatalog(c *conn, update func(*Catalog)) {
	u.mu.Lock()
	if u.conn != c {
		u.mu.Unlock()
		return
	}
	update(&u.catalog)
	seq := u.setStateLocked(StateUp, true)
	u.mu.Unlock()
	u.notifyState(seq, StateUp)
}

// liveLocked returns the current connection unless it has been lost.
// u.mu must be held.
func (u *Upstream) liveLocked() *conn {
	if u.conn == nil || u.conn.isDead() {
		return nil
	}
	return u.conn
}

func (u *Upstream) poke() {
	select {
	case u.wake <- struct{}{}:
	default:
	}
}
