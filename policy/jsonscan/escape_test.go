package jsonscan

import (
	"encoding/json"
	"fmt"
	"testing"
)

// TestAppendEscapeAsEncodingJSON: every escape AppendEscape decodes, it
// decodes as encoding/json does (each \u of the BMP, surrogate pairs, lone
// surrogates, the short escapes), its length is the escape's, and what is
// no escape is refused with dst as it was.
func TestAppendEscapeAsEncodingJSON(t *testing.T) {
	check := func(s string, wantN int) {
		t.Helper()
		got, n, ok := AppendEscape([]byte("x"), s)
		if wantN == 0 {
			if ok || string(got) != "x" {
				t.Fatalf("AppendEscape(%q) = %q, %d, %v; want it refused", s, got, n, ok)
			}
			return
		}
		var want string
		if err := json.Unmarshal([]byte(`"`+s[:wantN]+`"`), &want); err != nil {
			t.Fatalf("encoding/json on %q: %v", s[:wantN], err)
		}
		if !ok || n != wantN || string(got) != "x"+want {
			t.Fatalf("AppendEscape(%q) = %q, %d, %v; want %q, %d", s, got, n, ok, "x"+want, wantN)
		}
		// []byte decodes as string does.
		if b, bn, bok := AppendEscape(nil, []byte(s)); string(b) != want || bn != n || !bok {
			t.Fatalf("AppendEscape([]byte(%q)) = %q, %d, %v", s, b, bn, bok)
		}
	}
	for c := range 256 {
		s := `\` + string(rune(c))
		if c >= 0x80 {
			s = `\` + string([]byte{byte(c)})
		}
		switch c {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			check(s, 2)
			if ShortEscape(byte(c)) == 0 {
				t.Fatalf("ShortEscape(%#x) = 0", c)
			}
		default:
			check(s, 0)
			if ShortEscape(byte(c)) != 0 {
				t.Fatalf("ShortEscape(%#x) = %q, want 0", c, ShortEscape(byte(c)))
			}
		}
	}
	for r := range 0x10000 {
		check(fmt.Sprintf(`\u%04x tail`, r), 6)
		check(fmt.Sprintf(`\u%04X`, r), 6)
	}
	for _, tc := range []struct {
		s string
		n int
	}{
		{`\ud83d\ude00`, 12}, {`\uD83D\uDE00x`, 12}, {`\ud83d\u0041`, 6}, {`\ud83d`, 6}, {`\ud83d\ude0`, 6},
		{`\ude00\ud83d`, 6}, {`\ud800\udbff`, 6}, {`\udbff\udfff`, 12},
		{`\u12`, 0}, {`\u12g4`, 0}, {`\`, 0}, {``, 0}, {`x\n`, 0}, {`\U0041`, 0},
	} {
		check(tc.s, tc.n)
	}
}
