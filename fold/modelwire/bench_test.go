package modelwire

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
)

// BenchmarkApply folds the golden Claude Code request with a returned
// branch, and charges the results of an open one, against two baselines
// measured in the same run: json.Valid over the same bytes, and Check (one
// parse of the conversation).
func BenchmarkApply(b *testing.B) {
	folded := readFile(b, filepath.Join("testdata", "golden", "claude-code-returned", "request.json"))
	open := readFile(b, filepath.Join("testdata", "golden", "claude-code-open", "request.json"))
	st := newFakeState(Branch{ID: "b-7f3a9c01d2e4b5a6", Closed: true, Summary: "S"})
	stOpen := newFakeState(Branch{ID: "b-7f3a9c01d2e4b5a6", Budget: 1 << 30})
	ctx := context.Background()
	b.Run("baseline-json-valid", func(b *testing.B) {
		b.SetBytes(int64(len(folded)))
		for b.Loop() {
			json.Valid(folded)
		}
	})
	b.Run("baseline-check", func(b *testing.B) {
		b.SetBytes(int64(len(folded)))
		for b.Loop() {
			Check(Anthropic, folded)
		}
	})
	b.Run("fold-returned", func(b *testing.B) {
		b.SetBytes(int64(len(folded)))
		for b.Loop() {
			if _, err := Apply(ctx, Anthropic, folded, st, Options{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("open-branch-charged", func(b *testing.B) {
		b.SetBytes(int64(len(open)))
		for b.Loop() {
			if _, err := Apply(ctx, Anthropic, open, stOpen, Options{}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
