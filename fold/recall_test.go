package fold

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
)

// recallAll reads a handle page by page and returns the pages.
func recallAll(t *testing.T, e *testEnv, handle string, maxTokens int) []map[string]any {
	t.Helper()
	var pages []map[string]any
	offset := 0
	for i := 0; ; i++ {
		if i > 10000 {
			t.Fatalf("recall of %s does not end", handle)
		}
		p := e.mustCall(t, "s1", ToolRecall, map[string]any{"handle": handle, "offset": offset, "max_tokens": maxTokens})
		pages = append(pages, p)
		if p["done"] == true {
			return pages
		}
		next := int(p["next_offset"].(float64))
		if next <= offset {
			t.Fatalf("page %d makes no progress: offset %d next %d", i, offset, next)
		}
		offset = next
	}
}

func pageBytes(t *testing.T, p map[string]any) []byte {
	t.Helper()
	if b64, ok := p["text_base64"].(string); ok {
		b, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	return []byte(p["text"].(string))
}

func TestRecallPagesByteForByte(t *testing.T) {
	var long strings.Builder
	for i := range 400 {
		fmt.Fprintf(&long, "line %d: the quick brown fox jumps over the lazy dog\n", i)
	}
	tests := []struct {
		name      string
		rest      string
		maxTokens int
	}{
		{"lines", long.String(), 50},
		{"lines, one word a page", long.String()[:2000], 1},
		{"one long line", strings.Repeat("word ", 3000), 100},
		{"no spaces", strings.Repeat("x", 5000), 3},
		{"multibyte", strings.Repeat("日本語のテキスト ", 500), 7},
		{"empty", "", 10},
		{"invalid utf-8", "abc \xff\xfe def \xe6\x97 ghi", 1},
		{"page cap", long.String(), 1 << 20}, // capped by RecallPageTokens
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, nil)
			b := e.create(t, map[string]any{"budget": 10})
			res, err := e.m.Charge(t.Context(), "s1", b, func(bud Budget) (Charge, error) {
				return Charge{Upstream: "up", Name: "read", Result: []byte(`{}`), Tokens: 10, Cut: true, Rest: []byte(tt.rest)}, nil
			})
			if err != nil {
				t.Fatal(err)
			}
			pages := recallAll(t, e, res.Handle, tt.maxTokens)
			var got bytes.Buffer
			limit := min(tt.maxTokens, e.m.set.RecallPageTokens)
			for i, p := range pages {
				pb := pageBytes(t, p)
				got.Write(pb)
				if n := (wordCounter{}).CountText(string(pb)); n > limit && len(pb) > 0 {
					// One rune always fits a word counter, so no page may exceed the limit.
					t.Errorf("page %d: %d tokens, over %d", i, n, limit)
				}
				if i < len(pages)-1 && len(pb) == 0 {
					t.Errorf("page %d is empty", i)
				}
			}
			if !bytes.Equal(got.Bytes(), []byte(tt.rest)) {
				t.Fatalf("pages concatenated differ from the remainder:\n got %q\nwant %q", trunc(got.String()), trunc(tt.rest))
			}
		})
	}
}

func trunc(s string) string {
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}

func TestRecallCleanBoundary(t *testing.T) {
	e := newEnv(t, nil)
	text := []byte("alpha beta gamma\ndelta epsilon zeta\neta theta iota\n")
	tests := []struct {
		limit int
		want  string
	}{
		{3, "alpha beta gamma\n"},
		{4, "alpha beta gamma\n"},
		{5, "alpha beta gamma\n"},
		{6, "alpha beta gamma\ndelta epsilon zeta\n"},
		{100, string(text)},
		{1, "alpha "},
	}
	for _, tt := range tests {
		if got := string(text[:e.m.pageEnd(text, tt.limit)]); got != tt.want {
			t.Errorf("pageEnd(limit %d): got %q, want %q", tt.limit, got, tt.want)
		}
	}
	// A line boundary that would lose more than half the page gives way to
	// a word boundary.
	short := []byte("a\nbb cc dd ee ff gg")
	if got, want := string(short[:e.m.pageEnd(short, 4)]), "a\nbb cc dd "; got != want {
		t.Errorf("pageEnd(short): got %q, want %q", got, want)
	}
}

func TestRecallByBranch(t *testing.T) {
	e := newEnv(t, nil)
	b := e.create(t, map[string]any{"budget": 30000})
	var results []string
	for i := range 12 {
		r := fmt.Sprintf(`{"content":[{"type":"text","text":"%s"}]}`, strings.Repeat(fmt.Sprintf("r%d ", i), 10*(i+1)))
		results = append(results, r)
		if _, err := e.m.Charge(t.Context(), "s1", b, func(Budget) (Charge, error) {
			return Charge{Upstream: "up", Method: "tools/call", Name: "read", Args: `{"i":1}`, Result: []byte(r), Tokens: 5}, nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	e.mustCall(t, "s1", ToolReturn, map[string]any{"message": "done"})

	// Page through all calls: every result is whole, or truncated and then
	// readable whole through its call handle.
	offset, seen := 0, 0
	for i := 0; ; i++ {
		if i > 100 {
			t.Fatal("recall by branch does not end")
		}
		p := e.mustCall(t, "s1", ToolRecall, map[string]any{"branch_id": b, "offset": offset, "max_tokens": 120})
		for _, c := range p["calls"].([]any) {
			c := c.(map[string]any)
			seq := int(c["seq"].(float64))
			want := results[seq-1]
			if c["truncated"] == true {
				if !strings.HasPrefix(want, c["result"].(string)) {
					t.Fatalf("call %d: truncated result is not a prefix", seq)
				}
				var whole bytes.Buffer
				for _, pg := range recallAll(t, e, c["call_handle"].(string), 50) {
					whole.Write(pageBytes(t, pg))
				}
				if whole.String() != want {
					t.Fatalf("call %d via its handle: got %q, want %q", seq, trunc(whole.String()), trunc(want))
				}
			} else if c["result"] != want {
				t.Fatalf("call %d: got %q, want %q", seq, c["result"], want)
			}
			if seq != seen+1 {
				t.Fatalf("call %d after %d", seq, seen)
			}
			seen = seq
		}
		if p["done"] == true {
			break
		}
		offset = int(p["next_offset"].(float64))
	}
	if seen != 12 {
		t.Fatalf("saw %d calls, want 12", seen)
	}
}

func TestRecallRefusals(t *testing.T) {
	e := newEnv(t, nil)
	if err := e.m.OpenSession(t.Context(), SessionRecord{ID: "s2"}); err != nil {
		t.Fatal(err)
	}
	b := e.create(t, map[string]any{"budget": 5})
	res, _, err := e.charge(t, "s1", b, 50)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		session string
		args    map[string]any
		want    string
	}{
		{"neither", "s1", map[string]any{}, `ErrInvalidArgument: branch_recall: give exactly one of the fields "handle" and "branch_id"`},
		{"both", "s1", map[string]any{"handle": res.Handle, "branch_id": b}, "ErrInvalidArgument"},
		{"other session's handle", "s2", map[string]any{"handle": res.Handle}, "ErrCutNotFound: handle"},
		{"garbage handle", "s1", map[string]any{"handle": "zzz"}, "ErrCutNotFound"},
		{"unknown cut", "s1", map[string]any{"handle": b + "~00"}, "ErrCutNotFound"},
		{"unknown call", "s1", map[string]any{"handle": b + "#99"}, "ErrCutNotFound"},
		{"offset past the end", "s1", map[string]any{"handle": res.Handle, "offset": 1000}, "ErrInvalidArgument: offset 1000 is past the end of the text (8 bytes)"},
		{"negative offset", "s1", map[string]any{"handle": res.Handle, "offset": -1}, `field "offset": -1 is out of range`},
		{"zero max_tokens", "s1", map[string]any{"handle": res.Handle, "max_tokens": 0}, `field "max_tokens": 0 is out of range`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, text, ok := e.call(t, tt.session, ToolRecall, tt.args)
			if ok || !strings.Contains(text, tt.want) {
				t.Fatalf("got ok=%v %q, want a refusal containing %q", ok, text, tt.want)
			}
		})
	}
}

func TestParseHandle(t *testing.T) {
	tests := []struct {
		in     string
		branch string
		seq    int
		call   bool
		ok     bool
	}{
		{"b-12~ab09", "b-12", 0, false, true},
		{"b-12#7", "b-12", 7, true, true},
		{"root-a#b~c#3", "root-a#b~c", 3, true, true},
		{"root-a#1~ff", "root-a#1", 0, false, true},
		{"b-1#+7", "", 0, false, false},
		{"b-1#0", "", 0, false, false},
		{"b-1~XY", "", 0, false, false},
		{"b-1~", "", 0, false, false},
		{"#5", "", 0, false, false},
		{"", "", 0, false, false},
	}
	for _, tt := range tests {
		b, seq, call, ok := parseHandle(tt.in)
		if b != tt.branch || seq != tt.seq || call != tt.call || ok != tt.ok {
			t.Errorf("parseHandle(%q): got %q %d %v %v, want %q %d %v %v", tt.in, b, seq, call, ok, tt.branch, tt.seq, tt.call, tt.ok)
		}
	}
}

func TestNewCallHandleIsACutHandle(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		h := newCallHandle("b-0123")
		branch, _, isCall, ok := parseHandle(h)
		if !ok || isCall || branch != "b-0123" || len(h) != len("b-0123~")+12 {
			t.Fatalf("newCallHandle = %q: parseHandle gives %q, call %v, ok %v", h, branch, isCall, ok)
		}
		if seen[h] {
			t.Fatalf("newCallHandle repeated %q", h)
		}
		seen[h] = true
	}
}
