package intercept

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/foldproxy/foldproxy/policy"
)

func TestReadAuditLines(t *testing.T) {
	valid := `{"time":"2025-01-01T00:00:00Z","kind":"call","tool":"x"}`
	tests := []struct {
		name        string
		in          string
		wantRecords int
		wantSkipped int
	}{
		{"empty", "", 0, 0},
		{"one", valid + "\n", 1, 0},
		{"no final newline", valid, 1, 0},
		{"blank lines", "\n\n" + valid + "\n  \n", 1, 0},
		{"torn last", valid + "\n" + valid[:20], 1, 1},
		{"garbage", "hello\n" + valid + "\n[1,2]\nnull\n{}\n", 1, 4},
		{"two on a line", valid + valid + "\n", 0, 1},
		{"bad time", `{"time":"yesterday","kind":"call"}` + "\n", 0, 1},
		{"unknown field kept", `{"time":"2025-01-01T00:00:00Z","kind":"note","future":1}` + "\n", 1, 0},
		{"crlf", valid + "\r\n" + valid + "\r\n", 2, 0},
		{"too long", `{"kind":"call","tool":"` + strings.Repeat("a", maxLineLen) + `"}` + "\n" + valid + "\n", 1, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var st ReadStats
			var got int
			err := readRecords(strings.NewReader(tt.in), "f", &st, func(Record) error { got++; return nil })
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.wantRecords || st.Records != tt.wantRecords || st.Skipped != tt.wantSkipped {
				t.Errorf("records = %d (stats %d), skipped = %d; want %d, %d", got, st.Records, st.Skipped, tt.wantRecords, tt.wantSkipped)
			}
		})
	}
}

func TestReadAuditStopsOnCallbackError(t *testing.T) {
	au, path := newTestAuditor(t, policy.Audit{Fsync: "never"})
	for range 3 {
		if err := au.Write(Record{Kind: KindCall}); err != nil {
			t.Fatal(err)
		}
	}
	au.Close()
	stop := errors.New("stop")
	n := 0
	err := ReadAudit([]string{path}, func(Record) error { n++; return stop })
	if !errors.Is(err, stop) || n != 1 {
		t.Errorf("err = %v after %d records, want stop after 1", err, n)
	}
	err = ReadAudit([]string{filepath.Join(t.TempDir(), "none.jsonl")}, func(Record) error { return nil })
	if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "none.jsonl") {
		t.Errorf("missing file: err = %v, want ErrNotExist naming the file", err)
	}
}

func TestAuditFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a[1].jsonl") // glob characters in the name
	touch := func(names ...string) {
		for _, n := range names {
			if err := os.WriteFile(n, nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := AuditFiles(path); !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), path) {
		t.Errorf("missing: err = %v, want ErrNotExist naming %s", err, path)
	}
	touch(path+".10", path+".2", path+".x", path+".0")
	got, err := AuditFiles(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{path + ".10", path + ".2"}; !reflect.DeepEqual(got, want) {
		t.Errorf("rotated only: got %q, want %q", got, want)
	}
	touch(path, path+".1")
	got, err = AuditFiles(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{path + ".10", path + ".2", path + ".1", path}; !reflect.DeepEqual(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

// FuzzReadAudit feeds arbitrary bytes to the reader: it must never fail or
// panic, must hand over only records with a kind, and must account for
// every non-blank line as a record or a skip.
func FuzzReadAudit(f *testing.F) {
	f.Add([]byte(`{"time":"2025-01-01T00:00:00Z","kind":"call","redactions":{"r":1}}` + "\n"))
	f.Add([]byte(`{"time":"2025-01-01T00:00:00Z","kind":"branch","event":"created"}` + "\n{\"ki"))
	f.Add([]byte("\n\r\n{}\nnull\n\xff\xfe"))
	f.Add([]byte(`{"kind":"call","depth":1e999}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var st ReadStats
		var got int
		err := readRecords(bytes.NewReader(data), "fuzz", &st, func(r Record) error {
			if r.Kind == "" {
				t.Errorf("record without kind: %+v", r)
			}
			got++
			return nil
		})
		if err != nil {
			t.Fatalf("readRecords: %v", err)
		}
		lines := 0
		for _, l := range bytes.Split(data, []byte("\n")) {
			if len(bytes.TrimSpace(l)) > 0 {
				lines++
			}
		}
		if got != st.Records || st.Records+st.Skipped != lines {
			t.Errorf("records %d (fn saw %d) + skipped %d != %d non-blank lines", st.Records, got, st.Skipped, lines)
		}
	})
}
