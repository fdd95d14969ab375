package upstreams

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/foldproxy/foldproxy/policy/jsonrpc"
)

// clean is err without the entry's credentials (an HTTP upstream's URL
// with its password or api_key in a transport error, say): the errors of
// an upstream reach the agent (instructions, tool errors) and the logs.
// A JSON-RPC error keeps its type and code.
func (u *Upstream) clean(err error) error {
	if err == nil || u.red.Empty() {
		return err
	}
	if re, ok := err.(*jsonrpc.Error); ok {
		msg, data := u.red.String(re.Message), u.red.String(string(re.Data))
		if msg == re.Message && data == string(re.Data) {
			return err
		}
		c := &jsonrpc.Error{Code: re.Code, Message: msg}
		if len(re.Data) > 0 && json.Valid([]byte(data)) {
			c.Data = json.RawMessage(data)
		}
		return c
	}
	return u.red.Error(err)
}

// acquire returns the live connection. When the upstream is down it asks
// the supervisor for a connection and waits at most min(ctx, DownWait) for
// an attempt to succeed; a failed attempt or the end of the wait fails the
// call with ErrUnavailable.
func (u *Upstream) acquire(ctx context.Context, method string) (*conn, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if c := u.liveLocked(); c != nil && !u.closed {
		return c, nil
	}
	if u.closed {
		return nil, unavailable(nil, "upstream %q is closed", u.Name())
	}
	if !u.started || u.life.Err() != nil {
		return nil, unavailable(nil, "upstream %q is not started", u.Name())
	}
	// Fail fast when no attempt can start within the wait.
	wait := u.opts.DownWait
	if d, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(d))
	}
	if !u.attempting && u.failures > 0 {
		next := time.Until(u.lastAttempt.Add(backoffDelay(u.failures, u.opts.MinBackoff, u.opts.MaxBackoff)))
		if next > wait {
			return nil, unavailable(u.lastErr, "upstream %q is down (last attempt: %v); next attempt in %s; %s was not sent", u.Name(), u.lastErr, next.Round(time.Millisecond), method)
		}
	}
	u.demand++
	defer func() { u.demand-- }()
	u.poke()
	attempts := u.attempts
	timer := time.NewTimer(u.opts.DownWait)
	defer timer.Stop()
	for {
		if c := u.liveLocked(); c != nil {
			return c, nil
		}
		if u.closed {
			return nil, unavailable(nil, "upstream %q is closed", u.Name())
		}
		if u.attempts > attempts && u.lastErr != nil && !u.attempting {
			return nil, unavailable(u.lastErr, "upstream %q is down and could not be started for %s: %v", u.Name(), method, u.lastErr)
		}
		changed := u.changed
		u.mu.Unlock()
		var err error
		select {
		case <-changed:
		case <-ctx.Done():
			err = ctx.Err()
		case <-timer.C:
			err = errDownWait
		}
		u.mu.Lock()
		switch {
		case err == nil:
		case u.liveLocked() != nil:
			return u.conn, nil
		case errors.Is(err, errDownWait):
			next := time.Until(u.lastAttempt.Add(backoffDelay(u.failures, u.opts.MinBackoff, u.opts.MaxBackoff)))
			why := "no connection attempt has succeeded yet"
			if u.lastErr != nil {
				why = fmt.Sprintf("last attempt: %v", u.lastErr)
			}
			if u.attempting {
				return nil, unavailable(u.lastErr, "upstream %q is down and still starting after %s (%s); %s was not sent", u.Name(), u.opts.DownWait, why, method)
			}
			return nil, unavailable(u.lastErr, "upstream %q is down (%s); next attempt in %s; %s was not sent", u.Name(), why, next.Round(time.Millisecond), method)
		default:
			return nil, unavailable(err, "upstream %q is down and did not come up for %s before the call ended: %v", u.Name(), method, err)
		}
	}
}

var (
	errDownWait = errors.New("down wait over")
	errClosing  = errors.New("upstream closed")
	errWidened  = errors.New("reconnecting to advertise more client capabilities")
)

// Call sends a request upstream and returns its result raw, byte for byte.
// params must be valid JSON (the proxy's come from a message it has
// decoded): they are sent as they are, not checked again.
// A JSON-RPC error from the upstream is returned as *jsonrpc.Error. When ctx ends
// first, notifications/cancelled is sent upstream and ctx.Err() returned.
// When the upstream is down, or is lost while handling the request, the
// error wraps ErrUnavailable; a crashed stdio server is restarted by the
// next call. An HTTP upstream that has forgotten the session is initialized
// again and the request retried once.
func (u *Upstream) Call(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error) {
	res, err := u.call(ctx, method, params)
	return res, u.clean(err)
}

func (u *Upstream) call(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error) {
	c, err := u.acquire(ctx, method)
	if err != nil {
		return nil, err
	}
	gen := c.generation()
	res, err := c.call(ctx, method, params, true)
	if !errors.Is(err, errSessionLost) {
		return res, err
	}
	u.log.Info("upstream session lost, initializing a new one", "method", method)
	if err := c.reinitialize(ctx, gen); err != nil {
		return nil, err
	}
	res, err = c.call(ctx, method, params, true)
	if errors.Is(err, errSessionLost) {
		return nil, unavailable(err, "upstream %q lost the new session too while handling %s", u.Name(), method)
	}
	return res, err
}

// Notify sends a notification upstream. It fails with ErrUnavailable at
// once when the upstream is down: notifications do not restart it.
func (u *Upstream) Notify(ctx context.Context, method string, params json.RawMessage) error {
	u.mu.Lock()
	c := u.conn
	u.mu.Unlock()
	if c == nil {
		return unavailable(nil, "upstream %q is down; %s was not sent", u.Name(), method)
	}
	return u.clean(c.notify(ctx, method, params))
}
