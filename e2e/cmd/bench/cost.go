package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/foldproxy/foldproxy/e2e/cost"
	"github.com/foldproxy/foldproxy/intercept/tokens"
	"github.com/foldproxy/foldproxy/policy"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
)

// costBefore is a foldproxy binary from before the compact answers (for
// example built from commit 5013f25) whose answers and fold tool
// definitions the cost section measures as the "before" of the main-thread
// share; without it the figures recorded from that commit are used.
var costBefore = flag.String("cost-before", "", "a foldproxy binary from before the compact answers, measured as the cost section's baseline (default: the figures recorded from commit 5013f25)")

// recordedBefore are the figures of commit 5013f25 (before the compact
// answers), measured with -cost-before on a binary built from it: a
// branch's create and return answers besides the message (text and
// structuredContent, as ModelTokens counts), and the four fold tool
// definitions.
var recordedBefore = beforeFigures{BranchFixed: 706, FoldTools: 1455, Source: "recorded from 5013f25 with -cost-before (median of 21, 676-736)"}

type beforeFigures struct {
	BranchFixed, FoldTools int
	Source                 string
}

// summaryTokens is the return message of every folded phase in the
// main-thread share, as in issue 10's measurement.
const summaryTokens = 150

// runCost measures, with the exact tokenizer, what foldproxy's own words
// cost the agent: a branch's fixed cost (the create and return answers as
// the model sees them), the fold tool definitions, each forwarded tool's
// overhead and the whole catalogue against direct for server-everything and
// server-filesystem, and the share of the main thread that folding every
// exploration phase of the replay saves, now and before the compact
// answers. Token counts are deterministic: one round.
func runCost(ctx context.Context, e *env, res *results) error {
	const sec = "9 cost (tokens, o200k_base)"
	c, err := tokens.NewCounter(policy.Default().Tokens)
	if err != nil {
		return err
	}
	now, err := e.measureFold(ctx, e.proxy, c)
	if err != nil {
		return err
	}
	before := recordedBefore
	if *costBefore != "" {
		b, err := e.measureFold(ctx, *costBefore, c)
		if err != nil {
			return fmt.Errorf("-cost-before: %w", err)
		}
		before = beforeFigures{BranchFixed: b.branch.Fixed, FoldTools: b.foldTools,
			Source: fmt.Sprintf("measured: %s, %d-%d", filepath.Base(*costBefore), b.minFixed, b.maxFixed)}
	}
	tok := func(n int) string { return fmt.Sprintf("%d tokens", n) }
	res.add(row{Section: sec, Metric: "branch fixed cost (create + return answers besides the message)", Value: tok(now.branch.Fixed),
		Baseline: tok(before.BranchFixed) + " before", Ratio: ratio(float64(now.branch.Fixed), float64(before.BranchFixed)),
		Target: fmt.Sprintf("<= %d", cost.MaxBranchFixedCost), Met: met(now.branch.Fixed <= cost.MaxBranchFixedCost),
		Num: float64(now.branch.Fixed), Base: float64(before.BranchFixed), Unit: "tokens",
		Note: fmt.Sprintf("median of %d branches (%d-%d: random ids): create %d + return %d - message %d; before: %s", branchSamples, now.minFixed, now.maxFixed, now.branch.Create, now.branch.Return, now.branch.Message, before.Source)})
	res.add(row{Section: sec, Metric: "four fold tool definitions", Value: tok(now.foldTools),
		Baseline: tok(before.FoldTools) + " before", Ratio: ratio(float64(now.foldTools), float64(before.FoldTools)),
		Target: fmt.Sprintf("<= %d", cost.MaxFoldTools), Met: met(now.foldTools <= cost.MaxFoldTools),
		Num: float64(now.foldTools), Base: float64(before.FoldTools), Unit: "tokens", Note: "as tools/list sends them, compact JSON"})

	// The catalogue against direct, for clients that declare no capabilities.
	type upstream struct {
		name, prefix, command string
		args                  []string
	}
	var servers []upstream
	if e.node != "" {
		ev := filepath.Join(e.repo, "e2e", "node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js")
		if fileExists(ev) {
			servers = append(servers, upstream{"server-everything", "ev", e.node, []string{ev, "stdio"}})
		}
		if e.fsScript != "" {
			dir, err := os.MkdirTemp(e.tmp, "fs-")
			if err != nil {
				return err
			}
			servers = append(servers, upstream{"server-filesystem", "fs", e.node, []string{e.fsScript, dir}})
		}
	}
	if len(servers) == 0 {
		e.log.Warn("cost: no Node servers under e2e/node_modules: the catalogue rows are skipped")
	}
	for _, s := range servers {
		cc, err := e.measureCatalogue(ctx, c, s.prefix, s.command, s.args...)
		if err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		w, we := cc.Worst()
		res.add(row{Section: sec, Metric: s.name + ": catalogue through foldproxy", Value: tok(cc.Total),
			Baseline: tok(cc.DirectTotal) + " direct", Ratio: ratio(float64(cc.Total), float64(cc.DirectTotal)),
			Num: float64(cc.Total), Base: float64(cc.DirectTotal), Unit: "tokens",
			Note: fmt.Sprintf("+%d: fold tools %d, checkpoint tools %d, memory tools %d, %d forwarded tools +%d", cc.Overhead(), cc.FoldTools, cc.CheckpointTools, cc.MemoryTools, len(cc.Proxied), cc.Forwarded())})
		res.add(row{Section: sec, Metric: s.name + ": worst forwarded tool overhead", Value: tok(we),
			Target: fmt.Sprintf("<= %d", cost.MaxForwardedOverhead), Met: met(we <= cost.MaxForwardedOverhead && len(cc.Problems()) == 0),
			Num: float64(we), Unit: "tokens", Note: fmt.Sprintf("%s; %d problems", w, len(cc.Problems()))})
	}

	// The share of the main thread saved on the replay.
	trajs, err := cost.LoadTrajectories(e.data)
	if err != nil {
		return err
	}
	after := cost.ReplayShare(c, trajs, cost.Fold{BranchFixed: now.branch.Fixed, Summary: summaryTokens, Tools: now.foldTools})
	old := cost.ReplayShare(c, trajs, cost.Fold{BranchFixed: before.BranchFixed, Summary: summaryTokens, Tools: before.FoldTools})
	pct := func(x float64) string { return fmt.Sprintf("%.1f%%", 100*x) }
	res.add(row{Section: sec, Metric: "main thread saved, replay, every exploration phase folded", Value: pct(after.Saved()),
		Baseline: pct(old.Saved()) + " before", Num: 100 * after.Saved(), Base: 100 * old.Saved(), Unit: "%",
		Note: fmt.Sprintf("%d trajectories, %d steps, %d phases, %d-token summaries; main thread %d tokens inline, %d folded (before %d)",
			after.Trajectories, after.Steps, after.Phases, summaryTokens, after.Inline, after.Folded, old.Folded)})
	afterB := cost.ReplayShare(c, trajs, cost.Fold{BranchFixed: now.branch.Fixed, Summary: summaryTokens})
	oldB := cost.ReplayShare(c, trajs, cost.Fold{BranchFixed: before.BranchFixed, Summary: summaryTokens})
	res.add(row{Section: sec, Metric: "the same, branches only (fold tool definitions not counted)", Value: pct(afterB.Saved()),
		Baseline: pct(oldB.Saved()) + " before", Num: 100 * afterB.Saved(), Base: 100 * oldB.Saved(), Unit: "%",
		Note: fmt.Sprintf("main thread %d tokens folded (before %d)", afterB.Folded, oldB.Folded)})
	res.add(row{Section: sec, Metric: "exploration phases cheaper inline than folded", Value: pct(float64(after.CheaperInline) / float64(max(after.Phases, 1))),
		Baseline: pct(float64(old.CheaperInline)/float64(max(old.Phases, 1))) + " before",
		Num:      100 * float64(after.CheaperInline) / float64(max(after.Phases, 1)), Base: 100 * float64(old.CheaperInline) / float64(max(old.Phases, 1)), Unit: "%",
		Note: fmt.Sprintf("%d of %d (before %d)", after.CheaperInline, after.Phases, old.CheaperInline)})
	return nil
}

// foldFigures are one binary's fold costs.
type foldFigures struct {
	branch             cost.Branch // the median branch
	minFixed, maxFixed int
	foldTools          int
}

// measureFold runs bin over stdio with the replay upstream and measures a
// branch under the main thread (create, one small result inside, return
// with a message) and the fold tool definitions.
func (e *env) measureFold(ctx context.Context, bin string, c cost.Counter) (foldFigures, error) {
	var f foldFigures
	cfg, err := e.writeConfig("cost.json", map[string]any{"replay": e.replayEntry()}, benchSettings())
	if err != nil {
		return f, err
	}
	state, err := e.stateDir("cost")
	if err != nil {
		return f, err
	}
	p, err := connectStdio(ctx, "foldproxy cost", bin, "serve", "--config", cfg, "--state", state)
	if err != nil {
		return f, err
	}
	defer p.close()
	if err := waitTools(ctx, p, "replay__emit", "branch_create"); err != nil {
		return f, err
	}
	req := p.requester()
	tools, err := cost.List(ctx, req, "tools/list", "tools")
	if err != nil {
		return f, err
	}
	cc, err := cost.MeasureCatalogue(c, "replay", nil, tools)
	if err != nil {
		return f, err
	}
	f.foldTools = cc.FoldTools
	// Branch ids are random, and tokenize a few tokens apart: the median
	// of several branches, with the range.
	var all []cost.Branch
	for range branchSamples {
		create, err := req(ctx, "tools/call", map[string]any{"name": "branch_create", "arguments": map[string]any{"description": "find where results are cut"}})
		if err != nil {
			return f, err
		}
		id, err := branchIDOf(create)
		if err != nil {
			return f, err
		}
		if _, err := p.call(ctx, "replay__emit", map[string]any{"bytes": 2000, "branch_id": id}); err != nil {
			return f, err
		}
		const msg = "Found it: intercept/budget.go cuts at the remaining budget; the notice names the handle. No test fails."
		ret, err := req(ctx, "tools/call", map[string]any{"name": "branch_return", "arguments": map[string]any{"branch_id": id, "message": msg}})
		if err != nil {
			return f, err
		}
		b, err := cost.BranchCost(c, create, ret, msg, nil)
		if err != nil {
			return f, err
		}
		all = append(all, b)
	}
	slices.SortFunc(all, func(a, b cost.Branch) int { return a.Fixed - b.Fixed })
	f.branch, f.minFixed, f.maxFixed = all[len(all)/2], all[0].Fixed, all[len(all)-1].Fixed
	return f, nil
}

// branchSamples is how many branches measureFold measures.
const branchSamples = 21

// branchIDOf reads branch_id from a branch_create result: its
// structuredContent, else its first text block.
func branchIDOf(result json.RawMessage) (string, error) {
	var r struct {
		IsError bool `json:"isError"`
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
		StructuredContent json.RawMessage `json:"structuredContent"`
	}
	if err := json.Unmarshal(result, &r); err != nil || r.IsError {
		return "", fmt.Errorf("branch_create failed: %s", truncate(string(result), 300))
	}
	var ans struct {
		BranchID string `json:"branch_id"`
	}
	if len(r.StructuredContent) > 0 {
		_ = json.Unmarshal(r.StructuredContent, &ans)
	}
	if ans.BranchID == "" && len(r.Content) > 0 {
		_ = json.Unmarshal([]byte(r.Content[0].Text), &ans)
	}
	if ans.BranchID == "" {
		return "", fmt.Errorf("branch_create: no branch_id in %s", truncate(string(result), 300))
	}
	return ans.BranchID, nil
}

// measureCatalogue lists an upstream's tools direct and through foldproxy.
func (e *env) measureCatalogue(ctx context.Context, c cost.Counter, prefix, command string, args ...string) (cost.Catalogue, error) {
	direct, err := connectStdio(ctx, "direct "+prefix, command, args...)
	if err != nil {
		return cost.Catalogue{}, err
	}
	defer direct.close()
	dItems, err := cost.List(ctx, direct.requester(), "tools/list", "tools")
	if err != nil {
		return cost.Catalogue{}, err
	}
	var want []string
	for _, it := range dItems {
		var t struct {
			Name string `json:"name"`
		}
		if err := json.Unmarshal(it, &t); err != nil {
			return cost.Catalogue{}, err
		}
		want = append(want, prefix+"__"+t.Name)
	}
	p, err := e.startProxy(ctx, "cost-"+prefix, map[string]any{prefix: map[string]any{"command": command, "args": args}}, want...)
	if err != nil {
		return cost.Catalogue{}, err
	}
	defer p.close()
	pItems, err := cost.List(ctx, p.requester(), "tools/list", "tools")
	if err != nil {
		return cost.Catalogue{}, err
	}
	return cost.MeasureCatalogue(c, prefix, dItems, pItems)
}

// requester sends raw JSON-RPC requests through the client's transport, so
// that results are counted byte for byte as they arrived.
func (p *mcpPeer) requester() cost.Requester {
	seq := 0
	return func(ctx context.Context, method string, params any) (json.RawMessage, error) {
		seq++
		ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		resp, err := p.GetTransport().SendRequest(ctx, transport.JSONRPCRequest{
			JSONRPC: mcp.JSONRPC_VERSION, ID: mcp.NewRequestId(fmt.Sprintf("cost-%d", seq)), Method: method, Params: params,
		})
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w%s", p.name, method, err, p.stderr.tail())
		}
		if resp.Error != nil {
			return nil, fmt.Errorf("%s: %s: json-rpc error %d: %s", p.name, method, resp.Error.Code, resp.Error.Message)
		}
		return resp.Result, nil
	}
}
