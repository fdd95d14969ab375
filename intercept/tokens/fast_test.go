package tokens

import (
	"fmt"
	"hash/maphash"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/dlclark/regexp2/v2"

	"github.com/foldproxy/foldproxy/policy"
)

// The split patterns of the library (tiktoken-go/tokenizer v0.10.0,
// codec/o200k_base.go and codec/cl100k_base.go), compiled here to check the
// hand-written splitter piece by piece.
var splitPatterns = map[string]string{
	"o200k_base":  `[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`,
	"cl100k_base": `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`,
}

// exactCase holds what the exactness tests need for one encoding: the fast
// counter, both ways it counts a piece its cache misses (fast merges with
// the ranks, libMiss asks the library's Count as it does before it loads
// them), a counter that always asks the library, and the library's split
// pattern.
type exactCase struct {
	enc                string
	fast, libMiss, lib *Counter
	re                 *regexp2.Regexp
}

func exactCases(tb testing.TB) []exactCase {
	tb.Helper()
	var cs []exactCase
	for _, enc := range policy.Encodings {
		lib := newCounter(tb, enc)
		lib.lib = true
		pat, ok := splitPatterns[enc]
		if !ok {
			tb.Fatalf("no split pattern for %s", enc)
		}
		fast := newCounter(tb, enc)
		fast.rankTable()
		fast.fast.libLeft.Store(0)
		libMiss := newCounter(tb, enc)
		libMiss.fast.libOnly = true
		libMiss.fast.libLeft.Store(math.MaxInt64 / 2)
		cs = append(cs, exactCase{enc: enc, fast: fast, libMiss: libMiss, lib: lib, re: regexp2.MustCompile(pat, regexp2.None)})
	}
	return cs
}

// libPieces returns the pieces of s by the library's pattern.
func (ec exactCase) libPieces(tb testing.TB, s string) []string {
	tb.Helper()
	var ps []string
	m, err := ec.re.FindStringMatch(s)
	for ; m != nil && err == nil; m, err = ec.re.FindNextMatch(m) {
		ps = append(ps, m.String())
	}
	if err != nil {
		tb.Fatalf("%s: split %q: %v", ec.enc, s, err)
	}
	return ps
}

// fastPieces returns the pieces of the ASCII text s by the splitter, but
// DEL, which the library skips.
func (ec exactCase) fastPieces(s string) []string {
	var ps []string
	for p := 0; p < len(s); {
		e := ec.fast.fast.split.next(s, p)
		if s[p:e] != "\x7f" {
			ps = append(ps, s[p:e])
		}
		p = e
	}
	return ps
}

// check compares the fast path with the library on s: the count, the
// tokens, and for ASCII text the pieces.
func (ec exactCase) check(tb testing.TB, s string) {
	tb.Helper()
	want := ec.lib.CountText(s)
	if got := ec.fast.CountText(s); got != want {
		tb.Fatalf("%s: CountText(%q) = %d, library %d", ec.enc, clip(s), got, want)
	}
	if got := ec.libMiss.CountText(s); got != want {
		tb.Fatalf("%s: CountText(%q), pieces counted by the library, = %d, library %d", ec.enc, clip(s), got, want)
	}
	if allASCII(s) {
		if got, want := ec.fastPieces(s), ec.libPieces(tb, s); !slices.Equal(got, want) {
			tb.Fatalf("%s: pieces of %q:\n got %q\nwant %q", ec.enc, clip(s), got, want)
		}
	}
	_, wantToks, wantErr := ec.lib.codec.Encode(s)
	gotToks, err := ec.fast.encodeFast(s)
	if (err != nil) != (wantErr != nil) || !slices.Equal(gotToks, wantToks) {
		tb.Fatalf("%s: tokens of %q:\n got %q, %v\nwant %q, %v", ec.enc, clip(s), gotToks, err, wantToks, wantErr)
	}
}

func clip(s string) string {
	if len(s) > 300 {
		return s[:300] + fmt.Sprintf("...(%d bytes)", len(s))
	}
	return s
}

func allASCII(s string) bool { return indexNonASCII(s, 0) < 0 }

// trickyTexts are inputs at the edges of the split patterns.
var trickyTexts = []string{
	"",
	"a", "A", "'", " ", "\n", "\t", "/", "0",
	// Contractions, in both cases, alone, after words and in the middle.
	"'s", "'S", "'t", "'re", "'RE", "'rE", "'ve", "'Ve", "'m", "'ll", "'lL", "'LL", "'d", "'D",
	"it's", "IT'S", "It'S", "don't", "DON'T", "we're", "they've", "I'm", "you'll", "he'd",
	"'sup", "'Sup", "'store", "'tis", "'r", "'l", "'v", "'x", "''s", "x''s", "a'", "a'l", "a're'", "A'LLx",
	"rock'n'roll", "o'clock", "'s's's", "'ss", "HELLO'S", "helloWorld's", "HTTPServer's", "x 's", "1's", ".'s",
	// Letters by case.
	"HelloWorld", "helloWORLD", "HELLOworld", "XMLHttpRequest", "getHTTPResponseCode", "aBcDeF", "ABC", "abc",
	// Digit runs of one to seven digits, next to letters and spaces.
	"1", "12", "123", "1234", "12345", "123456", "1234567", "a1234567b", " 1234567 ", "x1 y22 z333 w4444",
	"3.14159", "1,000,000", "0x1F2e3D", "v1.2.3-rc4",
	// White space runs.
	"  \n\n  ", "  \n\n  x", "a  \n\n  b", "   ", "a   ", "a   b", "a \tb", "a\t\tb", "\t\tx", " \tx", "\t x",
	"trailing   ", "trailing \t ", "\n", "\n\n", "\n \n", " \n", "\n ", "\n  x", "\n\tx", "x\n", "x \n", "x\t\n",
	"\r\n", "a\r\nb", "\r\n\r\n", "  \r\n  x", "\r", "\r\r\n\n", "\v\f", "a\v\fb", " \v x", "\f\n",
	// Punctuation runs followed by line breaks and slashes.
	"}\n", "}\n\n", "}\n/x", "}\n/\n//x", "};\r\n", "...\n\n\nfoo", " ...\n", " //\n/", "\n/x", "\n//", "/\n/", "x/\n/y",
	"!=\n\n", "a) {\n\treturn\n}\n", " ->\n", " (\n", "( x", " (x", "((x", "\t(x", "\t.", " .x", "  .x", "\n.x",
	// Control characters are punctuation.
	"\x00", "a\x00b", "\x00\n", " \x01x", "\x7f\x7f", "\x1c\x1d\x1e\x1f", " \x1c", "\x1c ",
	// Code and prose.
	"func (c *Counter) CountText(s string) int {\n\tif s == \"\" {\n\t\treturn 0\n\t}\n}\n",
	"diff --git a/x.go b/x.go\n--- a/x.go\n+++ b/x.go\n@@ -1,3 +1,4 @@\n-old\n+new\n",
	"    at com.example.Foo.bar(Foo.java:42)\n    at com.example.Main.main(Main.java:7)\n",
	"Traceback (most recent call last):\n  File \"/usr/lib/python3.11/x.py\", line 12, in <module>\n",
	"{\"key\": [1, 2, 3], \"nested\": {\"a\": null}}",
	"https://example.com/path/to/page?query=value&x=1#frag",
	"I'd say it's 9 o'clock; we've got 12345 items, they'll arrive.",
	// Non-ASCII, handled by the library between split points.
	"résumé", "naïve café\nçava 42", "a\u00a0b", "x \u00a0 y", "a\u3000b c", "日本語のテキスト", "emoji 😀 here",
	"tree\n├── a\n│   └── b\n", "em—dash – en", "\u0085x\u0085", "x\n\u2028y", "'ſ", "Straße's", "ÀB'S",
	"\xff", "a\xffb", "\xe2\x82", "x \xe2\x82 y", "\xff\n\xfe", "ok\xc3(", "\u00a0\n x",
}

func TestFastCountTricky(t *testing.T) {
	for _, ec := range exactCases(t) {
		for _, s := range trickyTexts {
			ec.check(t, s)
		}
		// Every ASCII byte, alone and around others.
		for b := range 128 {
			for _, s := range []string{string(rune(b)), "a" + string(rune(b)) + "b", " " + string(rune(b)) + "1", "'" + string(rune(b)), string(rune(b)) + "\n/"} {
				ec.check(t, s)
			}
		}
	}
}

// TestFastCountTrajectories compares the fast count with the library's on
// every step output of the trajectory file.
func TestFastCountTrajectories(t *testing.T) {
	outs := trajectoryOutputs(t)
	nonASCII := 0
	for _, s := range outs {
		if !allASCII(s) {
			nonASCII++
		}
	}
	t.Logf("%d step outputs, %d with non-ASCII bytes", len(outs), nonASCII)
	for _, ec := range exactCases(t) {
		for _, s := range outs {
			ec.check(t, s)
		}
	}
}

// TestFastCountConcurrent counts from many goroutines at once with one
// Counter (run with -race).
func TestFastCountConcurrent(t *testing.T) {
	c := newCounter(t, "")
	lib := newCounter(t, "")
	lib.lib = true
	texts := trickyTexts[:60]
	want := make([]int, len(texts))
	for i, s := range texts {
		want[i] = lib.CountText(s)
	}
	done := make(chan error)
	for g := range 8 {
		go func() {
			var err error
			for i := range 200 {
				k := (i + g) % len(texts)
				if got := c.CountText(texts[k]); got != want[k] && err == nil {
					err = fmt.Errorf("CountText(%q) = %d, want %d", texts[k], got, want[k])
				}
			}
			done <- err
		}()
	}
	for range 8 {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}

// TestPieceCache fills the piece cache far past its size with pieces
// whose counts are known, and checks that a lookup returns the count of
// the very piece asked for or nothing, never another piece's, and that the
// last piece put is found.
func TestPieceCache(t *testing.T) {
	pc := &pieceCache{seed: maphash.MakeSeed()}
	rng := rand.New(rand.NewPCG(1, 2))
	want := map[string]int{}
	var order []string
	for j := range 8 * shortBuckets {
		n := 2 + rng.IntN(maxCachedPiece-1)
		if j%16 == 0 {
			n = maxCachedPiece + 1 + rng.IntN(maxHugePiece-maxCachedPiece)
		}
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.IntN(128))
		}
		s := string(b)
		// A piece has one count, at most its length.
		k := 1 + int(maphash.String(pc.seed, s)%uint64(n))
		want[s] = k
		order = append(order, s)
		if n <= maxPacked {
			pc.putShort(shortKey(s, 0, n), k)
			if got, ok := pc.getShort(shortKey(s, 0, n)); !ok || got != k {
				t.Fatalf("getShort(%q) just after put = %d, %v; want %d", s, got, ok, k)
			}
		} else {
			_, h, _ := pc.getLong(s)
			pc.putLong(h, s, k)
			if got, _, ok := pc.getLong(s); !ok || got != k {
				t.Fatalf("getLong(%q) just after put = %d, %v; want %d", s, got, ok, k)
			}
		}
	}
	found := 0
	for _, s := range order {
		var got int
		var ok bool
		if len(s) <= maxPacked {
			got, ok = pc.getShort(shortKey(s, 0, len(s)))
		} else {
			got, _, ok = pc.getLong(s)
		}
		if ok {
			found++
			if got != want[s] {
				t.Fatalf("lookup of %q = %d, want %d", s, got, want[s])
			}
		}
	}
	if found == 0 || found > cacheWays*(shortBuckets+longBuckets+hugeBuckets) {
		t.Fatalf("%d of %d pieces found after filling; want some, at most the slots", found, len(order))
	}
}

// TestPieceCacheConcurrent has goroutines put and get pieces that share
// a few buckets at once (run with -race): a lookup returns the count of
// the piece asked for or nothing, whatever the writers do.
func TestPieceCacheConcurrent(t *testing.T) {
	pc := &pieceCache{seed: maphash.MakeSeed()}
	count := func(s string) int { return 1 + int(maphash.String(pc.seed, s)%uint64(len(s))) }
	// Pieces that fill a few short buckets many times over, and long
	// pieces in as many long buckets.
	var short, long []string
	for i := 0; len(short) < 64; i++ {
		s := fmt.Sprintf("p%06d", i)
		if k := shortKey(s, 0, len(s)); k*hashMul>>(64-shortBits) < 4 {
			short = append(short, s)
		}
	}
	for i := 0; len(long) < 64; i++ {
		s := fmt.Sprintf("a long piece %06d", i)
		if h := pc.longHash(s); h/2%longBuckets < 4 {
			long = append(long, s)
		}
	}
	errs := make(chan error, 8)
	for g := range 8 {
		go func() {
			for i := range 2000 {
				s := short[(i*7+g)%len(short)]
				k := shortKey(s, 0, len(s))
				if n, ok := pc.getShort(k); !ok {
					pc.putShort(k, count(s))
				} else if n != count(s) {
					errs <- fmt.Errorf("getShort(%q) = %d, want %d", s, n, count(s))
					return
				}
				l := long[(i*5+g)%len(long)]
				if n, h, ok := pc.getLong(l); !ok {
					pc.putLong(h, l, count(l))
				} else if n != count(l) {
					errs <- fmt.Errorf("getLong(%q) = %d, want %d", l, n, count(l))
					return
				}
			}
			errs <- nil
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// TestRanksLoadedLate: until libPieces pieces have missed the cache, the
// library counts them and the merge ranks are not loaded (unless another
// Counter of the encoding loaded them, which this one then uses); after
// that, the next miss loads them.
func TestRanksLoadedLate(t *testing.T) {
	c := newCounter(t, "cl100k_base")
	wasLoaded := loadedRanks(c.Encoding()) != nil
	c.fast.libLeft.Store(10)
	if got := c.CountText("alpha beta gamma delta"); got != 4 {
		t.Fatalf("CountText = %d, want 4", got)
	}
	ranks, left := c.fast.ranks.Load(), c.fast.libLeft.Load()
	switch {
	case wasLoaded && (ranks == nil || left != 10):
		t.Fatalf("ranks already loaded: the counter has ranks %v and %d library counts left, want them and 10", ranks != nil, left)
	case !wasLoaded && (ranks != nil || left != 6):
		t.Fatalf("ranks not loaded yet: the counter has ranks %v and %d library counts left, want none and 6", ranks != nil, left)
	}
	c.fast.libLeft.Store(0)
	lib := newCounter(t, "cl100k_base")
	lib.lib = true
	if got, want := c.CountText(" epsilonzeta"), lib.CountText(" epsilonzeta"); got != want {
		t.Fatalf("CountText(\" epsilonzeta\") = %d, the library counts %d", got, want)
	}
	if c.fast.ranks.Load() == nil || loadedRanks(c.Encoding()) == nil {
		t.Fatal("the library's share is used up, and the ranks are still not loaded")
	}
}

// TestShortKey checks that the keys of pieces of 2 to 8 bytes tell apart
// pieces that differ in a byte or in length (trailing NULs), and that the
// key is the same whether the piece is read with one load or byte by byte.
func TestShortKey(t *testing.T) {
	seen := map[uint64]string{}
	pieces := []string{"ab", "a\x00", "\x00\x00", "ab\x00", "abcdefgh", "abcdefg", "\x00abcdefg", "zzzzzzzz", "\x7f\x7f", "  ", "   ", "\x00\x00\x00\x00\x00\x00\x00\x00"}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 20000 {
		b := make([]byte, 2+rng.IntN(7))
		for i := range b {
			b[i] = byte(rng.IntN(128))
		}
		pieces = append(pieces, string(b))
	}
	for _, p := range pieces {
		k := shortKey(p, 0, len(p))
		if k&shortKeyMask != k || k == 0 {
			t.Fatalf("shortKey(%q) = %#x: out of the key bits", p, k)
		}
		// Read with one load, from inside a longer text.
		if k2 := shortKey("x"+p+"yyyyyyyy", 1, 1+len(p)); k2 != k {
			t.Fatalf("shortKey(%q) = %#x alone, %#x inside a text", p, k, k2)
		}
		if q, dup := seen[k]; dup && q != p {
			t.Fatalf("shortKey(%q) = shortKey(%q) = %#x", p, q, k)
		}
		seen[k] = p
	}
}

func TestPack(t *testing.T) {
	seen := map[uint64]string{}
	for _, p := range []string{"a", "ab", "a\x00", "\x00", "\x00\x00", "ab\x00", "abcdefgh", "abcdefg", "\x00abcdefg", "\x7f", "zzzzzzzz"} {
		k := pack(p)
		if q, dup := seen[k]; dup {
			t.Fatalf("pack(%q) = pack(%q) = %#x", p, q, k)
		}
		seen[k] = p
	}
}

// asciiAlphabet is where FuzzFastCountExact maps bytes to when it wants
// input dense in the patterns' edge cases.
const asciiAlphabet = " \t\n\r\v'sStTrReEvVlLmMdDaAzZ019/.,;(){}-_\"\x00"

func FuzzFastCountExact(f *testing.F) {
	ecs := exactCases(f)
	for _, s := range trickyTexts {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if len(s) > 1024 {
			t.Skip()
		}
		ascii := []byte(s)
		dense := []byte(s)
		for i, b := range ascii {
			ascii[i] = b & 0x7f
			dense[i] = asciiAlphabet[int(b)%len(asciiAlphabet)]
		}
		for _, ec := range ecs {
			ec.check(t, s)
			ec.check(t, string(ascii))
			ec.check(t, string(dense))
		}
		if utf8.ValidString(s) {
			// Non-ASCII segments next to ASCII ones.
			for _, ec := range ecs {
				ec.check(t, "x "+s+"\nend")
			}
		}
	})
}

// BenchmarkCount compares the fast path with the library on real tool
// output, in both encodings: lib is the codec alone, fast the fast path
// with warm caches, cold the fast path with a new Counter for each count.
func BenchmarkCount(b *testing.B) {
	s := strings.Join(trajectoryOutputs(b), "\n")
	for _, enc := range policy.Encodings {
		for _, path := range []string{"lib", "fast", "cold"} {
			b.Run(enc+"/"+path, func(b *testing.B) {
				c := newCounter(b, enc)
				c.lib = path == "lib"
				b.SetBytes(int64(len(s)))
				for b.Loop() {
					if path == "cold" {
						b.StopTimer()
						c = newCounter(b, enc)
						b.StartTimer()
					}
					c.CountText(s)
				}
			})
		}
	}
}

// pathological returns texts of n bytes that make the longest pieces the
// splitters can make: runs of one letter, of random lower case letters, of
// upper case, of spaces and of punctuation, and random base64 (no spaces).
func pathological(n int) map[string]string {
	rng := rand.New(rand.NewPCG(uint64(n), 3))
	pick := func(alpha string) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = alpha[rng.IntN(len(alpha))]
		}
		return string(b)
	}
	return map[string]string{
		"a-run":      strings.Repeat("a", n),
		"lower":      pick("abcdefghijklmnopqrstuvwxyz"),
		"upper":      pick("ABCDEFGHIJKLMNOPQRSTUVWXYZ"),
		"spaces":     strings.Repeat(" ", n),
		"punct":      pick("!#$%&()*+,-./:;<=>?@[]^_{|}~"),
		"base64":     pick("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"),
		"repetitive": strings.Repeat("ab", n/2),
	}
}

// longPieceTexts returns texts of n bytes made of long pieces, beyond
// those of pathological: repeated patterns of several periods, mixed
// case, long digit runs and letters between digit runs.
func longPieceTexts(n int) map[string]string {
	rng := rand.New(rand.NewPCG(uint64(n), 7))
	out := pathological(n)
	rep := func(p string) string { return strings.Repeat(p, n/len(p)+1)[:n] }
	out["period3"] = rep("abc")
	out["period7"] = rep("tokenis")
	out["period13"] = rep("foldproxyrun")
	out["aab"] = rep("aab")
	out["words"] = rep("thequickbrownfoxjumpsoverthelazydog")
	b := make([]byte, n)
	for i := range b {
		b[i] = "0123456789"[rng.IntN(10)]
	}
	out["digits"] = string(b)
	for i := range b {
		if rng.IntN(7) == 0 {
			b[i] = "0123456789"[rng.IntN(10)]
		} else {
			b[i] = byte('a' + rng.IntN(26))
		}
	}
	out["letters-digits"] = string(b)
	for i := range b {
		b[i] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"[rng.IntN(52)]
	}
	out["mixed-case"] = string(b)
	for i := range b {
		b[i] = "ab"[rng.IntN(2)]
	}
	out["ab-random"] = string(b)
	return out
}

// TestCountLongPieces checks the exactness and the work of counting text
// whose pieces are longer than maxExactPiece, without timing anything.
// Exactness: every count and every encoding equals the library's (the
// reference tokenizer, tiktoken-go), at lengths just over maxExactPiece
// and well beyond. Work: no merge is handed more than a window
// (longWindow bytes; a piece up to maxExactPiece is merged whole), nor all
// of them together more than twice the text: a count costs linear work
// whatever the text.
func TestCountLongPieces(t *testing.T) {
	for _, enc := range policy.Encodings {
		c := newCounter(t, enc)
		lib := newCounter(t, enc)
		lib.lib = true
		var calls, total, most int
		c.libHook = func(n int) { calls++; total += n; most = max(most, n) }
		for _, size := range []int{maxExactPiece + 1, 5000, 64 << 10} {
			for name, s := range longPieceTexts(size) {
				calls, total, most = 0, 0, 0
				got := c.CountText(s)
				if most > maxExactPiece || total > 2*len(s) {
					t.Errorf("%s %s/%d: merges were handed %d bytes in %d calls, at most %d at once; want at most %d, %d", enc, name, size, total, calls, most, 2*len(s), maxExactPiece)
				}
				if want := lib.CountText(s); got != want {
					t.Errorf("%s %s/%d: %d tokens, the library counts %d", enc, name, size, got, want)
				}
				toks, err := c.encode(s)
				want, werr := lib.encode(s)
				if err != nil || werr != nil || !slices.Equal(toks, want) {
					t.Errorf("%s %s/%d: encode gives %d tokens (err %v), the library %d (err %v)", enc, name, size, len(toks), err, len(want), werr)
				}
			}
		}
	}
}

// TestLongPieceJoins: windows that join on a pair the whole merge would
// not make are caught and mended. Windows too small to see a token whole
// make joins fail all the time; the result is still the whole merge. With
// the real window no join fails on these texts, and none is merged whole.
func TestLongPieceJoins(t *testing.T) {
	c := newCounter(t, "o200k_base")
	ranks := c.rankTable()
	mendedSmall := 0
	for name, s := range longPieceTexts(12 << 10) {
		want := bpeEnds(ranks, s, nil)
		got, mended, whole := bpeWindowed(ranks, s, nil, longWindow, longMargin)
		if !slices.Equal(got, want) || mended != 0 || whole {
			t.Errorf("%s: the windowed merge gives %d tokens (%d joins mended, whole %v), the whole merge %d; want the same, none mended", name, len(got), mended, whole, len(want))
		}
		got, mended, _ = bpeWindowed(ranks, s, nil, 24, 8)
		if !slices.Equal(got, want) {
			t.Errorf("%s, windows of 24 bytes: %d tokens, the whole merge %d", name, len(got), len(want))
		}
		mendedSmall += mended
	}
	if mendedSmall == 0 {
		t.Errorf("windows of 24 bytes: no join was mended; the test does not reach the mending")
	}
}

// FuzzLongPieceExact checks counts and encodings of long pieces against
// the library: the input, mapped to an alphabet whose runs are one piece
// (letters of one case, ASCII or not, CJK, white space, punctuation,
// symbols and emoji; mixed case for cl100k_base), and repeated to more
// than maxExactPiece bytes. data[0] picks the alphabet and the encoding,
// extra the length; multi-byte alphabets put rune boundaries everywhere
// relative to the windows (longWindow, longMargin) a long piece is merged
// in.
func FuzzLongPieceExact(f *testing.F) {
	f.Add([]byte("abc"), uint16(0))
	f.Add([]byte("the quick brown fox"), uint16(3000))
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13}, uint16(777))
	f.Add([]byte("zzzzzzzzzy"), uint16(65535))
	encodings := []string{"o200k_base", "cl100k_base"}
	alphabets := [][]rune{
		[]rune("abcdefghijklmnopqrstuvwxyz"),
		[]rune("ABCDEFGHIJKLMNOPQRSTUVWXYZ"),
		[]rune("!#$%&()*+,-./:;<=>?@[]^_{|}~"),
		[]rune("ae"),
		[]rune("abcde"),
		[]rune("éèàùçñößøåæœ"), // Latin lower case, 2 bytes each
		[]rune("абвгдежзийклмнопрстуфхцчшщыэюя"), // Cyrillic lower case
		[]rune("的一是不了人我在有他这中大来上国"),               // CJK (Lo): one piece in either case class
		[]rune(" \t"),        // white space
		[]rune("→✓★•…—“”"),   // symbols, 3 bytes each
		[]rune("😀🎉🔥👍🚀"),      // emoji, 4 bytes each
		[]rune("aBcDeFgHiJ"), // mixed case: one piece in cl100k_base only
		[]rune("aé的😀"),       // 1 to 4 bytes
	}
	// Hard cases: runs of one rune, short periods, and a long aperiodic
	// input, for each alphabet and encoding, at lengths just over
	// maxExactPiece, around the window and at the most extra allows.
	rng := rand.New(rand.NewPCG(13, 17))
	combos := len(alphabets) * len(encodings)
	for k := range combos {
		random := make([]byte, 4096)
		for i := range random {
			random[i] = byte(rng.IntN(256))
		}
		random[0] = byte(k)
		f.Add([]byte{byte(k)}, uint16(0))
		f.Add([]byte{byte(k), byte(k + 1), byte(k + 1), byte(k + 2)}, uint16(longWindow-1))
		f.Add([]byte{byte(k), 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 3}, uint16(longWindow+longMargin))
		f.Add(random, uint16(8<<10-1))
	}
	counters := map[string][2]*Counter{}
	for _, enc := range encodings {
		lib := newCounter(f, enc)
		lib.lib = true
		counters[enc] = [2]*Counter{newCounter(f, enc), lib}
	}
	f.Fuzz(func(t *testing.T, data []byte, extra uint16) {
		if len(data) == 0 || len(data) > 4096 {
			t.Skip()
		}
		alpha := alphabets[int(data[0])%len(alphabets)]
		enc := encodings[int(data[0])/len(alphabets)%len(encodings)]
		c, lib := counters[enc][0], counters[enc][1]
		n := maxExactPiece + 1 + int(extra)%(8<<10)
		var b strings.Builder
		b.Grow(n + utf8.UTFMax)
		for i := 0; b.Len() < n; i++ {
			b.WriteRune(alpha[int(data[i%len(data)])%len(alpha)])
		}
		s := b.String()
		if got, want := c.CountText(s), lib.CountText(s); got != want {
			t.Fatalf("%s, %d bytes of %q: %d tokens, the library counts %d", enc, len(s), string(alpha), got, want)
		}
		toks, err := c.encode(s)
		if err != nil || strings.Join(toks, "") != s || len(toks) != lib.CountText(s) {
			t.Fatalf("%s, %d bytes of %q: encode gives %d tokens (err %v)", enc, len(s), string(alpha), len(toks), err)
		}
	})
}

// BenchmarkCountSpaceFree counts 2 MiB of text without spaces (each kind
// of pathological.) against 2 MiB of real tool output, in the same run:
// the ratio of their ns/op is the slowdown of the worst case.
//
//	go test -tags gore2regex ./intercept/tokens -run '^$' -bench CountSpaceFree
func BenchmarkCountSpaceFree(b *testing.B) {
	const n = 2 << 20
	prose := strings.Join(trajectoryOutputs(b), "\n")
	for len(prose) < n {
		prose += prose
	}
	cases := pathological(n)
	cases["prose"] = prose[:n]
	for _, name := range []string{"prose", "a-run", "lower", "upper", "spaces", "punct", "base64", "repetitive"} {
		b.Run(name, func(b *testing.B) {
			c := newCounter(b, "o200k_base")
			s := cases[name]
			c.rankTable()
			c.CountText(s[:64<<10]) // the caches warm
			b.SetBytes(int64(len(s)))
			for b.Loop() {
				c.CountText(s)
			}
		})
	}
}

// BenchmarkLongPiece merges 2 MiB pieces a window at a time (exact), in
// the same run as the way they were counted before, the sum of the counts
// of their 256-byte slices (a few percent over on random letters): the
// ratio of their ns/op is the cost of exactness.
//
//	go test -tags gore2regex ./intercept/tokens -run '^$' -bench LongPiece
func BenchmarkLongPiece(b *testing.B) {
	c := newCounter(b, "o200k_base")
	ranks := c.rankTable()
	texts := longPieceTexts(2 << 20)
	for _, name := range []string{"lower", "punct", "spaces", "period13"} {
		s := texts[name]
		b.Run(name+"/slices", func(b *testing.B) {
			for b.Loop() {
				seen := map[string]int{}
				for i := 0; i < len(s); i += 256 {
					sl := s[i:min(i+256, len(s))]
					if _, ok := seen[sl]; !ok {
						seen[sl] = bpeCount(ranks, sl)
					}
				}
			}
		})
		b.Run(name+"/windows", func(b *testing.B) {
			for b.Loop() {
				bpeLongEnds(ranks, s, nil)
			}
		})
	}
}
