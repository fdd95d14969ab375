package secrets

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zricethezav/gitleaks/v8/detect"

	"github.com/foldproxy/foldproxy/intercept/secretgen"
	"github.com/foldproxy/foldproxy/policy"
)

// rsa8192TestKey is a real RSA-8192 private key (PKCS#1, 6,4 KB of PEM)
// made with openssl for these tests and used nowhere else.
const rsa8192TestKey = "testdata/rsa8192-test-key.pem"

// refDetector is gitleaks' own detector with its default rules, decoding
// as the scrubber does: the control of the differential tests.
var refDetector = sync.OnceValue(func() *detect.Detector {
	cfg, err := loadGitleaksConfig("")
	if err != nil {
		panic(err)
	}
	d := detect.NewDetector(cfg)
	d.MaxDecodeDepth = decodeDepth
	d.IgnoreGitleaksAllow = true
	return d
})

// testKeyPEM returns the PEM block of the shipped RSA-8192 test key.
func testKeyPEM(tb testing.TB) string {
	tb.Helper()
	b, err := os.ReadFile(rsa8192TestKey)
	if err != nil {
		tb.Fatal(err)
	}
	s := string(b)
	i := strings.Index(s, "-----BEGIN")
	if i < 0 {
		tb.Fatalf("%s holds no PEM block", rsa8192TestKey)
	}
	return strings.TrimSpace(s[i:])
}

// diffSecrets are planted in the differential fuzz inputs: every
// secretgen family, the long one included, and the real RSA-8192 key.
func diffSecrets(tb testing.TB) []string {
	var out []string
	rng := rand.New(rand.NewPCG(77, 78))
	for _, s := range append(secretgen.Generate(rng), secretgen.Long(rng)...) {
		out = append(out, s.Context)
	}
	return append(out, testKeyPEM(tb))
}

// checkDifferential scrubs text as a text and as a tool result and fails
// when any secret gitleaks' own detector finds in text survives in either.
func checkDifferential(t *testing.T, s *Scrubber, text string) {
	t.Helper()
	ctx := context.Background()
	var secrets []string
	for _, f := range refDetector().DetectString(text) {
		if sec := strings.TrimSpace(f.Secret); len(sec) >= 8 {
			secrets = append(secrets, sec)
		}
	}
	got, _, err := s.ScrubText(ctx, text)
	if err != nil {
		t.Fatalf("ScrubText: %v", err)
	}
	res, _ := json.Marshal(map[string]any{"content": []map[string]string{{"type": "text", "text": text}}})
	gotJSON, _, err := s.ScrubJSON(ctx, res)
	if err != nil {
		t.Fatalf("ScrubJSON: %v", err)
	}
	var r struct {
		Content []struct{ Text string } `json:"content"`
	}
	if err := json.Unmarshal(gotJSON, &r); err != nil || len(r.Content) != 1 {
		t.Fatalf("ScrubJSON output %.80s: %v", gotJSON, err)
	}
	for _, sec := range secrets {
		for name, out := range map[string]string{"text": got, "json": r.Content[0].Text} {
			if strings.Contains(out, sec) {
				t.Errorf("%s: gitleaks finds %.40q (%d bytes); it survived scrubbing", name, sec, len(sec))
			}
		}
	}
}

// FuzzScrubDifferential plants secrets (long private keys and JWTs among
// them) into fuzzed text at fuzzed places, around piece borders too, and
// checks that nothing gitleaks' detector finds in the input survives.
//
//	go test -tags gore2regex ./intercept/secrets -run '^$' -fuzz FuzzScrubDifferential -fuzztime 20s
func FuzzScrubDifferential(f *testing.F) {
	secrets := diffSecrets(f)
	// The long family and the real key (the last six), each in another
	// mode and place, some across a piece border of the small scrubber
	// (8 KiB pieces); and a few of the others.
	last := len(secrets) - 1
	f.Add("log line\n", uint16(last), uint16(0), uint8(0))
	f.Add("x = 1;\n", uint16(last), uint16(5000), uint8(1))
	f.Add(strings.Repeat("a", 300), uint16(last-1), uint16(7000), uint8(2))
	f.Add("{\"k\": \"v\"}\n", uint16(last-2), uint16(3), uint8(3))
	f.Add("ok\n", uint16(last-3), uint16(6000), uint8(0))
	f.Add("", uint16(last-4), uint16(9000), uint8(1))
	f.Add("id: ", uint16(last-5), uint16(8000), uint8(3))
	for _, i := range []int{0, 1, 18, 30} {
		f.Add("log line\n", uint16(i), uint16(100*i), uint8(i))
	}
	small := testScrubber(f, policy.Scrub{ChunkBytes: 8 << 10})
	f.Fuzz(func(t *testing.T, text string, which, at uint16, mode uint8) {
		sec := secrets[int(which)%len(secrets)]
		var b strings.Builder
		for b.Len() < int(at) {
			if text == "" {
				b.WriteString(filler(int(at)))
				break
			}
			b.WriteString(text)
		}
		pre := b.String()
		pre = pre[:min(len(pre), int(at))]
		var in string
		switch mode % 4 {
		case 0: // on its own lines
			in = pre + "\n" + sec + "\n" + text
		case 1: // two of them, glued to the text
			in = pre + sec + text + sec
		case 2: // in a JSON document inside the text
			in = pre + `{"out": "` + jsonEsc(sec) + `"}` + text
		case 3: // mid-line, after a key
			in = pre + " secret: " + sec + " " + text
		}
		checkDifferential(t, small, in)
	})
}

// TestScrubDifferentialLong is the differential check on the long family
// at fixed places: the start of a text, and across the border of pieces of
// the default size (64 KiB) and of small ones (8 KiB).
func TestScrubDifferentialLong(t *testing.T) {
	var secrets []string
	for _, s := range secretgen.Long(rand.New(rand.NewPCG(1, 1))) {
		secrets = append(secrets, s.Context)
	}
	secrets = append(secrets, testKeyPEM(t))
	def, small := testScrubber(t, policy.Scrub{}), testScrubber(t, policy.Scrub{ChunkBytes: 8 << 10})
	for i, sec := range secrets {
		for _, c := range []struct {
			name string
			s    *Scrubber
			at   int
		}{
			{"start", def, 0},
			{"across-64KiB", def, 64<<10 - len(sec)/2},
			{"across-8KiB", small, 8<<10 - len(sec)/2},
			{"after-8KiB", small, 9 << 10},
		} {
			t.Run(fmt.Sprintf("%d/%s", i, c.name), func(t *testing.T) {
				text := filler(c.at) + "\n" + sec + "\n" + filler(10<<10)
				if len(refDetector().DetectString(text)) == 0 {
					t.Fatal("gitleaks finds nothing: the test plants no secret")
				}
				checkDifferential(t, c.s, text)
			})
		}
	}
}

// TestScrubWorkLinear checks, without timing anything, that scrubbing text
// without spaces or with a pattern repeated costs work in proportion to
// its length: no rule runs over more than twice the text's bytes in all,
// however many of its keywords the text holds (a window per keyword
// stretched through one long run would make it quadratic). The texts hold
// keywords of stretched rules ("ey", "key", "token") and of whole ones
// ("-----BEGIN") everywhere.
func TestScrubWorkLinear(t *testing.T) {
	// Work, not time, is measured: the deadline is out of the way.
	base := testScrubber(t, policy.Scrub{ChunkBytes: 8 << 10, Timeout: policy.Duration(time.Hour)})
	for name, text := range map[string]string{
		"space-free":  strings.Repeat("eyJhbGciOiJIUzI1NiJ9key=tokenAB12", 2<<10),
		"repetitive":  strings.Repeat("api_key = ", 8<<10),
		"pem-headers": strings.Repeat("-----BEGIN RSA PRIVATE KEY-----", 2<<10),
		"one-line":    strings.Repeat("curl -H 'Authorization: Bearer x' ", 2<<10),
	} {
		t.Run(name, func(t *testing.T) {
			eng := *base.eng
			var mu sync.Mutex
			work := map[int]int{}
			eng.onWindow = func(rule, n int) {
				mu.Lock()
				work[rule] += n
				mu.Unlock()
			}
			s := *base
			s.eng = &eng
			s.find = eng.find
			if _, _, err := s.ScrubText(context.Background(), text); err != nil {
				t.Fatal(err)
			}
			if len(work) == 0 {
				t.Fatal("no rule ran: the text holds no keyword")
			}
			for ri, n := range work {
				if n > 2*len(text) {
					t.Errorf("rule %s ran over %d bytes of a %d-byte text", eng.rules[ri].id, n, len(text))
				}
			}
		})
	}
}
