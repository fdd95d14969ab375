package fold_test

import (
	"fmt"
	"strings"

	"github.com/foldproxy/foldproxy/fold"
	"github.com/foldproxy/foldproxy/policy"
)

// words is a wire for Fit: a result is a text whose tokens are its words,
// cut after a word; notices go after it, each on its own line.
type words struct{ text string }

func count(s string) int { return len(strings.Fields(s)) }

func (w words) NoticeTokens(notice string) int { return count(notice) }

func (w words) Attach(r string, tokens int, notices []string) (string, int, error) {
	return r + "\n" + strings.Join(notices, "\n"), tokens, nil
}

func (w words) Cut(limit int) (string, fold.Piece, error) {
	f := strings.Fields(w.text)
	kept := strings.Join(f[:min(limit, len(f))], " ")
	return kept, fold.Piece{Kept: count(kept), Bytes: len(kept), RestBytes: len(w.text) - len(kept)}, nil
}

// A result of 120 tokens comes to a branch of 100 tokens, 20 used, that
// keeps 10 for the notice of its last result: it is cut to fit, with the
// notice, and ends the branch.
func ExampleFit() {
	text := strings.Repeat("line ", 120)
	bud := fold.Budget{Branch: "b-7", Total: 100, Used: 20, Remaining: 80, Reserve: 10, Handle: "b-7~1f"}
	d := fold.Fit(bud, fold.Measured[string]{Result: text, Tokens: count(text), Notices: true}, words{text},
		fold.FitOptions[string]{Thresholds: policy.Default().Fold.Thresholds})

	fmt.Println(d.Verdict, d.Tokens, d.Level, d.Forced)
	fmt.Println(d.Notices[0])
	// Output:
	// cut 80 critical true
	// [foldproxy] result cut at 46 of 120 tokens to fit branch b-7's budget. The rest is kept: call branch_recall with handle "b-7~1f" to read it. This branch has been force-returned; continue in the parent.
}
