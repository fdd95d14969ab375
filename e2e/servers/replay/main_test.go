package main

import (
	"bytes"
	"compress/gzip"
	"strings"
	"testing"
)

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

func gz(t *testing.T, s string) *bytes.Buffer {
	t.Helper()
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	if _, err := w.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return &b
}

func TestLoad(t *testing.T) {
	tests := []struct {
		name, data string
		want       int
		wantErr    string
	}{
		{"two", `{"id":"a","steps":[{"output":"x"}]}` + "\n\n" + `{"id":"b","steps":[]}` + "\n", 2, ""},
		{"bad json", `{"id":"a"` + "\n", 0, "line 1"},
		{"no id", `{"steps":[]}` + "\n", 0, "without an id"},
		{"duplicate", `{"id":"a"}` + "\n" + `{"id":"a"}` + "\n", 0, "duplicate"},
		{"empty", "", 0, "no trajectories"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := load(gz(t, tt.data))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("load: %v, want an error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || len(got) != tt.want {
				t.Fatalf("load: %d trajectories, %v; want %d", len(got), err, tt.want)
			}
		})
	}
	if _, err := load(strings.NewReader("not gzip")); err == nil {
		t.Error("load of non-gzip data: no error")
	}
}
