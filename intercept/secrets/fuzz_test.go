package secrets

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	"github.com/foldproxy/foldproxy/policy"
)

// fuzzSecrets are planted into fuzz inputs; none may survive.
func fuzzSecrets() []string {
	var out []string
	for _, s := range secretsFor(42) {
		out = append(out, s.Context)
	}
	return out
}

func FuzzScrubText(f *testing.F) {
	secrets := fuzzSecrets()
	f.Add("hello", uint8(0), uint8(0))
	f.Add(`{"a": "b\n\"c\""}`, uint8(3), uint8(1))
	f.Add(`\u00e9\ud83d\ude00 \\n %41%42 U+0041 `, uint8(7), uint8(2))
	f.Add(base64.StdEncoding.EncodeToString([]byte("api_key = 1234")), uint8(12), uint8(3))
	s := testScrubber(f, policy.Scrub{ChunkBytes: 8 << 10})
	f.Fuzz(func(t *testing.T, text string, which, mode uint8) {
		sec := secrets[int(which)%len(secrets)]
		var planted string
		switch mode % 4 {
		case 0:
			planted = text
			sec = ""
		case 1:
			planted = text + "\n" + sec + "\n" + text
		case 2:
			planted = `{"out": "` + jsonEsc(text+"\n"+sec) + `"}`
		case 3:
			planted = text + "\n" + base64.StdEncoding.EncodeToString([]byte(sec)) + "\n"
		}
		got, counts, err := s.ScrubText(context.Background(), planted)
		if err != nil {
			t.Fatalf("ScrubText: %v", err)
		}
		if sec != "" && len(counts) == 0 {
			t.Fatalf("planted secret not counted")
		}
		if sec != "" && mode%4 == 1 {
			if w := leaked(got, secretValue(sec)); w != "" {
				t.Fatalf("%q survived in %q", w, got)
			}
		}
	})
}

// secretValue returns the secret of a planted context line: the value of
// the generated secret whose context it is.
func secretValue(context string) string {
	for _, s := range secretsFor(42) {
		if s.Context == context {
			return s.Value
		}
	}
	return context
}

func FuzzScrubJSON(f *testing.F) {
	secrets := fuzzSecrets()
	f.Add(`{"content":[{"type":"text","text":"hi"}]}`, uint8(0))
	f.Add(`[1,"a\\u0041",{"blob":"aGVsbG8gd29ybGQgaGVsbG8="}]`, uint8(5))
	f.Add(`"\ud800"`, uint8(9))
	f.Add(`{"k\"ey": {"data": "AAAAAAAAAAAAAAAAAAAAAA=="}}`, uint8(2))
	s := testScrubber(f, policy.Scrub{ChunkBytes: 8 << 10})
	f.Fuzz(func(t *testing.T, doc string, which uint8) {
		if !json.Valid([]byte(doc)) {
			if _, _, err := s.ScrubJSON(context.Background(), json.RawMessage(doc)); err == nil && len(strings.TrimSpace(doc)) > 0 {
				t.Fatalf("invalid JSON accepted")
			}
			return
		}
		sec := secrets[int(which)%len(secrets)]
		wrapped, _ := json.Marshal(map[string]any{"doc": json.RawMessage(doc), "text": sec, "nested": "{\"x\": " + string(mustJSON(sec)) + "}"})
		for _, in := range [][]byte{[]byte(doc), wrapped} {
			got, _, err := s.ScrubJSON(context.Background(), in)
			if err != nil {
				t.Fatalf("ScrubJSON: %v", err)
			}
			if !json.Valid(got) {
				t.Fatalf("ScrubJSON(%s) = %s: not valid JSON", in, got)
			}
		}
		got, _, _ := s.ScrubJSON(context.Background(), wrapped)
		v := secretValue(sec)
		if w := leaked(string(got), v, jsonEsc(v), jsonEsc(jsonEsc(v))); w != "" {
			t.Fatalf("%q survived in %s", w, got)
		}
	})
}

func mustJSON(s string) []byte {
	b, _ := json.Marshal(s)
	return b
}
