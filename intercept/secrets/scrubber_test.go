package secrets

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zricethezav/gitleaks/v8/detect"

	"github.com/foldproxy/foldproxy/intercept/secretgen"
	"github.com/foldproxy/foldproxy/policy"
)

// scrubbers caches scrubbers by settings: building one compiles every
// gitleaks rule.
var scrubbers sync.Map

// testScrubber returns a scrubber with the settings p, built once per p.
// A zero Timeout becomes an hour: the default 10 s withholds a result whose
// scan takes longer, which under the race detector on a loaded machine a
// long text's can. Tests of that bound set it and drive time (synctest).
func testScrubber(tb testing.TB, p policy.Scrub) *Scrubber {
	tb.Helper()
	if p.Timeout == 0 {
		p.Timeout = policy.Duration(time.Hour)
	}
	key := fmt.Sprintf("%+v", p)
	if s, ok := scrubbers.Load(key); ok {
		return s.(*Scrubber)
	}
	s, err := NewScrubber(p, nil)
	if err != nil {
		tb.Fatalf("NewScrubber(%+v): %v", p, err)
	}
	scrubbers.Store(key, s)
	return s
}

// filler is innocuous text: code and log lines without secrets.
func filler(n int) string {
	lines := []string{
		"def handle(request, timeout=30):",
		"    return self.client.get(url, params=params)",
		"tests/test_models.py::TestQuery::test_filter PASSED          [ 42%]",
		"drwxr-xr-x  5 root root  4096 Nov 21 05:35 src",
		"    if err != nil { return fmt.Errorf(\"open %s: %w\", path, err) }",
		"commit 3f2a9c1e8b7d6a5f4e3d2c1b0a9f8e7d6c5b4a39",
		"Traceback (most recent call last):",
		"  File \"/usr/lib/python3.11/site-packages/django/db/models/query.py\", line 1234",
	}
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		b.WriteString(lines[i%len(lines)])
		b.WriteByte('\n')
	}
	return b.String()[:n]
}

// windows16 returns every 16-byte piece of s (s itself when shorter).
func windows16(s string) []string {
	if len(s) <= 16 {
		return []string{s}
	}
	out := make([]string, 0, len(s)-15)
	for i := 0; i+16 <= len(s); i++ {
		out = append(out, s[i:i+16])
	}
	return out
}

// leaked returns a 16-byte piece of secret that survives in out, or "".
func leaked(out string, forms ...string) string {
	for _, f := range forms {
		for _, w := range windows16(f) {
			if strings.Contains(out, w) {
				return w
			}
		}
	}
	return ""
}

func jsonEsc(s string) string {
	b, _ := json.Marshal(s)
	return string(b[1 : len(b)-1])
}

// hiEntropy36 is 36 characters random enough for gitleaks' entropy checks;
// a repeated pattern such as "aB3x"×9 is not, and is rightly not reported.
const hiEntropy36 = "A1b2C3d4E5f6G7h8J9k0L1m2N3p4Q5r6S7t8"

func secretsFor(seed uint64) []secretgen.Secret {
	return secretgen.Generate(rand.New(rand.NewPCG(seed, seed*7919+1)))
}

func TestScrubTextSecrets(t *testing.T) {
	ctx := context.Background()
	s := testScrubber(t, policy.Scrub{})
	small := testScrubber(t, policy.Scrub{ChunkBytes: 16 << 10, OverlapBytes: 4 << 10})
	rules := map[string]bool{}
	for seed := uint64(1); seed <= 3; seed++ {
		for _, sec := range secretsFor(seed) {
			rules[sec.RuleID] = true
			esc1 := jsonEsc(sec.Context)
			esc2 := jsonEsc(`{"config": "` + esc1 + `"}`)
			b64 := base64.StdEncoding.EncodeToString([]byte(sec.Context))
			cases := []struct {
				name  string
				s     *Scrubber
				text  string
				forms []string
			}{
				{"plain", s, filler(300) + "\n" + sec.Context + "\n" + filler(300), []string{sec.Value}},
				{"base64", s, filler(200) + "\npayload: " + b64 + "\n" + filler(200), []string{sec.Value, b64}},
				{"escaped-json", s, `{"stdout": "` + esc1 + `\n", "code": 0}`, []string{sec.Value, jsonEsc(sec.Value)}},
				{"double-escaped-json", s, `result: {\"output\": \"` + esc2 + `\"}`, []string{sec.Value, jsonEsc(sec.Value), jsonEsc(jsonEsc(sec.Value))}},
			}
			// Straddle every chunk border of the small scrubber (16 KiB
			// chunks, 12 KiB apart): the secret's middle sits on a border.
			for _, border := range []int{16 << 10, 28 << 10} {
				pre := border - len(sec.Context)/2
				cases = append(cases, struct {
					name  string
					s     *Scrubber
					text  string
					forms []string
				}{fmt.Sprintf("straddle-%d", border), small, filler(pre-1) + "\n" + sec.Context + "\n" + filler(40<<10), []string{sec.Value}})
			}
			for _, c := range cases {
				got, counts, err := c.s.ScrubText(ctx, c.text)
				if err != nil {
					t.Fatalf("seed %d %s %s: %v", seed, sec.RuleID, c.name, err)
				}
				if w := leaked(got, c.forms...); w != "" {
					t.Errorf("seed %d %s %s: %q survived", seed, sec.RuleID, c.name, w)
				}
				if len(counts) == 0 {
					t.Errorf("seed %d %s %s: no redaction counted", seed, sec.RuleID, c.name)
				}
				if c.name == "plain" && counts[sec.RuleID] == 0 {
					t.Errorf("seed %d %s: counted %v, want rule %s", seed, sec.RuleID, counts, sec.RuleID)
				}
			}
		}
	}
	if len(rules) < 30 {
		t.Errorf("only %d secret types tested, want at least 30", len(rules))
	}
}

func TestScrubTextPEMWhole(t *testing.T) {
	s := testScrubber(t, policy.Scrub{})
	for _, sec := range secretsFor(9) {
		if sec.RuleID != "private-key" {
			continue
		}
		text := "cat key.pem\n" + sec.Context + "\n$ "
		got, _, err := s.ScrubText(context.Background(), text)
		if err != nil {
			t.Fatal(err)
		}
		if want := "cat key.pem\n[REDACTED:private-key]\n$ "; got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
}

func TestScrubTextMarker(t *testing.T) {
	s := testScrubber(t, policy.Scrub{})
	tok := "ghp_" + hiEntropy36
	tests := []struct {
		in, want string
	}{
		{"token " + tok + " end", "token [REDACTED:github-pat] end"},
		{tok + "\n" + tok, "[REDACTED:github-pat]\n[REDACTED:github-pat]"},
		{"export STRIPE_KEY=sk_live_4eC39HqLyjWDarjtT1zdp7dc\n", "export STRIPE_KEY=[REDACTED:stripe-access-token]\n"},
	}
	for _, tt := range tests {
		got, counts, err := s.ScrubText(context.Background(), tt.in)
		if err != nil {
			t.Fatal(err)
		}
		if got != tt.want {
			t.Errorf("ScrubText(%q) = %q, want %q", tt.in, got, tt.want)
		}
		if n := strings.Count(tt.want, "[REDACTED:"); sum(counts) != n {
			t.Errorf("ScrubText(%q) counts %v, want %d", tt.in, counts, n)
		}
	}
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func TestScrubTextFalsePositives(t *testing.T) {
	s := testScrubber(t, policy.Scrub{})
	texts := []string{
		"",
		"hello world",
		filler(200 << 10),
		"commit 3f2a9c1e8b7d6a5f4e3d2c1b0a9f8e7d6c5b4a39\nAuthor: Jane <jane@example.com>",
		"id = 0b7e6c2a-1f3d-4e5a-9b8c-7d6e5f4a3b2c",
		"password = os.environ['DB_PASSWORD']",
		"api_key = None",
		"api_key: ${API_KEY}",
		"AWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLE",
		"const token = getToken(request.headers.authorization);",
		"sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
		`{"name": "requests", "version": "2.31.0", "description": "HTTP for Humans"}`,
		"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----",
		"/usr/lib/python3.11/site-packages/setuptools/_distutils/command/build_ext.py",
		base64.StdEncoding.EncodeToString([]byte("just some harmless text that is base64 encoded")),
		`C:\new\temp\key_file.txt`,
	}
	for _, in := range texts {
		got, counts, err := s.ScrubText(context.Background(), in)
		if err != nil {
			t.Fatal(err)
		}
		if got != in || len(counts) != 0 {
			t.Errorf("ScrubText(%.60q) = %.80q, %v; want it unchanged", in, got, counts)
		}
	}
}

func TestScrubJSONSecrets(t *testing.T) {
	ctx := context.Background()
	s := testScrubber(t, policy.Scrub{})
	for _, sec := range secretsFor(4) {
		inner, _ := json.Marshal(map[string]string{"env": sec.Context})
		result, _ := json.Marshal(map[string]any{
			"content": []any{
				map[string]string{"type": "text", "text": "$ env\n" + sec.Context + "\n"},
				map[string]string{"type": "text", "text": string(inner)},
				map[string]any{"type": "resource", "resource": map[string]string{
					"uri": "file:///app/.env", "mimeType": "text/plain",
					"blob": base64.StdEncoding.EncodeToString([]byte("# env\n" + sec.Context + "\n")),
				}},
			},
			"structuredContent": map[string]any{"config": map[string]string{"line": sec.Context}},
			"isError":           false,
		})
		got, counts, err := s.ScrubJSON(ctx, result)
		if err != nil {
			t.Fatalf("%s: %v", sec.RuleID, err)
		}
		if !json.Valid(got) {
			t.Fatalf("%s: output is not valid JSON: %s", sec.RuleID, got)
		}
		if w := leaked(string(got), sec.Value, jsonEsc(sec.Value), jsonEsc(jsonEsc(sec.Value))); w != "" {
			t.Errorf("%s: %q survived", sec.RuleID, w)
		}
		// The blob stays base64 of text, scrubbed.
		var back struct {
			Content []struct {
				Resource struct{ Blob string }
			}
		}
		if err := json.Unmarshal(got, &back); err != nil {
			t.Fatal(err)
		}
		blob, err := base64.StdEncoding.DecodeString(back.Content[2].Resource.Blob)
		if err != nil {
			t.Fatalf("%s: blob is no longer base64: %v", sec.RuleID, err)
		}
		if w := leaked(string(blob), sec.Value); w != "" || !strings.HasPrefix(string(blob), "# env\n") {
			t.Errorf("%s: blob %q: %q survived", sec.RuleID, blob, w)
		}
		if sum(counts) < 4 {
			t.Errorf("%s: counts %v, want at least 4 redactions", sec.RuleID, counts)
		}
	}
}

func TestScrubJSONUnchanged(t *testing.T) {
	s := testScrubber(t, policy.Scrub{})
	ins := []string{
		`{"content":[{"type":"text","text":"ok\n"}],"isError":false}`,
		`{"contents":[{"uri":"file:///a.png","mimeType":"image/png","blob":"iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="}]}`,
		`[1, 2.5, true, null, "x", {"a": {"b": []}}]`,
		`"just a string"`,
		`{}`,
		`[1, -2.5e3, true, null, {}, []]`, // no string at all
	}
	for _, in := range ins {
		raw := json.RawMessage(in)
		got, counts, err := s.ScrubJSON(context.Background(), raw)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(raw) || &got[0] != &raw[0] || counts != nil {
			t.Errorf("ScrubJSON(%s) = %s, %v; want the input slice itself", in, got, counts)
		}
	}
	for _, in := range []string{`{"a": `, `[1, 2`, `{1: 2}`} {
		if _, _, err := s.ScrubJSON(context.Background(), json.RawMessage(in)); err == nil {
			t.Errorf("ScrubJSON(%s) of invalid JSON: want an error", in)
		}
	}
}

func TestScrubJSONKeysAndStructure(t *testing.T) {
	s := testScrubber(t, policy.Scrub{})
	tok := "ghp_" + hiEntropy36
	in := `{"` + tok + `": 1, "list": ["a", "` + tok + `"], "n": 3}`
	got, counts, err := s.ScrubJSON(context.Background(), json.RawMessage(in))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"[REDACTED:github-pat]": 1, "list": ["a", "[REDACTED:github-pat]"], "n": 3}`
	if string(got) != want || counts["github-pat"] != 2 {
		t.Errorf("got %s %v, want %s", got, counts, want)
	}
}

// TestEngineMatchesGitleaks checks the windowed engine against gitleaks'
// own detector run over whole texts: on real tool output with planted
// secrets, everything gitleaks finds, the engine finds.
func TestEngineMatchesGitleaks(t *testing.T) {
	outs := loadOutputs(t)
	s := testScrubber(t, policy.Scrub{})
	cfg, err := loadGitleaksConfig("")
	if err != nil {
		t.Fatal(err)
	}
	ref := detect.NewDetector(cfg)
	ref.MaxDecodeDepth = decodeDepth
	ref.IgnoreGitleaksAllow = true
	secrets := secretsFor(5)
	rng := rand.New(rand.NewPCG(5, 5))
	checked := 0
	for i, out := range outs {
		if len(out) > 64<<10 || i%3 != 0 {
			continue
		}
		sec := secrets[rng.IntN(len(secrets))]
		text := out
		if i%2 == 0 {
			cut := rng.IntN(len(out) + 1)
			text = out[:cut] + "\n" + sec.Context + "\n" + out[cut:]
		}
		text += "\n"
		want := mergeFound(mustFind(t, func(ctx context.Context, s string) ([]found, error) {
			return detectWindow(ctx, ref, nil, s, [2]int{0, len(s)}, false)
		}, text))
		got := mergeFound(mustFind(t, s.eng.findAll, text))
		for _, w := range want {
			if !covered(got, w) {
				t.Errorf("output %d: gitleaks found %s at [%d,%d) %.40q; the engine did not", i, w.rule, w.start, w.end, text[w.start:w.end])
			}
		}
		checked++
	}
	if checked == 0 {
		t.Fatal("no output checked")
	}
}

func mustFind(t *testing.T, f func(context.Context, string) ([]found, error), text string) []found {
	t.Helper()
	fs, err := f(context.Background(), text)
	if err != nil {
		t.Fatal(err)
	}
	return fs
}

func covered(spans []found, f found) bool {
	for _, s := range spans {
		if s.start <= f.start && f.end <= s.end {
			return true
		}
	}
	return false
}

func TestUnescapeView(t *testing.T) {
	tests := []struct {
		raw, text string
		// sub of text and the raw range it must map to
		sub, rawSub string
	}{
		{`a\nb`, "a\nb", "\nb", `\nb`},
		{`x\"tok\"y`, `x"tok"y`, `"tok"`, `\"tok\"`},
		{`\u00e9t\u00e9`, "été", "été", `\u00e9t\u00e9`},
		{`\ud83d\ude00!`, "😀!", "😀", `\ud83d\ude00`},
		{`p\\n`, `p\n`, `\n`, `\\n`},
		{`bad \x and \u12`, `bad \x and \u12`, "", ""},
	}
	for _, tt := range tests {
		v, ok := unescapeView(&view{text: tt.raw}, true)
		if tt.sub == "" {
			if ok {
				t.Errorf("unescapeView(%q) = %q, want no view", tt.raw, v.text)
			}
			continue
		}
		if !ok || v.text != tt.text {
			t.Fatalf("unescapeView(%q) = %v, want %q", tt.raw, v, tt.text)
		}
		i := strings.Index(v.text, tt.sub)
		a, b := v.toRoot(i, i+len(tt.sub))
		if got := tt.raw[a:b]; got != tt.rawSub {
			t.Errorf("%q: %q maps to %q, want %q", tt.raw, tt.sub, got, tt.rawSub)
		}
	}
}

func TestMergeFound(t *testing.T) {
	got := mergeFound([]found{
		{start: 10, end: 20, rule: "generic-api-key"},
		{start: 0, end: 5, rule: "a"},
		{start: 12, end: 22, rule: "github-pat"},
		{start: 5, end: 8, rule: "b"},
	})
	want := []found{{start: 0, end: 5, rule: "a"}, {start: 5, end: 8, rule: "b"}, {start: 10, end: 22, rule: "github-pat"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("mergeFound = %v, want %v", got, want)
	}
}

// TestSplitPoint checks where a long text is cut into pieces: never
// inside a run a stretched rule can run through (a long token, a long
// line for curl's rules), so that no two pieces walk the same run.
func TestSplitPoint(t *testing.T) {
	e := testScrubber(t, policy.Scrub{}).eng
	tests := []struct {
		text string
		from int
		want int
	}{
		{"return x;\n  y := 1", 1, 9},                 // between ";" and "\n"
		{"return x;\n  y := 1", 10, 10},               // "\n" then " "
		{strings.Repeat("A", 100), 3, 100},            // one token: no cut
		{"curl -H 'x: y' https://a.b/c d e f", 5, 34}, // a curl line is one run
		{"eyJ" + strings.Repeat("abc", 30) + ".\n\n", 5, 94},
	}
	for _, tt := range tests {
		if got := e.splitPoint(tt.text, tt.from); got != tt.want {
			t.Errorf("splitPoint(%.20q, %d) = %d, want %d", tt.text, tt.from, got, tt.want)
		}
	}
}

func TestNewScrubberConfig(t *testing.T) {
	acme := "acme_tok_" + "k3j9x0q2m7v5w8r1t4y6u0p2a9s8d7f6"
	ghp := "ghp_" + hiEntropy36
	example := "ghp_EXAMPLE0123456789EXAMPLE0123456789ab"
	twilio := "SK" + strings.Repeat("0a1b2c3d", 4)
	tests := []struct {
		file    string
		wantErr string // substring; "" for success
		// found and kept: texts that must be redacted and kept unchanged.
		found, kept []string
	}{
		{file: "", found: []string{ghp, example, twilio}, kept: []string{acme}},
		{file: "testdata/gitleaks-extend.toml", found: []string{acme, ghp}, kept: []string{example, twilio}},
		{file: "testdata/gitleaks-standalone.toml", found: []string{acme, ghp, twilio}, kept: []string{"password = fixturefixture9Kq2Zr8Wx"}},
		{file: "testdata/gitleaks-badregex.toml", wantErr: "testdata/gitleaks-badregex.toml"},
		{file: "testdata/gitleaks-badsyntax.toml", wantErr: "testdata/gitleaks-badsyntax.toml"},
		{file: "testdata/gitleaks-badtarget.toml", wantErr: `"no-such-rule"`},
		{file: "testdata/no-such-file.toml", wantErr: "testdata/no-such-file.toml"},
	}
	for _, tt := range tests {
		s, err := NewScrubber(policy.Scrub{GitleaksConfig: tt.file}, nil)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("NewScrubber(%s) error = %v, want one naming %s", tt.file, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatalf("NewScrubber(%s): %v", tt.file, err)
		}
		for _, f := range tt.found {
			if got, _, _ := s.ScrubText(context.Background(), "x "+f+" y\n"); strings.Contains(got, f) {
				t.Errorf("%s: %q not redacted: %q", tt.file, f, got)
			}
		}
		for _, k := range tt.kept {
			if got, _, _ := s.ScrubText(context.Background(), "x "+k+" y\n"); !strings.Contains(got, k) {
				t.Errorf("%s: %q redacted: %q", tt.file, k, got)
			}
		}
	}
}

func TestNewScrubberSettings(t *testing.T) {
	tests := []struct {
		p              policy.Scrub
		wantErr        bool
		timeout        time.Duration
		chunk, overlap int
	}{
		{p: policy.Scrub{}, timeout: 10 * time.Second, chunk: 64 << 10, overlap: 4 << 10},
		{p: policy.Scrub{ChunkBytes: 1000, OverlapBytes: 100, Timeout: policy.Duration(time.Second)}, timeout: time.Second, chunk: 8 << 10, overlap: 4 << 10},
		{p: policy.Scrub{ChunkBytes: -1}, wantErr: true},
		{p: policy.Scrub{Timeout: policy.Duration(-time.Second)}, wantErr: true},
	}
	for _, tt := range tests {
		s, err := NewScrubber(tt.p, nil)
		if (err != nil) != tt.wantErr {
			t.Fatalf("NewScrubber(%+v) error = %v, want error %v", tt.p, err, tt.wantErr)
		}
		if err != nil {
			continue
		}
		if s.timeout != tt.timeout || s.chunk != tt.chunk || s.overlap != tt.overlap {
			t.Errorf("NewScrubber(%+v) = timeout %s chunk %d overlap %d, want %s %d %d", tt.p, s.timeout, s.chunk, s.overlap, tt.timeout, tt.chunk, tt.overlap)
		}
	}
}

func TestScrubTextCanceled(t *testing.T) {
	s := testScrubber(t, policy.Scrub{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, _, err := s.ScrubText(ctx, "hello "+filler(1000))
	var se *ScanError
	if !errors.As(err, &se) || !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want a *ScanError wrapping context.Canceled", err)
	}
}

func TestScrubConcurrent(t *testing.T) {
	s := testScrubber(t, policy.Scrub{ChunkBytes: 16 << 10})
	secs := secretsFor(11)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sec := secs[i*5%len(secs)]
			text := filler(20<<10) + sec.Context + "\n" + filler(30<<10)
			got, _, err := s.ScrubText(context.Background(), text)
			if err != nil {
				t.Error(err)
				return
			}
			if w := leaked(got, sec.Value); w != "" {
				t.Errorf("%s: %q survived", sec.RuleID, w)
			}
		}()
	}
	wg.Wait()
}

// TestScrubTrajectories runs the scrubber over real tool output: no
// errors, and every redaction accounted for.
func TestScrubTrajectories(t *testing.T) {
	outs := loadOutputs(t)
	s := testScrubber(t, policy.Scrub{})
	total := map[string]int{}
	for _, o := range outs {
		got, counts, err := s.ScrubText(context.Background(), o)
		if err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(got, "[REDACTED:") - strings.Count(o, "[REDACTED:"); n != sum(counts) {
			t.Errorf("%d markers, counts say %d", n, sum(counts))
		}
		for k, v := range counts {
			total[k] += v
		}
	}
	t.Logf("redactions in %d real outputs: %v", len(outs), total)
}
