package main

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"
)

func TestWorkCrashesEveryNth(t *testing.T) {
	tests := []struct {
		every     int
		calls     int
		wantExits []int // call numbers that exit
	}{
		{0, 5, nil},
		{1, 3, []int{1, 2, 3}},
		{3, 7, []int{3, 6}},
	}
	for _, tt := range tests {
		var exits []int
		call := 0
		f := &flaky{crashEvery: tt.every, log: slog.New(slog.NewTextHandler(io.Discard, nil)), exit: func(int) { exits = append(exits, call) }}
		for call = 1; call <= tt.calls; call++ {
			if _, err := f.work(context.Background(), mcp.CallToolRequest{}); err != nil {
				t.Fatalf("work: %v", err)
			}
		}
		if len(exits) != len(tt.wantExits) {
			t.Fatalf("crash-every %d: exits at calls %v, want %v", tt.every, exits, tt.wantExits)
		}
		for i := range exits {
			if exits[i] != tt.wantExits[i] {
				t.Fatalf("crash-every %d: exits at calls %v, want %v", tt.every, exits, tt.wantExits)
			}
		}
	}
}
