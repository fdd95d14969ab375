package main

import "testing"

func TestGenerate(t *testing.T) {
	tests := []struct {
		kind    string
		n       int
		wantErr bool
	}{
		{"text", 0, false}, {"text", 10, false}, {"log", 1 << 10, false},
		{"json", 100 << 10, false}, {"code", 1 << 20, false}, {"xml", 10, true},
	}
	for _, tt := range tests {
		got, err := generate(tt.n, tt.kind)
		if (err != nil) != tt.wantErr {
			t.Fatalf("generate(%d, %q): error %v, want error %v", tt.n, tt.kind, err, tt.wantErr)
		}
		if err == nil && len(got) != tt.n {
			t.Errorf("generate(%d, %q): %d bytes", tt.n, tt.kind, len(got))
		}
		if again, _ := generate(tt.n, tt.kind); again != got {
			t.Errorf("generate(%d, %q) is not deterministic", tt.n, tt.kind)
		}
	}
}
