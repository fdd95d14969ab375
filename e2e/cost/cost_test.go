package cost

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/foldproxy/foldproxy/intercept/tokens"
	"github.com/foldproxy/foldproxy/policy"
)

// words counts whitespace-separated words as tokens.
type words struct{}

func (words) CountText(s string) int { return len(strings.Fields(s)) }

func TestExploring(t *testing.T) {
	tests := []struct {
		cmd  string
		want bool
	}{
		{"ls -R", true},
		{"cat astropy/modeling/separable.py", true},
		{"sed -n '240,260p' astropy/modeling/separable.py", true},
		{"grep -rn \"def foo\" src | head -20", true},
		{"cd /testbed && git diff", true},
		{"find . -name '*.py' | xargs grep -l separable", true},
		{"git log --oneline -5", true},
		{"grep -rn x src 2>&1 | head", true},
		{"grep -rn x src > hits.txt", false},
		{"cat <<'EOF' > reproduce_issue.py\nprint(1)\nEOF", false},
		{"sed -i 's/a/b/' f.py", false},
		{"python reproduce_issue.py", false},
		{"pytest astropy/modeling/tests/test_separable.py", false},
		{"git checkout pyproject.toml", false},
		{"rm reproduce_issue.py", false},
		{"ls && python x.py", false},
		{"find . -name '*.pyc' | xargs rm", false},
		{"cd /testbed", false},
		{"", false},
	}
	for _, tt := range tests {
		if got := Exploring(tt.cmd); got != tt.want {
			t.Errorf("Exploring(%q) = %v, want %v", tt.cmd, got, tt.want)
		}
	}
}

func TestReplayShare(t *testing.T) {
	// Two phases (ls+cat, then grep) around the main thread's own steps.
	steps := []Step{
		{"ls", strings.Repeat("f ", 99)},                     // 1 + 99
		{"cat a.py", strings.Repeat("x ", 298)},              // 2 + 298
		{"python a.py", strings.Repeat("y ", 48)},            // 2 + 48
		{"grep -n z a.py", strings.Repeat("z ", 6)},          // 4 + 6
		{"pytest tests/test_a.py", strings.Repeat("p ", 18)}, // 2 + 18
	}
	s := ReplayShare(words{}, [][]Step{steps}, Fold{BranchFixed: 20, Summary: 30, Tools: 40})
	want := Share{Trajectories: 1, Steps: 5, Phases: 2, CheaperInline: 1, Inline: 100 + 300 + 50 + 10 + 20, Folded: 40 + 50 + 50 + 50 + 20}
	if s != want {
		t.Fatalf("share = %+v, want %+v", s, want)
	}
	if got, w := s.Saved(), float64(480-210)/480; got != w {
		t.Errorf("Saved() = %v, want %v", got, w)
	}
}

func TestCatalogueAndBranch(t *testing.T) {
	direct := []json.RawMessage{
		json.RawMessage(`{"name":"read","description":"read a file"}`),
		json.RawMessage(`{"name":"list","description":"list a folder"}`),
	}
	proxied := []json.RawMessage{
		json.RawMessage(`{"name":"branch_create","description":"start a branch of work"}`),
		json.RawMessage(`{"name":"memory_search","description":"search memories"}`),
		json.RawMessage(`{"name":"fs__read","description":"read a file branch_id"}`),
		json.RawMessage(`{"name":"fs__list","description":"list a folder branch_id and a very long tail of words that is far too much more than ten"}`),
		json.RawMessage(`{"name":"stray"}`),
	}
	cc, err := MeasureCatalogue(words{}, "fs", direct, proxied)
	if err != nil {
		t.Fatal(err)
	}
	if cc.FoldTools != 5 || cc.MemoryTools != 2 || cc.DirectTotal != 6 || cc.Proxied["read"] != 4 {
		t.Fatalf("catalogue %+v", cc)
	}
	if w, extra := cc.Worst(); w != "list" || extra != 16 {
		t.Errorf("worst %s +%d", w, extra)
	}
	probs := strings.Join(cc.Problems(), "\n")
	if !strings.Contains(probs, "tool list costs") || !strings.Contains(probs, `"stray"`) || strings.Contains(probs, "tool read") {
		t.Errorf("problems:\n%s", probs)
	}

	create := json.RawMessage(`{"content":[{"type":"text","text":"{\"branch_id\": \"b-1\"}"}]}`)
	ret := json.RawMessage(`{"content":[{"type":"text","text":"{\"message\": \"all done here\"}"}],"structuredContent":{"message":"all done here"}}`)
	b, err := BranchCost(words{}, create, ret, "all done here", nil)
	if err != nil {
		t.Fatal(err)
	}
	// The structured copy counts too: the model may be shown both.
	if b.Create != 2 || b.Return != 4+3 || b.Message != 3 || b.Fixed != 2+7-3 {
		t.Errorf("branch %+v", b)
	}
}

// TestReplayShareAtTheBounds: on the replay of the real trajectories, with
// a branch and the fold tools costing their bounds (the most they may
// cost), folding every exploration phase into a branch with a 150-token
// summary saves at least 40% of the main thread (logged beside the figure
// with the answers and definitions from before the compact answers, commit
// 5013f25, as the bench's -cost-before measured them). Exact counts, fixed
// bounds.
func TestReplayShareAtTheBounds(t *testing.T) {
	c, err := tokens.NewCounter(policy.Default().Tokens)
	if err != nil {
		t.Fatal(err)
	}
	trajs, err := LoadTrajectories(filepath.Join("..", "testdata", "trajectories", "swe-dev.jsonl.gz"))
	if err != nil {
		t.Fatal(err)
	}
	now := ReplayShare(c, trajs, Fold{BranchFixed: MaxBranchFixedCost, Summary: 150, Tools: MaxFoldTools})
	before := ReplayShare(c, trajs, Fold{BranchFixed: 706, Summary: 150, Tools: 1455})
	t.Logf("main thread saved: %.1f%% at the bounds (%d phases, %d cheaper inline), %.1f%% before (%d cheaper inline); %d tokens inline",
		100*now.Saved(), now.Phases, now.CheaperInline, 100*before.Saved(), before.CheaperInline, now.Inline)
	if now.Phases < 100 {
		t.Fatalf("only %d exploration phases: the replay would prove little", now.Phases)
	}
	if now.Saved() < 0.40 {
		t.Errorf("folding saves %.1f%% of the main thread at the bounds, want at least 40%%", 100*now.Saved())
	}
}
