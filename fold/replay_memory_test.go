package fold_test

import (
	"context"
	"testing"

	"github.com/foldproxy/foldproxy/fold"
	"github.com/foldproxy/foldproxy/fold/memory"
)

// TestReplayMemoryBounds is issue 26's bound on memories, over the
// trajectory replay: on a fresh state (budget 2,048, as the issue's
// measurement) and on a project with history (the replay played again on
// that state, budget 8,192), with the default memory settings, a create
// answer costs at most 150 tokens a branch on average, at least 70% of
// the injected items come from the branch's own repository, and at least
// half of the branches that returned yield a memory candidate. A branch
// that resembles nothing the project learned gets no items.
func TestReplayMemoryBounds(t *testing.T) {
	if testing.Short() {
		t.Skip("the replay plays 770 branches")
	}
	off := newReplayEnv(t).pass(t, "off", replayOpts{budget: 2048})
	t.Logf("memories disabled: %s", off)
	e := newReplayEnv(t)
	for _, p := range []struct {
		name   string
		budget int
	}{{"fresh", 2048}, {"history", 8192}} {
		st := e.pass(t, p.name, replayOpts{budget: p.budget, memories: true})
		t.Logf("%s state, budget %d: %s", p.name, p.budget, st)
		if mean := float64(st.createTokens) / float64(st.branches); mean > 150 {
			t.Errorf("%s: %.1f tokens of create answer a branch on average, over 150", p.name, mean)
		}
		if st.injectedItems == 0 || 10*st.sameRepo < 7*st.injectedItems {
			t.Errorf("%s: %d of %d injected items from the same repository, want at least 70%%", p.name, st.sameRepo, st.injectedItems)
		}
		if 2*st.candidates < st.returned {
			t.Errorf("%s: %d memory candidates from %d returned branches, want at least half", p.name, st.candidates, st.returned)
		}
	}

	// A branch resembling nothing of the project's history gets nothing.
	mgr, mem := e.open(t)
	ctx := context.Background()
	if n, _ := mem.Store().Count(ctx, "replay"); n < 50 {
		t.Fatalf("the history holds %d memories: the check below would prove nothing", n)
	}
	if err := mgr.OpenSession(ctx, fold.SessionRecord{ID: "stranger", Transport: "stdio"}); err != nil {
		t.Fatal(err)
	}
	var cr struct {
		InjectedContext []memory.Brief `json:"injected_context"`
	}
	callFold(t, mgr, "stranger", fold.ToolCreate, map[string]any{
		"description": "Rotate the TLS certificates of the billing service's Kubernetes ingress",
		"prompt":      "The cert-manager issuer expired last night; renew it and check the ingress annotations in helm/values-prod.yaml.",
	}, &cr)
	if len(cr.InjectedContext) != 0 {
		t.Errorf("a branch resembling nothing got %d items: %+v", len(cr.InjectedContext), cr.InjectedContext)
	}
}
