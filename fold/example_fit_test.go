package fold_test

import (
	"fmt"
	"strings"

	"github.com/foldproxy/foldproxy/fold"
	"github.com/foldproxy/foldproxy/policy"
)

// A wire hands Fit its result and its ways to shape one. Here a result is a
// text whose tokens are its words, cut at a word; notices go after it, each
// on its own line.
func ExampleFit() {
	count := func(s string) int { return len(strings.Fields(s)) }
	text := strings.Repeat("line ", 120) // 120 tokens

	// A branch of 100 tokens, 20 used, that keeps 10 for its last notice.
	bud := fold.Budget{Branch: "b-7", Total: 100, Used: 20, Remaining: 80, Reserve: 10, Handle: "b-7~1f"}
	m := fold.Measured[string]{
		Result: text, Tokens: count(text), Notices: true,
		NoticeTokens: count,
		Attach: func(r string, tokens int, notices []string) (string, int, error) {
			return r + "\n" + strings.Join(notices, "\n"), tokens, nil
		},
		Cut: func(limit int) (string, fold.Piece, error) {
			words := strings.Fields(text)
			kept := strings.Join(words[:min(limit, len(words))], " ")
			rest := len(text) - len(kept)
			return kept, fold.Piece{Kept: count(kept), Bytes: len(kept), RestBytes: rest}, nil
		},
	}
	d := fold.Fit(bud, m, fold.FitOptions[string]{Thresholds: policy.Default().Fold.Thresholds})

	fmt.Println(d.Verdict, d.Tokens, d.Level, d.Forced)
	fmt.Println(d.Notices[0])
	// Output:
	// cut 80 critical true
	// [foldproxy] result cut at 46 of 120 tokens to fit branch b-7's budget. The rest is kept: call branch_recall with handle "b-7~1f" to read it. This branch has been force-returned; continue in the parent.
}
