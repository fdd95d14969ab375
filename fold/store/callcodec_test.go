package store

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
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
		got, ok := matchesMarshal(t, &sc, marshalStoredCall)
		if !ok {
			return
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

// The hand-written encoding of a branch record gives encoding/json's
// bytes, and decodes back to the record.
func FuzzEncodeBranch(f *testing.F) {
	f.Add("b-0123456789abcdef", "s1", "root-1", 1, "find <the> bug & fix", "prompt\n\"q\"", "active", "", 4000, 120, "normal",
		int64(1767225600123456789), int64(1767225700000000000), int64(0), 3600, "b-1,b-2", "", 3, "fs/read_file=40,fs/list=2", "b-1~ab",
		"msg", `{"k":1}`, "", "m-1", false, false)
	f.Add("root-x", "\xff\u2028", "", 0, "", "", "forced", "budget exhausted", 0, 0, "critical",
		int64(0), int64(0), int64(-1), -7*3600-1, "", "a,,b", 0, "=1,\x00=2,é=3", "", "", "", "s", "", true, true)
	f.Add("b", "s", "p", 2, "d", "p", "returned", "r", 1, 2, "l", int64(-1e18), int64(1<<62), int64(1), 86400, "c", "d", 1, "a=1", "x",
		"m", "v", "s", "i", false, true)
	f.Fuzz(func(t *testing.T, id, session, parent string, depth int, desc, prompt, status, reason string, budget, used int, level string,
		created, deadline, closed int64, offset int, ord, deps string, calls int, byTool, cuts, msg, rv, summary, injected string,
		delivered, withMC bool) {
		zone := time.UTC
		if offset != 0 {
			zone = time.FixedZone("z", offset%(48*3600))
		}
		at := func(ns int64) time.Time {
			if ns == 0 {
				return time.Time{}
			}
			return time.Unix(0, ns).In(zone)
		}
		split := func(s string) []string {
			if s == "" {
				return nil
			}
			return strings.Split(s, ",")
		}
		b := &Branch{
			ID: id, Session: session, Parent: parent, Depth: depth, Description: desc, Prompt: prompt, Status: Status(status),
			Reason: reason, Budget: budget, Used: used, Level: level, Created: at(created), Deadline: at(deadline), Closed: at(closed),
			Ord: len(ord) - 1, DependsOn: split(deps), Calls: calls, Cuts: split(cuts), CutCount: budget - used, Message: msg, ReturnValue: rv,
			Summary: summary, Injected: split(injected), SummaryDelivered: delivered,
		}
		for i, kv := range split(byTool) {
			k, _, _ := strings.Cut(kv, "=")
			if b.ByTool == nil {
				b.ByTool, b.ByUpstream = map[string]int{}, map[string]int{}
			}
			b.ByTool[k] += i + used
			b.ByUpstream[strings.ToUpper(k)] -= i
		}
		if withMC {
			b.ModelContext = &ModelContext{TokensBefore: budget, TokensAfter: used, Folded: depth, Requests: calls, At: at(created)}
			b.Principal, b.Acknowledged, b.Reasoning = level, delivered, calls
		}
		got, ok := matchesMarshal(t, b, marshalBranch)
		if !ok {
			return
		}
		if _, err := decodeBranch(got); err != nil {
			t.Fatalf("decode %s: %v", got, err)
		}
	})
}

// BenchmarkEncodeBranch compares the hand-written encoding of branch
// records with encoding/json's: a branch's, as each charge writes it, and
// a main thread's, as each branch_create and branch_return writes it.
func BenchmarkEncodeBranch(b *testing.B) {
	now := time.Now()
	small := &Branch{ID: "b-0123456789abcdef", Session: "s1", Parent: "root-0123456789abcdef", Depth: 1, Description: "find where results are cut",
		Status: StatusActive, Budget: 32768, Used: 1200, Level: "normal", Created: now, Deadline: now.Add(time.Hour), Calls: 12,
		ByTool: map[string]int{"fs/read_file": 1000, "fs/list_directory": 200}, ByUpstream: map[string]int{"fs": 1200}}
	root := &Branch{ID: "root-0123456789abcdef", Session: "s1", Status: StatusActive, Level: "normal", Created: now, Calls: 800,
		ByTool: map[string]int{"foldproxy/branch_create": 30000, "foldproxy/branch_return": 20000}, ByUpstream: map[string]int{"foldproxy": 50000}}
	for _, br := range []struct {
		name string
		b    *Branch
	}{{"branch", small}, {"root", root}} {
		b.Run(br.name+"/json", func(b *testing.B) {
			for b.Loop() {
				if _, err := json.Marshal(br.b); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(br.name+"/hand", func(b *testing.B) {
			for b.Loop() {
				if _, err := marshalBranch(br.b); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// Keys are written as fmt's %020d wrote them.
func TestKeyDigits(t *testing.T) {
	for _, n := range []int64{0, 1, 42, 1<<31 - 1, 1<<62 + 12345, 1<<63 - 1, -1, -1 << 63} {
		if got, want := string(append20([]byte("x"), n)), fmt.Sprintf("x%020d", n); got != want {
			t.Errorf("append20(%d) = %q; want %q", n, got, want)
		}
	}
	if got, want := string(callKey("b/1 x", 7)), "c/b%2F1%20x/00000000000000000007"; got != want {
		t.Errorf("callKey = %q; want %q", got, want)
	}
	at := time.Unix(0, 1767225600123456789)
	if got, want := string(timeKey(at, []byte("c/b/1"))), "t/01767225600123456789/c/b/1"; got != want {
		t.Errorf("timeKey = %q; want %q", got, want)
	}
	if got, want := string(timeKey(time.Unix(-5, 0), []byte("k"))), "t/00000000000000000000/k"; got != want {
		t.Errorf("timeKey before 1970 = %q; want %q", got, want)
	}
}

// matchesMarshal fails t unless byHand(v) gives the bytes json.Marshal(v)
// gives, or an error where it does. It returns those bytes, and false when
// both refused v.
func matchesMarshal[T any](t *testing.T, v T, byHand func(T) ([]byte, error)) ([]byte, bool) {
	t.Helper()
	want, werr := json.Marshal(v)
	got, gerr := byHand(v)
	if (werr == nil) != (gerr == nil) {
		t.Fatalf("errors differ: encoding/json %v, by hand %v", werr, gerr)
	}
	if werr != nil {
		return nil, false
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("encodings differ:\n by hand       %s\n encoding/json %s", got, want)
	}
	return got, true
}
