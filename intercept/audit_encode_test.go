package intercept

import (
	"encoding/json"
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/foldproxy/foldproxy/policy"
)

// checkAppendRecord fails when appendRecord's bytes differ from
// json.Marshal's for rec.
func checkAppendRecord(t *testing.T, rec Record) {
	t.Helper()
	rec.Time = rec.Time.UTC()
	if !encodable(&rec) {
		return
	}
	want, err := json.Marshal(rec)
	if err != nil {
		t.Fatalf("json.Marshal of an encodable record: %v", err)
	}
	if got := appendRecord(nil, &rec); string(got) != string(want) {
		t.Fatalf("appendRecord:\n got %s\nwant %s", got, want)
	}
}

func TestAppendRecordMatchesJSON(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 22, 30, 0, 123456000, time.UTC)
	for _, rec := range []Record{
		{Time: t0, Kind: KindCall},
		{Time: time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("x", 3600)), Kind: KindBranch, Event: "created", Status: "active", Level: "normal", Depth: 1, Branch: "b-1", Parent: "root"},
		{Time: t0, Kind: KindCall, Session: "s<1>&", Branch: "b\"\\", Parent: "p\n\r\t\b\f\x00\x1f", Depth: -3,
			Upstream: "up\u2028\u2029", Method: "tools/call", Tool: "t\xff\xfeé😀", ArgTokens: 3, ResultTokens: -1,
			DeliveredTokens: 1 << 40, Redactions: map[string]int{"zeta": 1, "alpha": 2, "<b>": 0}, BudgetUsed: 5, BudgetTotal: 8000,
			Outcome: OutcomeCut, Error: "boom", CutHandle: "b-1~abc", LatencyMS: 1.25, UpstreamLatencyMS: 0.000123,
			Reason: "r", Tokens: 7},
		{Time: t0, Kind: KindModel, LatencyMS: 1e-7, UpstreamLatencyMS: 1e21},
		{Time: t0, Kind: KindModel, LatencyMS: 123456789.5, UpstreamLatencyMS: -2.5e-9},
		{Time: t0, Kind: KindCall, LatencyMS: math.SmallestNonzeroFloat64, UpstreamLatencyMS: math.MaxFloat64},
		{Time: t0, Kind: KindModel, Method: "anthropic", Model: &ModelFigures{Session: "ms-1<>", Folds: []FoldNote{{Handle: "af~00", Kind: "stale", Tool: "Bash", Brief: "grep \"x\" <a>", Tokens: 900}},
			Folded: 3, FoldSaved: 2400, Recalls: 1, Usage: &Usage{Input: 3, CacheRead: 9000, CacheWrite: 120, Output: 44, Billed: 1053.5}, PrefixHeld: 8000, ModelledBilled: 1234.5, ModelledWithout: 2e6}},
		{Time: t0, Kind: KindModel, Model: &ModelFigures{WouldFold: 2, WouldSave: 10, WouldFolds: []FoldNote{{Handle: "af~01", Kind: "repeat"}}}},
	} {
		checkAppendRecord(t, rec)
	}
}

// FuzzAppendRecord pins the hand encoder to json.Marshal on arbitrary
// strings, numbers and times.
func FuzzAppendRecord(f *testing.F) {
	f.Add("s<&>", "tool\u2028", "\xff\x00err", "rule", int64(1763937000123456789), 3, 1.5)
	f.Add("", "", "", "", int64(0), 0, 0.0)
	f.Add("é😀", "a\"b\\c", "\t\n\r", "x", int64(-62135596800000000), -7, 1e-7)
	f.Fuzz(func(t *testing.T, session, tool, errText, rule string, ns int64, n int, lat float64) {
		rec := Record{
			Time: time.Unix(0, ns), Kind: KindCall, Session: session, Tool: tool, Error: errText,
			Depth: n, ArgTokens: n, LatencyMS: lat, UpstreamLatencyMS: -lat,
			Redactions: map[string]int{rule: n, rule + "x": 1},
		}
		checkAppendRecord(t, rec)
	})
}

// What Write puts in the log reads back through ReadAudit, records
// json.Marshal would refuse included (they are refused the same way).
func TestAuditWriteHandEncoded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	a, err := NewAuditor(policy.Audit{Fsync: "never"}, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := Record{Time: time.Now().UTC(), Kind: KindCall, Session: "s<1>", Tool: "t\u2028", Redactions: map[string]int{"r": 2}, LatencyMS: 2.5}
	if err := a.Write(want); err != nil {
		t.Fatal(err)
	}
	if err := a.Write(Record{Kind: KindCall, LatencyMS: math.NaN()}); err == nil {
		t.Error("a record with a NaN latency was written")
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	var got []Record
	if err := ReadAudit([]string{path}, func(r Record) error { got = append(got, r); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 {
		t.Fatalf("read %d records; want 1", len(got))
	}
	g, _ := json.Marshal(got[0])
	w, _ := json.Marshal(want)
	if string(g) != string(w) {
		t.Fatalf("read back %s; want %s", g, w)
	}
}
