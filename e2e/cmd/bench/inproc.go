package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/foldproxy/foldproxy/fold"
	foldstore "github.com/foldproxy/foldproxy/fold/store"
	"github.com/foldproxy/foldproxy/intercept"
	"github.com/foldproxy/foldproxy/intercept/secrets"
	"github.com/foldproxy/foldproxy/intercept/tokens"
	"github.com/foldproxy/foldproxy/policy"
)

// stack is foldproxy's pipeline assembled in process as serve.go wires it:
// a Badger store in a temporary folder, the fold manager, the counter, the
// scrubber, a real audit log and the metrics.
type stack struct {
	set     policy.Settings
	store   *foldstore.BadgerStore
	mgr     *fold.Manager
	counter *tokens.Counter
	scrub   *secrets.Scrubber
	audit   *intercept.Auditor
	metrics *intercept.Metrics
	chain   []intercept.Interceptor // intercept.NewChain's, as serve builds it
}

// newStack builds the stack with the bench settings. scrub may be shared
// between stacks (it is built once and is safe for concurrent use); nil
// builds a new one.
func newStack(ctx context.Context, dir string, scrub *secrets.Scrubber) (*stack, error) {
	return newStackOn(ctx, dir, scrub, false)
}

// newStackOn is newStack, with the fold manager on the in-memory store
// instead of Badger when mem is set (to show what the archive costs).
func newStackOn(ctx context.Context, dir string, scrub *secrets.Scrubber, mem bool) (*stack, error) {
	raw, err := json.Marshal(benchSettings())
	if err != nil {
		return nil, err
	}
	set, err := policy.Parse(raw)
	if err != nil {
		return nil, err
	}
	s := &stack{set: set}
	var store fold.Store = foldstore.NewMemStore()
	if !mem {
		if s.store, err = foldstore.OpenBadgerFsync(filepath.Join(dir, "badger"), nil, false); err != nil { // as serve does by default
			return nil, err
		}
		store = s.store
	}
	if s.counter, err = tokens.NewCounter(set.Tokens); err != nil {
		s.close()
		return nil, err
	}
	s.scrub = scrub
	if s.scrub == nil {
		if s.scrub, err = secrets.NewScrubber(set.Scrub, nil); err != nil {
			s.close()
			return nil, err
		}
	}
	if s.audit, err = intercept.NewAuditor(set.Audit, filepath.Join(dir, "audit.jsonl"), nil); err != nil {
		s.close()
		return nil, err
	}
	s.metrics = intercept.NewMetrics()
	s.mgr, err = fold.NewManager(ctx, fold.Options{
		Settings: set.Fold, Store: store, Scanner: s.scrub, Counter: s.counter,
		Events: sinks{s.audit, s.metrics}, PruneInterval: -1,
	})
	if err != nil {
		s.close()
		return nil, err
	}
	s.chain, err = intercept.NewChain(intercept.Parts{
		Scrubber: s.scrub, Counter: s.counter, Brancher: s.mgr, Thresholds: set.Fold.Thresholds,
		Auditor: s.audit, Metrics: s.metrics,
	})
	if err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

// full is the handler h wrapped in the whole chain, as serve builds it.
func (s *stack) full(h intercept.Handler) intercept.Handler {
	return intercept.Chain(h, s.chain...)
}

// budgetOnly is h wrapped in the tokens and budget interceptors alone.
func (s *stack) budgetOnly(h intercept.Handler) intercept.Handler {
	return intercept.Chain(h,
		intercept.Budget(s.mgr, s.counter, s.set.Fold.Thresholds),
		intercept.Tokens(s.counter),
	)
}

// openSession opens a stdio-like session in the manager.
func (s *stack) openSession(ctx context.Context, id string) error {
	return s.mgr.OpenSession(ctx, fold.SessionRecord{ID: id, Transport: "stdio"})
}

// createBranch calls branch_create in process and returns the branch id.
func (s *stack) createBranch(ctx context.Context, session string, args map[string]any) (string, error) {
	raw, err := json.Marshal(args)
	if err != nil {
		return "", err
	}
	out, err := s.mgr.CallTool(ctx, session, fold.ToolCreate, raw)
	if err != nil {
		return "", err
	}
	var res struct {
		IsError bool                    `json:"isError"`
		Content []struct{ Text string } `json:"content"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		return "", err
	}
	var ans struct {
		BranchID string `json:"branch_id"`
	}
	if !res.IsError && len(res.Content) > 0 {
		_ = json.Unmarshal([]byte(res.Content[0].Text), &ans)
	}
	if res.IsError || ans.BranchID == "" {
		var texts []string
		for _, c := range res.Content {
			texts = append(texts, c.Text)
		}
		return "", fmt.Errorf("branch_create refused: %s", truncate(strings.Join(texts, " "), 300))
	}
	return ans.BranchID, nil
}

func (s *stack) close() error {
	var errs []error
	if s.mgr != nil {
		errs = append(errs, s.mgr.Close())
	}
	if s.audit != nil {
		errs = append(errs, s.audit.Close())
	}
	if s.store != nil {
		errs = append(errs, s.store.Close())
	}
	return errors.Join(errs...)
}

// sinks fans branch events out to several sinks, as serve.go does.
type sinks []fold.EventSink

func (s sinks) BranchEvent(ctx context.Context, ev fold.Event) {
	for _, x := range s {
		x.BranchEvent(ctx, ev)
	}
}

// defaultScrubPolicy is the scrub configuration foldproxy runs with by
// default.
func defaultScrubPolicy() policy.Scrub { return policy.Default().Scrub }
