package secrets

import (
	"encoding/base64"
	"encoding/hex"
	"slices"
	"strings"
	"unsafe"
)

// encodedWindows returns windows around segments of text that gitleaks'
// decoder would decode to printable text: base64 and hex runs, percent
// escapes and unicode escapes. It is a cheap prefilter; the decoding that
// counts is gitleaks'.
//
// Only segments that start in text[lo:hi] are reported (a segment running
// into lo belongs to the piece before); their windows reach outside.
//
// It returns the windows of this walk over text[lo:hi]: at a byte of a
// base64 run ([\w/+-]), the run from there (and up to two '=' after it)
// is a segment when it has at least 16 bytes and a byte of likelyB64, and
// the walk goes on after it; at a % followed by two hex digits, the line
// is a segment and the walk goes on three bytes on; at \u or \U with hex
// digits two and five bytes on, the six bytes are one and the walk goes
// on six bytes on; at any other byte, the walk goes on at the next. It
// does not look at every byte: % and \ are found with IndexByte, and
// between them a run of 16 base64 bytes is looked for by testing every
// 16th byte (see longB64Runs).
func encodedWindows(text string, nls []int, lo, hi int) [][2]int {
	const ctxBytes = 256
	var wins [][2]int
	add := func(a, b int) {
		a, b = max(a-ctxBytes, 0), min(b+ctxBytes, len(text))
		if n := len(wins); n > 0 && a <= wins[n-1][1] {
			wins[n-1][1] = max(wins[n-1][1], b)
			return
		}
		wins = append(wins, [2]int{a, b})
	}
	i := lo
	for i > 0 && i < len(text) && isB64Byte(text[i-1]) && isB64Byte(text[i]) {
		i++
	}
	pct, bs := -1, -1 // the next % and \ at or after i, once looked for
	for i < hi {
		if pct < i {
			pct = indexFrom(text, '%', i)
		}
		if bs < i {
			bs = indexFrom(text, '\\', i)
		}
		z := min(pct, bs) // the next % or \, which no run crosses
		if z < 0 {
			z = max(pct, bs)
		}
		if z < 0 {
			z = len(text)
		}
		if !longB64Runs(text, i, min(z, len(text)), hi, add) || z >= hi {
			return wins
		}
		i = z
		c := text[i]
		switch {
		case c == '%' && i+2 < len(text) && isHex(text[i+1]) && isHex(text[i+2]):
			li, _ := slices.BinarySearch(nls, i)
			add(lineStart(nls, li), lineEnd(nls, li, len(text)))
			i += 3
		case c == '\\' && i+5 < len(text) && (text[i+1] == 'u' || text[i+1] == 'U') && isHex(text[i+2]) && isHex(text[i+5]):
			add(i, i+6)
			i += 6
		default:
			i++
		}
	}
	return wins
}

// indexFrom returns the index of the first c in text at or after i, or -1.
func indexFrom(text string, c byte, i int) int {
	j := strings.IndexByte(text[i:], c)
	if j < 0 {
		return -1
	}
	return i + j
}

// longB64Runs calls add for the segments of encodedWindows that are base64
// runs starting in text[p:min(z, hi)]: p is where the walk is (a run may
// start there even when the byte before is base64 too), and z is the end
// of text or a byte that is not base64 (no run crosses it). It reports
// false when the walk ends before z: a segment reaches hi.
//
// A run of 16 bytes starting in text[p:p+16] holds text[p+15]; when that
// byte is not base64, no run of 16 starts there, and the walk skips 16
// bytes after a single test.
func longB64Runs(text string, p, z, hi int, add func(a, b int)) bool {
	for p < z && p < hi {
		q := p + 15
		if q >= z {
			return true
		}
		if encClass[text[q]]&encB64 == 0 {
			p = q + 1
			continue
		}
		a := q
		for a > p && encClass[text[a-1]]&encB64 != 0 {
			a--
		}
		if a >= hi {
			return false
		}
		j := q + 1
		for j < z && encClass[text[j]]&encB64 != 0 {
			j++
		}
		if j-a < 16 {
			p = j
			continue
		}
		var seen uint8
		for k := a; k < j; k++ {
			seen |= encClass[text[k]]
		}
		end := j
		for k := 0; k < 2 && end < len(text) && text[end] == '='; k++ {
			end++
		}
		if seen&encLikely != 0 && decodesPrintable(text[a:end]) {
			add(a, end)
		}
		if end >= hi {
			return false
		}
		p = end
	}
	return p < hi
}

// Classes of bytes for encodedWindows.
const (
	encB64    = 1 << iota // isB64Byte
	encLikely             // likelyB64
	encNotStd             // not in standard base64's alphabet: - _
	encNotURL             // not in URL base64's alphabet: + /
)

var encClass = func() (t [256]uint8) {
	for c := range 256 {
		b := byte(c)
		if isB64Byte(b) {
			t[c] |= encB64
		}
		if likelyB64(b) {
			t[c] |= encLikely
		}
		if b == '-' || b == '_' {
			t[c] |= encNotStd
		}
		if b == '+' || b == '/' {
			t[c] |= encNotURL
		}
	}
	return t
}()

// decodesPrintable reports whether s decodes, as base64 (standard or URL)
// or hex, to printable ASCII, as gitleaks' decoder requires. s is a run of
// base64 bytes ([\w/+-]) and up to two '='.
//
// It decodes into a buffer on its stack when the segment fits (most do),
// not into a new one a segment as DecodeString would.
func decodesPrintable(s string) bool {
	var buf [decodeBuf]byte
	src := unsafe.Slice(unsafe.StringData(s), len(s)) // only read
	if isHexString(strings.TrimRight(s, "=")) && len(s) >= 32 {
		dst := sized(buf[:], hex.DecodedLen(len(s)))
		if n, err := hex.Decode(dst, src); err == nil && printableASCII(dst[:n]) {
			return true
		}
	}
	// Decoding fails, without decoding being tried, where the alphabet
	// or the length rules it out: standard base64 is padded to a multiple
	// of four and has no - or _; raw URL base64 has no padding, no + or /,
	// and no length of 4k+1.
	var seen uint8
	for i := 0; i < len(s); i++ {
		seen |= encClass[s[i]]
	}
	if seen&encNotStd == 0 && len(s)%4 == 0 {
		dst := sized(buf[:], base64.StdEncoding.DecodedLen(len(s)))
		if n, err := base64.StdEncoding.Decode(dst, src); err == nil && printableASCII(dst[:n]) {
			return true
		}
	}
	if seen&encNotURL != 0 || strings.IndexByte(s, '=') >= 0 || len(s)%4 == 1 {
		return false
	}
	dst := sized(buf[:], base64.RawURLEncoding.DecodedLen(len(s)))
	n, err := base64.RawURLEncoding.Decode(dst, src)
	return err == nil && printableASCII(dst[:n])
}

// decodeBuf is the size of decodesPrintable's buffer: the decoded length
// of a segment of 512 bytes.
const decodeBuf = 384

// sized returns buf[:n], or a new slice of n bytes when buf is shorter.
func sized(buf []byte, n int) []byte {
	if n > len(buf) {
		return make([]byte, n)
	}
	return buf[:n]
}

// isEncodedByte reports whether c can be part of a segment gitleaks
// decodes (base64, hex, percent or unicode escapes).
func isEncodedByte(c byte) bool { return isB64Byte(c) || c == '=' || c == '%' || c == '\\' }
