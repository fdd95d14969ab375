package tokens

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/foldproxy/foldproxy/policy"
)

const trajectories = "../../e2e/testdata/trajectories/swe-dev.jsonl.gz"

// tokTrajectoryPath returns the trajectory file the repository holds, or ""
// when it is absent.
func tokTrajectoryPath() string {
	if _, err := os.Stat(trajectories); err == nil {
		return trajectories
	}
	return ""
}

// trajectoryOutputs returns the non-empty step outputs of the trajectory file,
// skipping the test when the file is absent.
func trajectoryOutputs(tb testing.TB) []string {
	tb.Helper()
	p := tokTrajectoryPath()
	if p == "" {
		tb.Fatalf("trajectory file %s is absent: the repository holds it under e2e/testdata", trajectories)
	}
	f, err := os.Open(p)
	if err != nil {
		tb.Fatalf("open trajectories: %v", err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		tb.Fatalf("gunzip trajectories: %v", err)
	}
	sc := bufio.NewScanner(zr)
	sc.Buffer(nil, 64<<20)
	var outs []string
	for sc.Scan() {
		var rec struct {
			Steps []struct {
				Output string `json:"output"`
			} `json:"steps"`
		}
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			tb.Fatalf("trajectory line: %v", err)
		}
		for _, s := range rec.Steps {
			if s.Output != "" {
				outs = append(outs, s.Output)
			}
		}
	}
	if err := sc.Err(); err != nil {
		tb.Fatalf("read trajectories: %v", err)
	}
	return outs
}

// bigText returns at least n bytes of real tool output.
func bigText(tb testing.TB, n int) string {
	tb.Helper()
	outs := trajectoryOutputs(tb)
	var b strings.Builder
	for b.Len() < n {
		for _, o := range outs {
			b.WriteString(o)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

func newCounter(tb testing.TB, enc string) *Counter {
	tb.Helper()
	c, err := NewCounter(policy.Tokens{Encoding: enc, ImageTokens: 1600, AudioTokens: 800})
	if err != nil {
		tb.Fatalf("NewCounter(%q): %v", enc, err)
	}
	return c
}

func TestNewCounter(t *testing.T) {
	tests := []struct {
		enc     string
		want    string
		wantErr bool
	}{
		{"", "o200k_base", false},
		{"o200k_base", "o200k_base", false},
		{"cl100k_base", "cl100k_base", false},
		{"p50k_base", "", true},
		{"gpt-4o", "", true},
	}
	for _, tt := range tests {
		c, err := NewCounter(policy.Tokens{Encoding: tt.enc})
		if tt.wantErr {
			if err == nil || !strings.Contains(err.Error(), "tokens.encoding") || !errors.Is(err, policy.ErrInvalid) {
				t.Errorf("NewCounter(%q) error = %v, want one naming tokens.encoding", tt.enc, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("NewCounter(%q): %v", tt.enc, err)
		}
		if got := c.Encoding(); got != tt.want {
			t.Errorf("NewCounter(%q).Encoding() = %q, want %q", tt.enc, got, tt.want)
		}
	}
}

func TestCountText(t *testing.T) {
	c := newCounter(t, "")
	tests := []struct {
		in   string
		want int
	}{
		{"", 0},
		{"hello", 1},
		{"hello world", 2},
	}
	for _, tt := range tests {
		if got := c.CountText(tt.in); got != tt.want {
			t.Errorf("CountText(%q) = %d, want %d", tt.in, got, tt.want)
		}
	}
}

// TestSplitPointsAdditive checks the property the chunked counting rests
// on: at every split point, the count of the text is the sum of the counts
// of both sides.
func TestSplitPointsAdditive(t *testing.T) {
	outs := trajectoryOutputs(t)
	extra := []string{
		"a\n\nb", "x  \n  y", "}\n/x", "}\n\nz", "abc123 def", "it's 9 o'clock\n\tdone",
		"résumé\nçava 42\n  \u00a0x", "a\u3000b c", "[1, 2]\n]\n", "\r\nx\ry",
	}
	for _, enc := range policy.Encodings {
		c := newCounter(t, enc)
		texts := append(append([]string(nil), extra...), outs[:min(len(outs), 120)]...)
		checked := 0
		for _, s := range texts {
			if len(s) > 20000 {
				s = s[:20000]
			}
			whole := c.CountText(s)
			step := max(1, len(s)/60)
			for p := 1; p < len(s); p++ {
				if !splitsAt(s, p) {
					continue
				}
				if p%step != 0 && len(s) > 200 {
					continue
				}
				if got := c.CountText(s[:p]) + c.CountText(s[p:]); got != whole {
					t.Fatalf("%s: split at %d of %q: %d+%d tokens, whole %d", enc, p, s[max(0, p-20):min(len(s), p+20)], c.CountText(s[:p]), c.CountText(s[p:]), whole)
				}
				checked++
			}
		}
		if checked < 500 {
			t.Fatalf("%s: only %d split points checked", enc, checked)
		}
	}
}

func TestCountUpTo(t *testing.T) {
	c := newCounter(t, "")
	outs := trajectoryOutputs(t)
	long := bigText(t, 300_000)
	texts := append([]string{long, "", "short text"}, outs[:40]...)
	for _, s := range texts {
		full := c.CountText(s)
		for _, limit := range []int{0, 1, 7, 100, 1000, 8192, full - 1, full, full + 1} {
			if limit < 0 {
				continue
			}
			n, over := c.CountUpTo(s, limit)
			switch {
			case full <= limit && (over || n != full):
				t.Fatalf("CountUpTo(len %d, %d) = %d, %v; want %d, false", len(s), limit, n, over, full)
			case full > limit && (!over || n <= limit || n > full):
				t.Fatalf("CountUpTo(len %d, %d) = %d, %v; want over with %d < n <= %d", len(s), limit, n, over, limit, full)
			}
		}
		if n, over := c.CountUpTo(s, -1); over || n != full {
			t.Fatalf("CountUpTo(len %d, -1) = %d, %v; want %d, false", len(s), n, over, full)
		}
	}
}

// checkCut checks CutText's invariants for one text and limit.
func checkCut(t testing.TB, c *Counter, s string, limit int) int {
	t.Helper()
	p := c.CutText(s, limit)
	if p < 0 || p > len(s) {
		t.Fatalf("CutText(len %d, %d) = %d: out of range", len(s), limit, p)
	}
	if p < len(s) && !utf8.RuneStart(s[p]) {
		t.Fatalf("CutText(len %d, %d) = %d: inside a UTF-8 sequence", len(s), limit, p)
	}
	if n := c.CountText(s[:p]); n > max(limit, 0) {
		t.Fatalf("CutText(len %d, %d) = %d: prefix has %d tokens", len(s), limit, p, n)
	}
	if limit >= 0 && c.CountText(s) <= limit && p != len(s) {
		t.Fatalf("CutText(len %d, %d) = %d: the whole text fits", len(s), limit, p)
	}
	return p
}

func TestCutText(t *testing.T) {
	c := newCounter(t, "")
	outs := trajectoryOutputs(t)
	long := bigText(t, 200_000)
	for _, limit := range []int{1, 5, 50, 333, 1000, 4096, 8192} {
		p := checkCut(t, c, long, limit)
		// Nearly all the budget is used: at most a line is lost, and a line
		// of tool output is short.
		if got := c.CountText(long[:p]); limit >= 50 && got < limit/2 {
			t.Errorf("CutText(long, %d) keeps %d tokens, want at least half", limit, got)
		}
		if limit >= 1000 && long[p-1] != '\n' {
			t.Errorf("CutText(long, %d) = %d does not end a line: %q", limit, p, long[p-20:p])
		}
	}
	for i, s := range outs {
		if i%7 != 0 {
			continue
		}
		for _, limit := range []int{0, 3, 40, 400} {
			checkCut(t, c, s, limit)
		}
	}
	// Clean boundaries in text without line breaks: a word end, else a rune.
	words := strings.Repeat("alpha beta gamma ", 100)
	if p := checkCut(t, c, words, 10); words[p] != ' ' {
		t.Errorf("CutText(words, 10) = %d, want a word end, got %q|%q", p, words[:p], words[p:p+5])
	}
	cjk := strings.Repeat("日本語のテキスト", 200)
	checkCut(t, c, cjk, 17)
}

func TestCountResult(t *testing.T) {
	c := newCounter(t, "")
	ct := c.CountText
	tests := []struct {
		name   string
		method string
		result string
		want   int
	}{
		{"text", "tools/call", `{"content":[{"type":"text","text":"hello world"}]}`, ct("hello world")},
		{"two texts", "tools/call", `{"content":[{"type":"text","text":"a b"},{"type":"text","text":"c\nd"}]}`, ct("a b") + ct("c\nd")},
		{"image and audio", "tools/call", `{"content":[{"type":"image","data":"AAAA","mimeType":"image/png"},{"type":"audio","data":"AA","mimeType":"audio/wav"}]}`, 1600 + 800},
		{"resource link", "tools/call", `{"content":[{"type":"resource_link","uri":"file:///a.go","name":"a.go","description":"the main file","mimeType":"text/x-go"}]}`, ct("file:///a.go") + ct("a.go") + ct("the main file")},
		{"embedded text", "tools/call", `{"content":[{"type":"resource","resource":{"uri":"file:///x","text":"package main"}}]}`, ct("package main")},
		{"embedded blob", "tools/call", `{"content":[{"type":"resource","resource":{"uri":"file:///x","mimeType":"application/octet-stream","blob":"AAAAAAAA"}}]}`, 2},
		{"embedded image blob", "tools/call", `{"content":[{"type":"resource","resource":{"uri":"file:///x.png","mimeType":"image/png","blob":"AAAAAAAA"}}]}`, 1600},
		{"structured duplicated as text", "tools/call", `{"content":[{"type":"text","text":"{\"a\":1}"}],"structuredContent":{"a":1}}`, ct(`{"a":1}`)},
		{"structured larger than its text", "tools/call", `{"content":[{"type":"text","text":"ok"}],"structuredContent":{"a":[1,2,3,4,5,6]}}`, ct(`{"a":[1,2,3,4,5,6]}`)},
		{"text larger than structured", "tools/call", `{"content":[{"type":"text","text":"a much longer text block than the structured part"}],"structuredContent":{"a":1}}`, ct("a much longer text block than the structured part")},
		{"unknown block", "tools/call", `{"content":[{"type":"video","url":"x"}]}`, ct(`{"type":"video","url":"x"}`)},
		{"escaped type", "tools/call", `{"content":[{"type":"t\u0065xt","text":"hello world"}]}`, ct("hello world")},
		{"repeated type", "tools/call", `{"content":[{"type":"image","type":"text","text":"hello world"}]}`, 1600},
		{"invalid UTF-8 text", "tools/call", "{\"content\":[{\"type\":\"text\",\"text\":\"caf\xe9 ok\"}]}", ct("caf\ufffd ok")},
		{"escapes", "tools/call", `{"content":[{"type":"text","text":"tab\there \u00e9 \ud83d\ude00 \"q\""}]}`, ct("tab\there é 😀 \"q\"")},
		{"no content", "tools/call", `{"isError":true}`, ct(`{"isError":true}`)},
		{"resources", "resources/read", `{"contents":[{"uri":"file:///a","text":"line one\nline two"},{"uri":"file:///b","mimeType":"audio/ogg","blob":"AAAA"}]}`, ct("line one\nline two") + 800},
		{"prompt", "prompts/get", `{"description":"Review code","messages":[{"role":"user","content":{"type":"text","text":"Please review"}},{"role":"assistant","content":{"type":"image","data":"AA","mimeType":"image/png"}}]}`, ct("Review code") + ct("Please review") + 1600},
		{"completion", "completion/complete", `{"completion":{"values":["alpha","beta"],"total":2}}`, ct("alpha\nbeta")},
		{"unknown method", "tasks/get", `{"task":{"id":"t1"}}`, ct(`{"task":{"id":"t1"}}`)},
		{"not an object", "tools/call", `[1,2]`, ct(`[1,2]`)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, over, err := c.CountResult(tt.method, json.RawMessage(tt.result), -1)
			if err != nil || over || got != tt.want {
				t.Fatalf("CountResult = %d, %v, %v; want %d, false, nil", got, over, err, tt.want)
			}
			if tt.want > 0 {
				n, over, err := c.CountResult(tt.method, json.RawMessage(tt.result), tt.want-1)
				if err != nil || !over || n <= tt.want-1 {
					t.Fatalf("CountResult(limit %d) = %d, %v, %v; want over", tt.want-1, n, over, err)
				}
			}
		})
	}
	for _, bad := range []string{`{"content":[{"type":"text","text":"x}]}`, `{"content":`, `{"a" 1}`, `nul`, `{"content":[{"type":"text","text":"\x"}]}`} {
		if _, _, err := c.CountResult("tools/call", json.RawMessage(bad), -1); err == nil {
			t.Errorf("CountResult(%s) succeeded, want an error", bad)
		}
	}
}

// textResult returns a tools/call result with one text block, encoded
// without HTML escaping, as the TypeScript and Python SDKs send it.
func textResult(tb testing.TB, text string) json.RawMessage {
	tb.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	err := enc.Encode(map[string]any{
		"content": []any{map[string]any{"type": "text", "text": text, "annotations": map[string]any{"audience": []string{"assistant"}}}},
		"_meta":   map[string]any{"k": "v"},
	})
	if err != nil {
		tb.Fatal(err)
	}
	return bytes.TrimSpace(buf.Bytes())
}

// checkCutResult checks CutResult's invariants on a single-text tools/call
// result and returns the kept text.
func checkCutResult(tb testing.TB, c *Counter, text string, limit int) string {
	tb.Helper()
	res := textResult(tb, text)
	cut, rest, tokens, err := c.CutResult("tools/call", res, limit)
	if err != nil {
		tb.Fatalf("CutResult(limit %d): %v", limit, err)
	}
	if !json.Valid(cut) {
		tb.Fatalf("CutResult(limit %d): invalid JSON %.200s", limit, cut)
	}
	n, over, err := c.CountResult("tools/call", cut, -1)
	if err != nil || over || n != tokens || n > limit {
		tb.Fatalf("CutResult(limit %d): tokens %d, recounted %d (%v), want equal and <= limit", limit, tokens, n, err)
	}
	var got struct {
		Content []struct {
			Text        string          `json:"text"`
			Annotations json.RawMessage `json:"annotations"`
		} `json:"content"`
		Meta json.RawMessage `json:"_meta"`
	}
	if err := json.Unmarshal(cut, &got); err != nil {
		tb.Fatal(err)
	}
	if string(got.Meta) != `{"k":"v"}` {
		tb.Fatalf("CutResult(limit %d): _meta = %s", limit, got.Meta)
	}
	kept := ""
	if len(got.Content) > 0 {
		kept = got.Content[0].Text
		if string(got.Content[0].Annotations) != `{"audience":["assistant"]}` {
			tb.Fatalf("CutResult(limit %d): annotations = %s", limit, got.Content[0].Annotations)
		}
	}
	if kept+string(rest) != text {
		tb.Fatalf("CutResult(limit %d): kept+rest differs from the text (%d+%d vs %d bytes)", limit, len(kept), len(rest), len(text))
	}
	if rest == nil && len(kept) != len(text) {
		tb.Fatalf("CutResult(limit %d): nil rest but the text was cut", limit)
	}
	return kept
}

func TestCutResultTrajectories(t *testing.T) {
	c := newCounter(t, "")
	outs := trajectoryOutputs(t)
	limits := []int{0, 1, 2, 10, 64, 500, 2000}
	for i, s := range outs {
		if i%5 != 0 {
			continue
		}
		checkCutResult(t, c, s, limits[i%len(limits)])
	}
	long := bigText(t, 150_000)
	for _, limit := range []int{100, 1234, 8192} {
		if n, over, err := c.CountResult("tools/call", textResult(t, long), limit); err != nil || !over || n <= limit {
			t.Errorf("CountResult(long, %d) = %d, %v, %v; want over", limit, n, over, err)
		}
		kept := checkCutResult(t, c, long, limit)
		if !strings.HasSuffix(kept, "\n") {
			t.Errorf("limit %d: cut not at a line end: %q", limit, kept[max(0, len(kept)-30):])
		}
	}
}

func TestCutResultShapes(t *testing.T) {
	c := newCounter(t, "")
	ct := c.CountText
	tests := []struct {
		name     string
		method   string
		result   string
		limit    int
		wantCut  string
		wantRest string
	}{
		{
			name:     "fits",
			method:   "tools/call",
			result:   `{"content":[{"type":"text","text":"hello world"}]}`,
			limit:    10,
			wantCut:  `{"content":[{"type":"text","text":"hello world"}]}`,
			wantRest: "",
		},
		{
			name:     "later items dropped",
			method:   "tools/call",
			result:   `{"content":[{"type":"text","text":"one\ntwo\nthree\n"},{"type":"image","data":"AA","mimeType":"image/png"},{"type":"text","text":"tail"}],"isError":false}`,
			limit:    ct("one\ntwo\n"),
			wantCut:  `{"content":[{"type":"text","text":"one\ntwo\n"}],"isError":false}`,
			wantRest: "three\n\n" + `{"type":"image","data":"AA","mimeType":"image/png"}` + "\ntail",
		},
		{
			name:     "image that does not fit",
			method:   "tools/call",
			result:   `{"content":[{"type":"text","text":"hi"},{"type":"image","data":"AA","mimeType":"image/png"}]}`,
			limit:    100,
			wantCut:  `{"content":[{"type":"text","text":"hi"}]}`,
			wantRest: `{"type":"image","data":"AA","mimeType":"image/png"}`,
		},
		{
			name:     "structured content dropped",
			method:   "tools/call",
			result:   `{"content":[{"type":"text","text":"short"}],"structuredContent":{"a":[1,2,3,4,5,6,7,8,9]}}`,
			limit:    ct("short"),
			wantCut:  `{"content":[{"type":"text","text":"short"}]}`,
			wantRest: `{"a":[1,2,3,4,5,6,7,8,9]}`,
		},
		{
			name:     "structured content after a cut text",
			method:   "tools/call",
			result:   `{"structuredContent":{"x":1},"content":[{"type":"text","text":"aa\nbb\n"}]}`,
			limit:    ct("aa\n"),
			wantCut:  `{"content":[{"type":"text","text":"aa\n"}]}`,
			wantRest: "bb\n", // the structured copy is not read again
		},
		{
			name:     "embedded resource text",
			method:   "tools/call",
			result:   `{"content":[{"type":"resource","resource":{"uri":"file:///a","mimeType":"text/plain","text":"l1\nl2\nl3\n"},"annotations":{"priority":1}}]}`,
			limit:    ct("l1\nl2\n"),
			wantCut:  `{"content":[{"type":"resource","resource":{"uri":"file:///a","mimeType":"text/plain","text":"l1\nl2\n"},"annotations":{"priority":1}}]}`,
			wantRest: "l3\n",
		},
		{
			name:     "resources read",
			method:   "resources/read",
			result:   `{"contents":[{"uri":"file:///a","text":"x1\nx2\n"},{"uri":"file:///b","text":"y"}]}`,
			limit:    ct("x1\n"),
			wantCut:  `{"contents":[{"uri":"file:///a","text":"x1\n"}]}`,
			wantRest: "x2\n\ny",
		},
		{
			name:     "prompt message",
			method:   "prompts/get",
			result:   `{"description":"d","messages":[{"role":"user","content":{"type":"text","text":"m1\nm2\n"}},{"role":"user","content":{"type":"text","text":"m3"}}]}`,
			limit:    ct("d") + ct("m1\n"),
			wantCut:  `{"description":"d","messages":[{"role":"user","content":{"type":"text","text":"m1\n"}}]}`,
			wantRest: "m2\n\nm3",
		},
		{
			name:     "nothing fits",
			method:   "tools/call",
			result:   `{"content":[{"type":"text","text":"abc"}]}`,
			limit:    0,
			wantCut:  `{"content":[]}`,
			wantRest: "abc",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cut, rest, tokens, err := c.CutResult(tt.method, json.RawMessage(tt.result), tt.limit)
			if err != nil {
				t.Fatalf("CutResult: %v", err)
			}
			if string(cut) != tt.wantCut {
				t.Errorf("cut = %s\nwant  %s", cut, tt.wantCut)
			}
			if string(rest) != tt.wantRest {
				t.Errorf("rest = %q\nwant   %q", rest, tt.wantRest)
			}
			if n, _, _ := c.CountResult(tt.method, cut, -1); n != tokens || n > tt.limit {
				t.Errorf("tokens = %d, recounted %d, limit %d", tokens, n, tt.limit)
			}
		})
	}
	if _, _, _, err := c.CutResult("completion/complete", json.RawMessage(`{"completion":{"values":["aaaa bbbb cccc"]}}`), 1); !errors.Is(err, ErrNotCuttable) {
		t.Errorf("CutResult(completion over limit) error = %v, want ErrNotCuttable", err)
	}
}

func FuzzCutResult(f *testing.F) {
	c := newCounter(f, "")
	f.Add("hello world\nsecond line\n", uint16(3), "tools/call", false)
	f.Add("日本語 テキスト\n\tindent\n/path\n", uint16(2), "resources/read", true)
	f.Add("a\u00a0b \ud7ff", uint16(1), "prompts/get", false)
	f.Add("x", uint16(0), "tools/call", true)
	f.Fuzz(func(t *testing.T, text string, limit uint16, method string, two bool) {
		lim := int(limit % 512)
		if limit&1 == 1 && text != "" {
			// Long enough that only a prefix is decoded to count it.
			text = strings.Repeat(text, prefixBytes(lim)/len(text)+2)
			lim %= 64
		}
		var res []byte
		var err error
		switch method {
		case "resources/read":
			items := []any{map[string]any{"uri": "file:///a", "text": text}}
			if two {
				items = append(items, map[string]any{"uri": "file:///b", "blob": "AAAA", "mimeType": "image/png"})
			}
			res, err = json.Marshal(map[string]any{"contents": items})
		case "prompts/get":
			res, err = json.Marshal(map[string]any{"description": text, "messages": []any{map[string]any{"role": "user", "content": map[string]any{"type": "text", "text": text}}}})
		default:
			method = "tools/call"
			items := []any{map[string]any{"type": "text", "text": text}}
			if two {
				items = append(items, map[string]any{"type": "text", "text": "second"})
			}
			res, err = json.Marshal(map[string]any{"content": items, "structuredContent": map[string]any{"t": text}})
		}
		if err != nil {
			t.Skip()
		}
		cut, rest, tokens, err := c.CutResult(method, res, lim)
		if err != nil {
			t.Fatalf("CutResult: %v", err)
		}
		if !json.Valid(cut) {
			t.Fatalf("invalid JSON: %s", cut)
		}
		n, _, err := c.CountResult(method, cut, -1)
		if err != nil || n != tokens || n > lim {
			t.Fatalf("tokens %d, recounted %d (%v), limit %d", tokens, n, err, lim)
		}
		if method == "tools/call" && !two {
			var got struct {
				Content []struct{ Text string } `json:"content"`
			}
			if err := json.Unmarshal(cut, &got); err != nil {
				t.Fatal(err)
			}
			kept := ""
			if len(got.Content) > 0 {
				kept = got.Content[0].Text
			}
			// The text as JSON carries it: invalid bytes become U+FFFD.
			var valid string
			if b, err := json.Marshal(text); err != nil || json.Unmarshal(b, &valid) != nil {
				t.Fatalf("round trip of %q: %v", text, err)
			}
			if rest != nil && !strings.HasPrefix(valid, kept) {
				t.Fatalf("kept %q is not a prefix of %q", kept, valid)
			}
			if rest != nil && len(kept) < len(valid) && !strings.HasPrefix(string(rest), valid[len(kept):]) {
				t.Fatalf("rest %q does not continue the text %q after %q", rest, valid, kept)
			}
		}
		// Raw input of any kind must not panic.
		_, _, _, _ = c.CutResult("tools/call", []byte(text), lim)
		_, _, _ = c.CountResult("prompts/get", []byte(text), lim)
	})
}

func FuzzSplitPoints(f *testing.F) {
	c := newCounter(f, "")
	f.Add("a\n\nb x  \n  y }\n/x")
	f.Add("abc123 def\n\u00a0z\n日本 x")
	f.Fuzz(func(t *testing.T, s string) {
		if len(s) > 300 || !utf8.ValidString(s) {
			t.Skip()
		}
		whole := c.CountText(s)
		for p := 1; p < len(s); p++ {
			if splitsAt(s, p) {
				if got := c.CountText(s[:p]) + c.CountText(s[p:]); got != whole {
					t.Fatalf("split at %d of %q: %d tokens, whole %d", p, s, got, whole)
				}
			}
		}
		for _, limit := range []int{0, 1, 5, whole} {
			n, over := c.CountUpTo(s, limit)
			if (whole <= limit) == over || (!over && n != whole) || (over && (n <= limit || n > whole)) {
				t.Fatalf("CountUpTo(%q, %d) = %d, %v; whole %d", s, limit, n, over, whole)
			}
			checkCut(t, c, s, limit)
		}
	})
}

func BenchmarkCountText(b *testing.B) {
	c := newCounter(b, "")
	s := strings.Join(trajectoryOutputs(b), "\n")
	b.SetBytes(int64(len(s)))
	for b.Loop() {
		c.CountText(s)
	}
}

func BenchmarkCountUpTo10MB(b *testing.B) {
	c := newCounter(b, "")
	s := bigText(b, 10<<20)
	b.Run("limit8192", func(b *testing.B) {
		for b.Loop() {
			if _, over := c.CountUpTo(s, 8192); !over {
				b.Fatal("not over")
			}
		}
	})
	b.Run("full", func(b *testing.B) {
		for b.Loop() {
			c.CountText(s)
		}
	})
}

func BenchmarkCutResult10MB(b *testing.B) {
	c := newCounter(b, "")
	res := textResult(b, bigText(b, 10<<20))
	b.Run("count", func(b *testing.B) {
		for b.Loop() {
			if _, over, err := c.CountResult("tools/call", res, 8192); err != nil || !over {
				b.Fatal(err, over)
			}
		}
	})
	b.Run("cut", func(b *testing.B) {
		for b.Loop() {
			if _, _, _, err := c.CutResult("tools/call", res, 8192); err != nil {
				b.Fatal(err)
			}
		}
	})
}
