package proxy

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/foldproxy/foldproxy/upstreams"
)

// startingUpstream is an upstream whose first connection attempt never
// ends, started at a given time.
type startingUpstream struct {
	*fakeUpstream
	started time.Time
}

func (u *startingUpstream) WaitAttempted(ctx context.Context) error {
	<-ctx.Done()
	return ctx.Err()
}
func (u *startingUpstream) StartedAt() time.Time { return u.started }
func (u *startingUpstream) Status() (upstreams.State, error) {
	return upstreams.StateStarting, nil
}

// The first tools/list waits readyWait for an upstream that started with
// the session, and not at all for one that has been starting for longer
// than readyWait before the session opened (a session attaching to a warm
// daemon). Time is synctest's.
func TestReadyWaitCountsFromTheUpstreamsStart(t *testing.T) {
	for _, c := range []struct {
		name    string
		started time.Duration // before the session opens
		want    time.Duration
	}{
		{"started with the session", 0, 500 * time.Millisecond},
		{"started 200ms before", 200 * time.Millisecond, 300 * time.Millisecond},
		{"starting for an hour", time.Hour, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ready := &fakeUpstream{name: "ready", cat: upstreams.Catalog{Tools: []json.RawMessage{json.RawMessage(echoTool)}}}
				slow := &startingUpstream{fakeUpstream: &fakeUpstream{name: "slow"}, started: time.Now().Add(-c.started)}
				s, _ := newTestServer(t, []Upstream{ready, slow}, func(o *Options) { o.ReadyWait = 500 * time.Millisecond })
				sess := initSession(t, s, `{}`)
				start := time.Now()
				resp := do(t, s, sess, "tools/list", `{}`)
				if took := time.Since(start); took != c.want {
					t.Errorf("tools/list answered after %s, want %s", took, c.want)
				}
				if resp.Error != nil || !strings.Contains(string(resp.Result), `"ready__echo"`) {
					t.Fatalf("tools/list: %s / %v; want ready__echo listed", resp.Result, resp.Error)
				}
			})
		})
	}
}
