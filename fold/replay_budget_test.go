package fold_test

import (
	"testing"
)

// TestReplayLearnedBudgets is issue 26's comparison of learned budgets
// with the fixed default on the trajectory replay (memories off, so that
// only the budgets differ): the replay is played twice on one state, once
// with every branch given the default of 8,192 tokens and once with
// branch_create giving no budget (the default until similar branches came
// before, then a learned one). It reports the share of branches that
// finish within their budget and the budget left unused by those that
// returned, and checks that the learned run is deterministic given the
// data (a second run gives the same figures) and learns at all.
func TestReplayLearnedBudgets(t *testing.T) {
	if testing.Short() {
		t.Skip("the replay plays 1,540 branches")
	}
	run := func(budget int) [2]replayStats {
		e := newReplayEnv(t)
		return [2]replayStats{
			e.pass(t, "first", replayOpts{budget: budget}),
			e.pass(t, "second", replayOpts{budget: budget}),
		}
	}
	fixed, learned, again := run(8192), run(0), run(0)
	for i, name := range []string{"first pass (fresh)", "second pass (with history)"} {
		f, l := fixed[i], learned[i]
		t.Logf("%s: fixed 8192: %d of %d branches within budget (%.1f%%), %.0f tokens of budget unused a returned branch; learned: %d of %d within budget (%.1f%%), %.0f unused; %d budgets learned",
			name, f.withinBudget, f.branches, 100*float64(f.withinBudget)/float64(f.branches), float64(f.budgetUnused)/float64(max(f.returned, 1)),
			l.withinBudget, l.branches, 100*float64(l.withinBudget)/float64(l.branches), float64(l.budgetUnused)/float64(max(l.returned, 1)), l.learned)
		// Branch ids are random, and tokenize a few tokens apart: the
		// create answers' tokens differ between runs, the budgets do not.
		key := func(s replayStats) [7]int {
			return [7]int{s.branches, s.returned, s.forced, s.withinBudget, s.budgetTotal, s.budgetUnused, s.learned}
		}
		if key(learned[i]) != key(again[i]) {
			t.Errorf("%s: the learned run is not deterministic: %+v, then %+v", name, learned[i], again[i])
		}
	}
	if learned[1].learned == 0 {
		t.Errorf("no budget was learned on the second pass: %+v", learned[1])
	}
}
