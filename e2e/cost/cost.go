// Package cost measures what foldproxy's own words cost an agent, exactly,
// with the tokenizer foldproxy counts with (o200k_base by default): the
// fold tool definitions and each forwarded tool over its upstream
// definition (the catalogue), the branch_create and branch_return answers
// as the model sees them (a branch's fixed cost), and the share of the main
// thread that folding saves on a replay of real agent trajectories.
//
// The e2e regression tests (fixed bounds, e2e/fold_cost_test.go) and the
// bench section "cost" (e2e/cmd/bench) both measure with it, over the real
// binary's real answers; it only counts, and never talks to a server
// itself but through the Requester it is given.
package cost

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// The bounds of issues 10 and 26, on deterministic token counts.
const (
	MaxFoldTools         = 470 // the four fold tool definitions together (issue 26 added branch_status's orphans and usage by kind)
	MaxCheckpointTools   = 170 // checkpoint_save, checkpoint_list, checkpoint_resume together
	MaxForwardedOverhead = 10  // each forwarded tool over its upstream definition
	MaxBranchFixedCost   = 67  // branch_create + branch_return answers, besides message and return value (60 before issue 27: the seal that binds a branch to its session costs exactly 7 tokens)
)

// Counter counts the tokens of a text (*tokens.Counter is one).
type Counter interface{ CountText(string) int }

// Requester sends one JSON-RPC request and returns its result, byte for
// byte as it arrived.
type Requester func(ctx context.Context, method string, params any) (json.RawMessage, error)

// List pages through a list method (tools/list, ...) and returns the raw
// items under key.
func List(ctx context.Context, req Requester, method, key string) ([]json.RawMessage, error) {
	var all []json.RawMessage
	cursor := ""
	for page := 0; ; page++ {
		if page == 100 {
			return nil, fmt.Errorf("%s: more than 100 pages", method)
		}
		params := map[string]any{}
		if cursor != "" {
			params["cursor"] = cursor
		}
		res, err := req(ctx, method, params)
		if err != nil {
			return nil, err
		}
		var body map[string]json.RawMessage
		if err := json.Unmarshal(res, &body); err != nil {
			return nil, fmt.Errorf("%s: %w", method, err)
		}
		var items []json.RawMessage
		if err := json.Unmarshal(body[key], &items); err != nil {
			return nil, fmt.Errorf("%s: %s: %w", method, key, err)
		}
		all = append(all, items...)
		cursor = ""
		if nc, ok := body["nextCursor"]; ok {
			_ = json.Unmarshal(nc, &cursor)
		}
		if cursor == "" {
			return all, nil
		}
	}
}

// CompactTokens counts a JSON value as it is serialized on the wire,
// compacted.
func CompactTokens(c Counter, raw json.RawMessage) (int, error) {
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return 0, fmt.Errorf("compacting a JSON value: %w", err)
	}
	return c.CountText(buf.String()), nil
}

// ModelTokens counts a tools/call result as a model is shown it: every
// text block, plus the structuredContent JSON when there is one (clients
// differ in which they show, so both are counted).
func ModelTokens(c Counter, result json.RawMessage) (int, error) {
	var r struct {
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
		StructuredContent json.RawMessage `json:"structuredContent"`
	}
	if err := json.Unmarshal(result, &r); err != nil {
		return 0, fmt.Errorf("not a tools/call result: %w", err)
	}
	n := 0
	for _, b := range r.Content {
		if b.Type == "text" {
			n += c.CountText(b.Text)
		}
	}
	if len(r.StructuredContent) > 0 && string(r.StructuredContent) != "null" {
		k, err := CompactTokens(c, r.StructuredContent)
		if err != nil {
			return 0, err
		}
		n += k
	}
	return n, nil
}

// Catalogue is what a tools/list costs through foldproxy against the same
// upstream directly, for a client that declares no capabilities.
type Catalogue struct {
	Upstream        string
	FoldTools       int            // branch_* definitions
	CheckpointTools int            // checkpoint_* definitions
	MemoryTools     int            // memory_* and remediation_record definitions
	Direct          map[string]int // each upstream tool direct, by name
	Proxied         map[string]int // the same tool through foldproxy, by upstream name
	Unexpected      []string       // tools foldproxy lists that are neither fold tools nor the upstream's
	DirectTotal     int
	Total           int
}

// MeasureCatalogue counts the tool definitions listed direct and through
// foldproxy, where the upstream's tools are named prefix+"__"+name.
func MeasureCatalogue(c Counter, prefix string, direct, proxied []json.RawMessage) (Catalogue, error) {
	cc := Catalogue{Upstream: prefix, Direct: map[string]int{}, Proxied: map[string]int{}}
	for _, it := range direct {
		n, k, err := nameTokens(c, it)
		if err != nil {
			return cc, err
		}
		cc.Direct[n] = k
		cc.DirectTotal += k
	}
	for _, it := range proxied {
		n, k, err := nameTokens(c, it)
		if err != nil {
			return cc, err
		}
		cc.Total += k
		switch {
		case strings.HasPrefix(n, "branch_"):
			cc.FoldTools += k
		case strings.HasPrefix(n, "checkpoint_"):
			cc.CheckpointTools += k
		case strings.HasPrefix(n, "memory_") || n == "remediation_record":
			cc.MemoryTools += k
		case strings.HasPrefix(n, prefix+"__"):
			cc.Proxied[strings.TrimPrefix(n, prefix+"__")] = k
		default:
			cc.Unexpected = append(cc.Unexpected, n)
		}
	}
	return cc, nil
}

func nameTokens(c Counter, item json.RawMessage) (string, int, error) {
	var t struct {
		Name string `json:"name"`
	}
	if err := json.Unmarshal(item, &t); err != nil || t.Name == "" {
		return "", 0, fmt.Errorf("a listed tool without a name: %.200s", item)
	}
	k, err := CompactTokens(c, item)
	return t.Name, k, err
}

// Forwarded is what the upstream's tools cost through foldproxy beyond
// their direct definitions, all together.
func (cc Catalogue) Forwarded() int {
	return cc.Total - cc.DirectTotal - cc.FoldTools - cc.CheckpointTools - cc.MemoryTools
}

// Overhead is the catalogue's cost against direct: everything foldproxy
// adds.
func (cc Catalogue) Overhead() int { return cc.Total - cc.DirectTotal }

// Worst returns the forwarded tool with the largest overhead.
func (cc Catalogue) Worst() (name string, extra int) {
	for _, n := range cc.names() {
		if p, ok := cc.Proxied[n]; ok && (name == "" || p-cc.Direct[n] > extra) {
			name, extra = n, p-cc.Direct[n]
		}
	}
	return name, extra
}

func (cc Catalogue) names() []string {
	names := make([]string, 0, len(cc.Direct))
	for n := range cc.Direct {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Problems lists every way the catalogue breaks the bounds: a tool over
// MaxForwardedOverhead, fold tools over MaxFoldTools, a tool listed on one
// side only (foldproxy must not make an upstream list tools it would not
// list the same client directly).
func (cc Catalogue) Problems() []string {
	var out []string
	for _, n := range cc.names() {
		p, ok := cc.Proxied[n]
		if !ok {
			out = append(out, fmt.Sprintf("%s: tool %s is listed direct but not through foldproxy", cc.Upstream, n))
			continue
		}
		if d := p - cc.Direct[n]; d > MaxForwardedOverhead {
			out = append(out, fmt.Sprintf("%s: tool %s costs %d tokens through foldproxy, %d direct: %d more, above the bound of %d", cc.Upstream, n, p, cc.Direct[n], d, MaxForwardedOverhead))
		}
	}
	for n := range cc.Proxied {
		if _, ok := cc.Direct[n]; !ok {
			out = append(out, fmt.Sprintf("%s: foldproxy lists tool %s, which the server does not list for the same client: it advertised capabilities the client did not declare", cc.Upstream, n))
		}
	}
	for _, n := range cc.Unexpected {
		out = append(out, fmt.Sprintf("%s: foldproxy lists a tool %q that is neither a fold tool nor one of the upstream's", cc.Upstream, n))
	}
	if cc.FoldTools > MaxFoldTools {
		out = append(out, fmt.Sprintf("the four fold tool definitions cost %d tokens, above the bound of %d", cc.FoldTools, MaxFoldTools))
	}
	if cc.CheckpointTools > MaxCheckpointTools {
		out = append(out, fmt.Sprintf("the three checkpoint tool definitions cost %d tokens, above the bound of %d", cc.CheckpointTools, MaxCheckpointTools))
	}
	sort.Strings(out)
	return out
}

// String is the catalogue's figures in one line.
func (cc Catalogue) String() string {
	w, we := cc.Worst()
	return fmt.Sprintf("%s: %d tools; direct %d tokens, through foldproxy %d (+%d: fold tools %d, checkpoint tools %d, memory tools %d, forwarded tools +%d, worst tool %s +%d)",
		cc.Upstream, len(cc.Direct), cc.DirectTotal, cc.Total, cc.Overhead(), cc.FoldTools, cc.CheckpointTools, cc.MemoryTools, cc.Forwarded(), w, we)
}

// Branch is what one branch costs its parent, as the model sees it.
type Branch struct {
	Create, Return int // the answers' tokens
	Message, Value int // the return message's and return value's tokens
	Fixed          int // Create + Return - Message - Value
}

// BranchCost measures a branch's fixed cost from the branch_create and
// branch_return results as they arrived, the message and the return value
// (nil for none) it was returned with. A string value counts as its text,
// any other as its JSON.
func BranchCost(c Counter, create, ret json.RawMessage, msg string, value any) (Branch, error) {
	var b Branch
	var err error
	if b.Create, err = ModelTokens(c, create); err != nil {
		return b, fmt.Errorf("branch_create: %w", err)
	}
	if b.Return, err = ModelTokens(c, ret); err != nil {
		return b, fmt.Errorf("branch_return: %w", err)
	}
	b.Message = c.CountText(msg)
	switch v := value.(type) {
	case nil:
	case string:
		b.Value = c.CountText(v)
	default:
		j, err := json.Marshal(v)
		if err != nil {
			return b, err
		}
		b.Value = c.CountText(string(j))
	}
	b.Fixed = b.Create + b.Return - b.Message - b.Value
	return b, nil
}
