package intercept

import (
	"context"
	"encoding/json"
	"testing"
)

func TestTokensInterceptor(t *testing.T) {
	c := newCounter(t, "")
	tests := []struct {
		name      string
		result    string
		remaining int
		wantN     int
		wantOver  bool
	}{
		{"unlimited", `{"content":[{"type":"text","text":"one two three"}]}`, -1, c.CountText("one two three"), false},
		{"within", `{"content":[{"type":"text","text":"one two three"}]}`, 100, c.CountText("one two three"), false},
		{"over", `{"content":[{"type":"text","text":"one two three four five six"}]}`, 2, 0, true},
		{"invalid JSON counted raw", `{"content":[{"type":"text","text":"x}]}`, -1, c.CountText(`{"content":[{"type":"text","text":"x}]}`), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := Chain(func(ctx context.Context, ex *Exchange) error {
				ex.Result = json.RawMessage(tt.result)
				return nil
			}, Tokens(c))
			ex := &Exchange{Method: "tools/call", Args: json.RawMessage(`{"path":"a.go"}`), Remaining: tt.remaining}
			if err := h(context.Background(), ex); err != nil {
				t.Fatal(err)
			}
			if ex.ArgTokens != c.CountText(`{"path":"a.go"}`) {
				t.Errorf("ArgTokens = %d", ex.ArgTokens)
			}
			if ex.Over != tt.wantOver || (!tt.wantOver && ex.ResultTokens != tt.wantN) || (tt.wantOver && ex.ResultTokens <= tt.remaining) {
				t.Errorf("ResultTokens, Over = %d, %v; want %d, %v", ex.ResultTokens, ex.Over, tt.wantN, tt.wantOver)
			}
		})
	}
}
