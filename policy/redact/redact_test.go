package redact

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"slices"
	"strings"
	"testing"
)

func TestFrom(t *testing.T) {
	for _, c := range []struct {
		name string
		got  []string
		want []string // each must be among got
		not  []string // none may be
	}{
		{"url", FromURL("https://alice:pa55word@h.example/mcp?api_key=K3Y-value&x=plain&sig=S1GN"),
			[]string{"pa55word", "K3Y-value", "S1GN"}, []string{"alice", "plain"}},
		{"url token as user", FromURL("https://ghp_TOKENVALUE@github.com/x"), []string{"ghp_TOKENVALUE"}, nil},
		{"url escaped", FromURL("https://u:p%40ss%2Fw@h/"), []string{"p@ss/w", "p%40ss%2Fw"}, nil},
		{"headers", FromHeaders(map[string]string{"Authorization": "Bearer abc.def", "X-Api-Key": "k-123", "Accept": "application/json"}),
			[]string{"Bearer abc.def", "abc.def", "k-123"}, []string{"application/json"}},
		{"env", FromEnv(map[string]string{"GITHUB_TOKEN": "ghp_x1", "DATABASE_URL": "postgres://u:dbpass@h/db", "PATH": "/usr/bin"}),
			[]string{"ghp_x1", "dbpass"}, []string{"/usr/bin"}},
		{"args", FromArgs([]string{"--api-key=AK1", "--token", "TK2", "--port", "8080", "https://h/?access_token=AT3"}),
			[]string{"AK1", "TK2", "AT3"}, []string{"8080"}},
	} {
		for _, w := range c.want {
			if !slices.Contains(c.got, w) {
				t.Errorf("%s: %q not found in %q", c.name, w, c.got)
			}
		}
		for _, n := range c.not {
			if slices.Contains(c.got, n) {
				t.Errorf("%s: %q taken as a credential", c.name, n)
			}
		}
	}
}

func TestRedactor(t *testing.T) {
	r := New("pa55word", "pa55word-longer", "ab", "")
	if got := r.String("x pa55word-longer y pa55word z ab"); got != "x "+Marker+" y "+Marker+" z ab" {
		t.Errorf("String: %q", got)
	}
	err := fmt.Errorf("dial pa55word: %w", fs.ErrNotExist)
	red := r.Error(err)
	if strings.Contains(red.Error(), "pa55word") || !errors.Is(red, fs.ErrNotExist) {
		t.Errorf("Error: %q, Is ErrNotExist %v", red, errors.Is(red, fs.ErrNotExist))
	}
	if clean := errors.New("clean"); r.Error(clean) != clean {
		t.Error("an error without a credential is not kept as it is")
	}
	var none *Redactor
	if none.String("pa55word") != "pa55word" || !New().Empty() {
		t.Error("an empty Redactor changes text")
	}
}

func TestHandler(t *testing.T) {
	var buf bytes.Buffer
	r := New("pa55word")
	log := slog.New(r.Handler(slog.NewTextHandler(&buf, nil))).With("url", "https://u:pa55word@h")
	log.Info("retrying pa55word", "err", errors.New("Post pa55word: refused"), slog.Group("g", "k", "pa55word"), "n", 3)
	if out := buf.String(); strings.Contains(out, "pa55word") || strings.Count(out, Marker) != 4 || !strings.Contains(out, "n=3") {
		t.Errorf("log line: %s", out)
	}
}
