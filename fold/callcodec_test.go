package fold

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"
	"unicode/utf8"
)

// The hand-written encoding of an archived call gives encoding/json's
// bytes, and decodes back to the record.
func FuzzEncodeStoredCall(f *testing.F) {
	f.Add(1, int64(1767225600123456789), 0, "fs", "tools/call", "read_file", `{"path":"/a"}`,
		`{"content":[{"type":"text","text":"ok"}]}`, 12, "", false, uint32(0), int64(0), int64(0), uint32(0))
	f.Add(7, int64(-62135596800000000000/1e9), 3600+30*60, "up\x00\"\\", "m\u2028\u2029", "<n>&", "",
		"bad \xff\xfe utf8 \t\n\r\b\f \x01 \x7f é 😀", -3, "b-1~ab", true, uint32(3), int64(1<<40), int64(5000), uint32(0xdeadbeef))
	f.Add(0, int64(0), -7*3600-1, "", "", "", "", "", 0, "", false, uint32(0), int64(0), int64(0), uint32(0))
	f.Add(2, int64(1<<62), 86400, "a", "b", "c", "d", "e", 1, "h", true, uint32(1), int64(0), int64(1), uint32(1))
	f.Fuzz(func(t *testing.T, seq int, ns int64, offset int, upstream, method, name, args, result string, tokens int, handle string,
		withRef bool, seg uint32, off, n int64, crc uint32) {
		zone := time.UTC
		if offset != 0 {
			zone = time.FixedZone("z", offset%(48*3600))
		}
		sc := storedCall{CallRecord: CallRecord{
			Seq: seq, Time: time.Unix(0, ns).In(zone), Upstream: upstream, Method: method, Name: name,
			Args: args, Result: result, Tokens: tokens, Handle: handle,
		}}
		if withRef {
			sc.Ref = &archiveRef{Seg: seg, Off: off, Len: n, CRC: crc}
		}
		want, werr := json.Marshal(&sc)
		got, gerr := marshalStoredCall(&sc)
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("errors differ: encoding/json %v, by hand %v", werr, gerr)
		}
		if werr != nil {
			return
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("encodings differ:\n by hand       %s\n encoding/json %s", got, want)
		}
		var back storedCall
		if err := json.Unmarshal(got, &back); err != nil {
			t.Fatalf("decode %s: %v", got, err)
		}
		_, zoff := sc.Time.Zone()
		if zoff%60 == 0 && !back.Time.Equal(sc.Time) || // JSON keeps no seconds of a zone offset
			back.Seq != seq || back.Tokens != tokens || (back.Ref != nil) != withRef ||
			withRef && *back.Ref != *sc.Ref {
			t.Fatalf("decoded %+v from %s; want %+v", back, got, sc)
		}
		for _, p := range [][2]string{{back.Upstream, upstream}, {back.Method, method}, {back.Name, name},
			{back.Args, args}, {back.Result, result}, {back.Handle, handle}} {
			if utf8.ValidString(p[1]) && p[0] != p[1] {
				t.Fatalf("decoded %q; want %q", p[0], p[1])
			}
		}
	})
}

// BenchmarkEncodeCall compares the hand-written encoding of a tiny call's
// record with encoding/json's.
func BenchmarkEncodeCall(b *testing.B) {
	sc := storedCall{CallRecord: CallRecord{
		Seq: 42, Time: time.Now(), Upstream: "everything", Method: "tools/call", Name: "echo",
		Args: `{"message":"hello"}`, Result: `{"content":[{"type":"text","text":"Echo: hello"}]}`, Tokens: 17,
	}}
	b.Run("json", func(b *testing.B) {
		for b.Loop() {
			if _, err := json.Marshal(&sc); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("hand", func(b *testing.B) {
		for b.Loop() {
			if _, err := marshalStoredCall(&sc); err != nil {
				b.Fatal(err)
			}
		}
	})
}
