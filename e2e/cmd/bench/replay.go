package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/foldproxy/foldproxy/e2e/replay"
	"github.com/foldproxy/foldproxy/e2e/trajectory"
	"github.com/foldproxy/foldproxy/intercept/tokens"
	"github.com/foldproxy/foldproxy/policy"
)

// runReplay measures automatic folding (issue 24) on the trajectory data:
// every trajectory played as a Claude Code conversation by an agent that
// never calls a fold tool, through the real binary's model front with the
// default configuration and directly to the same model API (the
// baseline), one task a conversation and as long sessions of eight tasks:
// billed input under prompt caching (cache reads and writes modelled from
// where each request first differs from the one before, at 0.1 and 1.25),
// the context at the end of each task and at its peak, how often the
// cached prefix held, the folds, their recalls and invalid requests. Then
// the time the model front adds to the first streamed byte of a growing
// 200-turn, 150 KB conversation, automatic folding included.
func runReplay(ctx context.Context, e *env, res *results) error {
	const sec = "9 replay"
	trajs, err := trajectory.Load(e.data)
	if err != nil {
		return err
	}
	c, err := tokens.NewCounter(policy.Default().Tokens)
	if err != nil {
		return err
	}
	counter := &replay.Memo{C: c}
	up := &replay.Upstream{}
	srv := httptest.NewServer(up)
	defer srv.Close()
	up.URL = srv.URL
	cfg, err := e.writeConfig("replay.json", map[string]any{}, map[string]any{"model": map[string]any{"anthropicURL": srv.URL}})
	if err != nil {
		return err
	}
	state, err := e.stateDir("replay")
	if err != nil {
		return err
	}
	addr, stop, err := startBackground(ctx, "foldproxy", "/healthz", e.proxy, "serve", "--config", cfg, "--listen", "{addr}", "--state", state, "--log-level", "warn")
	if err != nil {
		return err
	}
	defer stop()
	front := "http://" + addr
	hc := &http.Client{Timeout: 2 * time.Minute}

	for _, set := range []struct {
		label            string
		perConv          int
		saved, end, peak float64 // targets
	}{
		{"tasks", 1, 0.20, 0.50, 0.70},
		{"long sessions of 8 tasks", 8, 0.50, 0, 0.35},
	} {
		if e.quick && set.perConv > 1 {
			continue
		}
		opt := replay.Options{PerConversation: set.perConv, Count: counter, VerifyRecalls: true, Direct: true}
		d, err := replay.Play(ctx, hc, front, up, trajs, opt)
		if err != nil {
			return fmt.Errorf("%s, direct: %w", set.label, err)
		}
		opt.Direct = false
		f, err := replay.Play(ctx, hc, front, up, trajs, opt)
		if err != nil {
			return fmt.Errorf("%s, through foldproxy: %w", set.label, err)
		}
		if len(f.Errors) > 0 {
			e.log.Warn("replay", "set", set.label, "errors", strings.Join(f.Errors, "; "))
		}
		saved := 1 - f.Billed/d.Billed
		res.add(row{Section: sec, Metric: "billed input, " + set.label, Value: fmt.Sprintf("%.2f M", f.Billed/1e6), Baseline: fmt.Sprintf("%.2f M direct", d.Billed/1e6),
			Ratio: ratio(f.Billed, d.Billed), Target: fmt.Sprintf(">= %.0f%% saved", 100*set.saved), Met: met(saved >= set.saved), Num: f.Billed, Base: d.Billed, Unit: "tokens",
			Note: fmt.Sprintf("%.1f%% saved; cache reads %.1f -> %.1f M, writes %.2f -> %.2f M; %d conversations, %d requests",
				100*saved, float64(d.Reads)/1e6, float64(f.Reads)/1e6, float64(d.Writes)/1e6, float64(f.Writes)/1e6, f.Conversations, f.Requests)})
		endF, endD := float64(f.EndSum)/float64(f.Conversations), float64(d.EndSum)/float64(d.Conversations)
		r := row{Section: sec, Metric: "end-of-task context, " + set.label, Value: fmt.Sprintf("%.0f", endF), Baseline: fmt.Sprintf("%.0f direct", endD),
			Ratio: ratio(endF, endD), Num: endF, Base: endD, Unit: "tokens", Note: "mean over conversations of the last request"}
		if set.end > 0 {
			r.Target, r.Met = fmt.Sprintf("<= %.0f%%", 100*set.end), met(endF <= set.end*endD)
		}
		res.add(r)
		res.add(row{Section: sec, Metric: "peak context, " + set.label, Value: fmt.Sprint(f.Peak), Baseline: fmt.Sprintf("%d direct", d.Peak),
			Ratio: ratio(float64(f.Peak), float64(d.Peak)), Target: fmt.Sprintf("<= %.0f%%", 100*set.peak), Met: met(float64(f.Peak) <= set.peak*float64(d.Peak)),
			Num: float64(f.Peak), Base: float64(d.Peak), Unit: "tokens",
			Note: fmt.Sprintf("mean context %d -> %d", d.ContextSum/int64(d.Requests), f.ContextSum/int64(f.Requests))})
		res.add(row{Section: sec, Metric: "prefix held, " + set.label, Value: fmt.Sprintf("%d/%d", f.PrefixHeld, f.Successive), Baseline: fmt.Sprintf("%d/%d direct", d.PrefixHeld, d.Successive),
			Num: float64(f.PrefixHeld) / float64(max(f.Successive, 1)), Base: float64(d.PrefixHeld) / float64(max(d.Successive, 1)), Unit: "share",
			Note: "successive requests whose forwarded input starts with the whole previous request"})
		res.add(row{Section: sec, Metric: "folds, " + set.label, Value: fmt.Sprint(f.Folds), Num: float64(f.Folds), Unit: "results",
			Target: "all recalled exactly, 0 invalid", Met: met(f.Recalled == f.Folds && f.RecallFailed == 0 && f.Invalid+d.Invalid == 0),
			Note: fmt.Sprintf("by kind %v; %d recalled exactly, %d failed; %d invalid requests", f.ByKind, f.Recalled, f.RecallFailed, f.Invalid+d.Invalid)})
	}
	return replayLatency(ctx, e, res, sec, hc, front, up, trajs)
}

// replayLatency times the first streamed byte of the last 40 requests of a
// growing 200-turn conversation (about 150 KB at the end) through the model
// front and directly, in alternating rounds, each round a new conversation
// warmed up by its first 160 turns.
func replayLatency(ctx context.Context, e *env, res *results, sec string, hc *http.Client, front string, up *replay.Upstream, trajs []trajectory.Trajectory) error {
	const turns, timed = 200, 40
	// The turns: the trajectories' steps in order, outputs cut to keep the
	// whole conversation near 150 KB.
	type step struct{ cmd, out string }
	var steps []step
	for _, tr := range trajs {
		for _, s := range tr.Steps {
			if len(steps) == turns {
				break
			}
			out := s.Output
			if len(out) > 560 {
				out = out[:560]
			}
			steps = append(steps, step{s.Command, out})
		}
	}
	rounds := e.rounds
	var st [2]roundStats
	var size int
	for r := 0; r < rounds; r++ {
		var bodies [][]byte
		var c replay.Conversation
		c.Task(trajs[0].Task)
		conv := fmt.Sprintf("latency-%d", r)
		for i, s := range steps {
			c.Step(conv, s.cmd, s.out, 0)
			if i >= turns-timed-10 {
				bodies = append(bodies, c.Body())
			}
		}
		size = len(bodies[len(bodies)-1])
		order := []int{0, 1}
		if r%2 == 1 {
			order = []int{1, 0}
		}
		for _, side := range order {
			target := up.URL
			if side == 1 {
				target = front
			}
			var samples []time.Duration
			for i, b := range bodies {
				d, err := firstByte(ctx, hc, target, conv+fmt.Sprint(side), b)
				if err != nil {
					return fmt.Errorf("latency, %s: %w", []string{"direct", "through foldproxy"}[side], err)
				}
				if i >= 10 { // the first ten warm the conversation up
					samples = append(samples, d)
				}
			}
			st[side].add(samples)
		}
	}
	d50, p50 := st[0].P50(), st[1].P50()
	res.add(row{Section: sec, Metric: "first byte p50, growing conversation", Value: ms(p50), Baseline: ms(d50) + " direct",
		Ratio: ratio(float64(p50), float64(d50)), Target: "<= +5 ms", Met: met(p50-d50 <= 5*time.Millisecond), Num: msf(p50), Base: msf(d50), Unit: "ms",
		Note: fmt.Sprintf("+%s; turns %d-%d of a %d-turn Claude Code conversation (%d KB at the end), automatic folding on, %d rounds", ms(p50-d50), turns-timed+1, turns, turns, size/1000, rounds)})
	d99, p99 := st[0].P99(), st[1].P99()
	res.add(row{Section: sec, Metric: "first byte p99, growing conversation", Value: ms(p99), Baseline: ms(d99) + " direct",
		Ratio: ratio(float64(p99), float64(d99)), Num: msf(p99), Base: msf(d99), Unit: "ms"})
	return nil
}

// firstByte posts one Messages request and returns the time to the first
// byte of its streamed answer, reading the answer to its end.
func firstByte(ctx context.Context, hc *http.Client, base, conv string, body []byte) (time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(base, "/")+"/v1/messages", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Anthropic-Version", "2023-06-01")
	req.Header.Set("X-Claude-Code-Session-Id", conv)
	req.Header.Set(replay.ConvHeader, conv)
	one := make([]byte, 1)
	t0 := time.Now()
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if _, err := io.ReadFull(resp.Body, one); err != nil {
		return 0, fmt.Errorf("reading the first byte: %w", err)
	}
	d := time.Since(t0)
	rest, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("HTTP %d: %s", resp.StatusCode, truncate(string(one)+string(rest), 300))
	}
	return d, nil
}
