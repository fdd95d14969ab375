package fold

import (
	"encoding/json"
	"strconv"
	"time"
	"unicode/utf8"
)

// The archived call's record is encoded by hand (issue 13: it is written
// on every call's reply path): the bytes are those encoding/json's Marshal
// gives for a storedCall (FuzzEncodeStoredCall checks it), and
// decodeCall reads them with encoding/json.

// marshalStoredCall returns the JSON of sc, as json.Marshal(sc) would.
func marshalStoredCall(sc *storedCall) ([]byte, error) {
	if !rfc3339able(sc.Time) {
		return json.Marshal(sc) // its error, or a form this does not write
	}
	n := 240 + len(sc.Upstream) + len(sc.Method) + len(sc.Name) + len(sc.Args) + len(sc.Result) + len(sc.Handle)
	b := make([]byte, 0, n+n/16)
	b = append(b, `{"seq":`...)
	b = strconv.AppendInt(b, int64(sc.Seq), 10)
	b = append(b, `,"time":"`...)
	b = sc.Time.AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","upstream":`...)
	b = appendJSONString(b, sc.Upstream)
	b = append(b, `,"method":`...)
	b = appendJSONString(b, sc.Method)
	b = append(b, `,"name":`...)
	b = appendJSONString(b, sc.Name)
	if sc.Args != "" {
		b = append(b, `,"args":`...)
		b = appendJSONString(b, sc.Args)
	}
	b = append(b, `,"result":`...)
	b = appendJSONString(b, sc.Result)
	b = append(b, `,"tokens":`...)
	b = strconv.AppendInt(b, int64(sc.Tokens), 10)
	if sc.Handle != "" {
		b = append(b, `,"handle":`...)
		b = appendJSONString(b, sc.Handle)
	}
	if r := sc.Ref; r != nil {
		b = append(b, `,"ref":{"seg":`...)
		b = strconv.AppendUint(b, uint64(r.Seg), 10)
		b = append(b, `,"off":`...)
		b = strconv.AppendInt(b, r.Off, 10)
		b = append(b, `,"len":`...)
		b = strconv.AppendInt(b, r.Len, 10)
		b = append(b, `,"crc":`...)
		b = strconv.AppendUint(b, uint64(r.CRC), 10)
		b = append(b, '}')
	}
	return append(b, '}'), nil
}

// rfc3339able reports whether time.Time's MarshalJSON writes t, in its
// RFC 3339 form with nanoseconds (it refuses years outside [0,9999] and
// zone offsets of a day or more).
func rfc3339able(t time.Time) bool {
	if y := t.Year(); y < 0 || y > 9999 {
		return false
	}
	_, off := t.Zone()
	return off > -24*3600 && off < 24*3600
}

// jsonSafe marks the ASCII bytes encoding/json writes as they are (it
// escapes control characters, the quote, the backslash, and <, > and &).
var jsonSafe = func() (t [utf8.RuneSelf]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = true
	}
	for _, c := range `"\<>&` {
		t[c] = false
	}
	return t
}()

// appendJSONString appends s as a JSON string, escaped as encoding/json
// escapes it: invalid UTF-8 becomes U+FFFD, and U+2028 and U+2029 are
// escaped.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if jsonSafe[c] {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
