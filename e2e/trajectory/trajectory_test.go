package trajectory

import (
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

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

func TestRead(t *testing.T) {
	tests := []struct {
		name, data string
		want       int
		wantErr    string
	}{
		{"two", `{"id":"a","steps":[{"command":"ls","returncode":2,"output":"x"}]}` + "\n\n" + `{"id":"b","steps":[]}` + "\n", 2, ""},
		{"bad json", `{"id":"a"` + "\n", 0, "line 1"},
		{"no id", `{"steps":[]}` + "\n", 0, "without an id"},
		{"duplicate", `{"id":"a"}` + "\n" + `{"id":"a"}` + "\n", 0, `line 2: duplicate trajectory id "a"`},
		{"empty", "", 0, "no trajectories"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Read(gz(t, tt.data))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Read: %v, want an error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || len(got) != tt.want {
				t.Fatalf("Read: %d trajectories, %v; want %d", len(got), err, tt.want)
			}
			if st := got[0].Steps[0]; st != (Step{Command: "ls", ReturnCode: 2, Output: "x"}) {
				t.Errorf("first step %+v", st)
			}
		})
	}
	if _, err := Read(strings.NewReader("not gzip")); err == nil || !strings.Contains(err.Error(), "not gzip") {
		t.Errorf("Read of non-gzip data: %v", err)
	}
}

// Load names the file in its errors; LoadRepo finds the repository's file
// from any folder.
func TestLoad(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.jsonl.gz")
	if err := os.WriteFile(bad, gz(t, `{"steps":[]}`).Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(bad); err == nil || !strings.Contains(err.Error(), bad) {
		t.Errorf("Load of a bad file: %v; want an error naming it", err)
	}
	if _, err := Load(filepath.Join(t.TempDir(), "absent")); err == nil {
		t.Error("Load of an absent file: no error")
	}
	t.Chdir(t.TempDir())
	trajs, err := LoadRepo()
	if err != nil || len(trajs) == 0 || len(trajs[0].Steps) == 0 {
		t.Fatalf("LoadRepo: %d trajectories, %v", len(trajs), err)
	}
}

// TestMixed: the mixed corpus is deterministic, of about the size asked,
// valid UTF-8, and holds each kind of text.
func TestMixed(t *testing.T) {
	outs := []string{"$ ls\nREADME.md\n", "PASS\nok  \tpkg\t0.01s\n"}
	a, b := Mixed(outs, 200<<10), Mixed(outs, 200<<10)
	if a != b {
		t.Fatal("Mixed is not deterministic")
	}
	if len(a) < 200<<10 || len(a) > 250<<10 {
		t.Errorf("Mixed(200 KiB) has %d bytes", len(a))
	}
	for _, want := range []string{"README.md", "func ", `{"id":`, " status=", "\n"} {
		if !strings.Contains(a, want) {
			t.Errorf("Mixed holds no %q", want)
		}
	}
	if !utf8.ValidString(a) {
		t.Error("Mixed is not valid UTF-8")
	}
}
