package intercept

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
)

// BenchmarkTokensCall is the Tokens interceptor on one tools/call result
// of real tool output of a given size (the trajectory outputs joined and
// cut at a line end), warm: the fixed cost of a call shows on the tiny one,
// the counting on the large ones.
func BenchmarkTokensCall(b *testing.B) {
	all := strings.Join(trajectoryOutputs(b), "\n")
	for _, size := range []struct {
		name string
		n    int
	}{{"10B", 10}, {"1KB", 1 << 10}, {"100KB", 100 << 10}} {
		text := all[:size.n]
		if size.n > 100 {
			text = text[:strings.LastIndexByte(text, '\n')+1]
		}
		res := textResult(b, text)
		b.Run(size.name, func(b *testing.B) {
			c := newCounter(b, "")
			h := Chain(func(_ context.Context, ex *Exchange) error { ex.Result = res; return nil }, Tokens(c))
			ctx := context.Background()
			b.SetBytes(int64(len(res)))
			for b.Loop() {
				ex := &Exchange{Method: "tools/call", Args: json.RawMessage(`{"bytes":10}`), Remaining: -1}
				if err := h(ctx, ex); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
