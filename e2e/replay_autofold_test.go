package e2e

// The trajectory replay of automatic folding, end to end: the repository's
// real agent trajectories played as Claude Code conversations, by an agent
// that never calls a fold tool, through the real binary's model front to a
// scripted model API (replay.Upstream), against the same conversations sent
// to it directly. Token figures are deterministic up to the fold handles'
// random key (a few tokens a stub): the bounds hold them.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/foldproxy/foldproxy/e2e/replay"
	"github.com/foldproxy/foldproxy/e2e/trajectory"
	"github.com/foldproxy/foldproxy/intercept/tokens"
	"github.com/foldproxy/foldproxy/policy"
)

// replayFigures are the figures of one replay setup, folded against direct.
type replayFigures struct {
	direct, folded replay.Stats
}

func (f replayFigures) saved() float64 { return 1 - f.folded.Billed/f.direct.Billed }
func (f replayFigures) end() float64   { return float64(f.folded.EndSum) / float64(f.direct.EndSum) }
func (f replayFigures) peak() float64  { return float64(f.folded.Peak) / float64(f.direct.Peak) }

func (f replayFigures) String() string {
	d, s := f.direct, f.folded
	return fmt.Sprintf("%d conversations, %d requests: billed input %.0f -> %.0f (%.1f%% saved; reads %d -> %d, writes %d -> %d); "+
		"mean context %d -> %d; end of task %d -> %d (%.1f%%); peak %d -> %d (%.1f%%); prefix held on %d/%d -> %d/%d successive requests; "+
		"%d folds %v, %d recalled exactly, %d recalls failed, %d invalid requests; at the end, results %d -> %d tokens a task, stubs %d",
		s.Conversations, s.Requests, d.Billed, s.Billed, 100*f.saved(), d.Reads, s.Reads, d.Writes, s.Writes,
		d.ContextSum/int64(max(d.Requests, 1)), s.ContextSum/int64(max(s.Requests, 1)),
		d.EndSum/int64(max(d.Conversations, 1)), s.EndSum/int64(max(s.Conversations, 1)), 100*f.end(),
		d.Peak, s.Peak, 100*f.peak(), d.PrefixHeld, d.Successive, s.PrefixHeld, s.Successive,
		s.Folds, s.ByKind, s.Recalled, s.RecallFailed, s.Invalid+d.Invalid,
		d.EndResults/int64(max(d.Conversations, 1)), s.EndResults/int64(max(s.Conversations, 1)), s.EndStubs/int64(max(s.Conversations, 1)))
}

// playReplay plays the trajectories direct and through a fresh foldproxy
// with the default configuration.
func playReplay(ctx context.Context, t testing.TB, trajs []trajectory.Trajectory, perConv int) replayFigures {
	t.Helper()
	c, err := tokens.NewCounter(policy.Default().Tokens)
	if err != nil {
		t.Fatal(err)
	}
	counter := &replay.Memo{C: c}
	up := &replay.Upstream{}
	srv := httptest.NewServer(up)
	t.Cleanup(srv.Close)
	up.URL = srv.URL
	model := map[string]any{"anthropicURL": srv.URL}
	if a := os.Getenv("FOLDPROXY_REPLAY_MODEL"); a != "" {
		// Tuning: the model settings, as JSON.
		if err := json.Unmarshal([]byte(a), &model); err != nil {
			t.Fatalf("FOLDPROXY_REPLAY_MODEL: %v", err)
		}
	}
	if a := os.Getenv("FOLDPROXY_REPLAY_AUTOFOLD"); a != "" {
		// Tuning: automatic folding's settings, as JSON.
		var af map[string]any
		if err := json.Unmarshal([]byte(a), &af); err != nil {
			t.Fatalf("FOLDPROXY_REPLAY_AUTOFOLD: %v", err)
		}
		model["autofold"] = af
	}
	cfg := writeConfig(t, map[string]any{}, map[string]any{"model": model})
	mcpURL, _ := startProxyHTTPProcess(t, cfg)
	front := strings.TrimSuffix(mcpURL, "/mcp")
	hc := &http.Client{Timeout: 2 * time.Minute}
	opt := replay.Options{PerConversation: perConv, Count: counter, VerifyRecalls: true}
	var f replayFigures
	opt.Direct = true
	if f.direct, err = replay.Play(ctx, hc, front, up, trajs, opt); err != nil {
		t.Fatalf("direct: %v", err)
	}
	opt.Direct = false
	if f.folded, err = replay.Play(ctx, hc, front, up, trajs, opt); err != nil {
		t.Fatalf("through foldproxy: %v", err)
	}
	for _, e := range append(f.direct.Errors, f.folded.Errors...) {
		t.Error(e)
	}
	return f
}

// TestReplayAutoFold holds automatic folding to bounds on the repository's
// trajectories (the development set), played one task a conversation and
// as long sessions of eight tasks.
func TestReplayAutoFold(t *testing.T) {
	trajs, err := trajectory.LoadRepo()
	if err != nil {
		t.Fatal(err)
	}
	ctx := testContext(t, 10*time.Minute)
	for _, tc := range []struct {
		name              string
		perConv           int
		minSaved          float64 // of the billed input
		maxEnd, maxPeak   float64 // of the baseline's
		minPrefixHeldRate float64 // of the successive requests
	}{
		{"tasks", 1, 0.20, 0.50, 0.70, 0.78},
		{"long sessions", 8, 0.50, 0.40, 0.35, 0.74},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := playReplay(ctx, t, trajs, tc.perConv)
			t.Log(f)
			s := f.folded
			if s.Invalid+f.direct.Invalid != 0 {
				t.Errorf("%d invalid requests", s.Invalid+f.direct.Invalid)
			}
			if s.Folds == 0 || s.Recalled != s.Folds || s.RecallFailed != 0 {
				t.Errorf("%d folds, %d recalled exactly, %d failed: every fold must read back exactly", s.Folds, s.Recalled, s.RecallFailed)
			}
			if got := f.saved(); got < tc.minSaved {
				t.Errorf("billed input saved %.1f%%, want at least %.0f%%", 100*got, 100*tc.minSaved)
			}
			if got := f.end(); got > tc.maxEnd {
				t.Errorf("end-of-task context %.1f%% of the baseline's, want at most %.0f%%", 100*got, 100*tc.maxEnd)
			}
			if got := f.peak(); got > tc.maxPeak {
				t.Errorf("peak context %.1f%% of the baseline's, want at most %.0f%%", 100*got, 100*tc.maxPeak)
			}
			if got := float64(s.PrefixHeld) / float64(max(s.Successive, 1)); got < tc.minPrefixHeldRate {
				t.Errorf("the prefix held on %.1f%% of successive requests, want at least %.0f%%", 100*got, 100*tc.minPrefixHeldRate)
			}
		})
	}
}
