package intercept

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/foldproxy/foldproxy/fold"
	"github.com/foldproxy/foldproxy/policy"
)

// newTestAuditor opens an auditor on a fresh file and closes it at the end
// of the test.
func newTestAuditor(tb testing.TB, a policy.Audit) (*Auditor, string) {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "state", "audit.jsonl")
	au, err := NewAuditor(a, path, nil)
	if err != nil {
		tb.Fatalf("NewAuditor: %v", err)
	}
	tb.Cleanup(func() { au.Close() })
	return au, path
}

// readAll reads every record of the log at path and its rotations.
func readAll(tb testing.TB, path string) ([]Record, ReadStats) {
	tb.Helper()
	files, err := AuditFiles(path)
	if err != nil {
		tb.Fatalf("AuditFiles: %v", err)
	}
	var recs []Record
	st, err := ReadAuditStats(files, func(r Record) error {
		recs = append(recs, r)
		return nil
	})
	if err != nil {
		tb.Fatalf("ReadAuditStats: %v", err)
	}
	return recs, st
}

func TestAuditorConcurrentWrites(t *testing.T) {
	for _, fsync := range []string{"always", "interval", "never"} {
		t.Run(fsync, func(t *testing.T) {
			au, path := newTestAuditor(t, policy.Audit{Fsync: fsync, FsyncInterval: policy.Duration(time.Millisecond)})
			const writers, each = 8, 40
			var wg sync.WaitGroup
			for w := range writers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range each {
						rec := Record{Kind: KindCall, Session: fmt.Sprintf("s%d", w), Tool: fmt.Sprintf("tool-%d", i), ResultTokens: i}
						if err := au.Write(rec); err != nil {
							t.Errorf("Write: %v", err)
						}
					}
				}()
			}
			wg.Wait()
			if err := au.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			recs, st := readAll(t, path)
			if got, want := len(recs), writers*each; got != want {
				t.Errorf("records read = %d, want %d", got, want)
			}
			if st.Skipped != 0 {
				t.Errorf("skipped = %d (first at %s), want 0", st.Skipped, st.FirstSkipped)
			}
			next := map[string]int{}
			for _, r := range recs {
				if want := fmt.Sprintf("tool-%d", next[r.Session]); r.Tool != want {
					t.Fatalf("session %s: tool = %q, want %q (records out of order)", r.Session, r.Tool, want)
				}
				next[r.Session]++
			}
			if err := au.Write(Record{Kind: KindCall}); err == nil {
				t.Error("Write after Close succeeded, want an error")
			}
			if err := au.Close(); err != nil {
				t.Errorf("second Close: %v", err)
			}
		})
	}
}

func TestAuditorRotation(t *testing.T) {
	au, path := newTestAuditor(t, policy.Audit{MaxBytes: 1000, MaxFiles: 2, Fsync: "never"})
	const n = 100
	for i := range n {
		if err := au.Write(Record{Kind: KindCall, Session: "s", Tool: fmt.Sprintf("t%03d", i)}); err != nil {
			t.Fatalf("Write %d: %v", i, err)
		}
	}
	if err := au.Close(); err != nil {
		t.Fatal(err)
	}
	files, err := AuditFiles(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{path + ".2", path + ".1", path}; !reflect.DeepEqual(files, want) {
		t.Fatalf("files = %q, want %q", files, want)
	}
	if _, err := os.Stat(path + ".3"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s.3 exists (err %v); want at most MaxFiles rotated files", path, err)
	}
	for _, f := range files {
		st, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if st.Size() > 1000 {
			t.Errorf("%s is %d bytes, above MaxBytes 1000", f, st.Size())
		}
	}
	recs, _ := readAll(t, path)
	if len(recs) == 0 || len(recs) >= n {
		t.Fatalf("read %d records, want some but fewer than %d (older ones rotated away)", len(recs), n)
	}
	first := n - len(recs)
	for i, r := range recs {
		if want := fmt.Sprintf("t%03d", first+i); r.Tool != want {
			t.Fatalf("record %d: tool = %q, want %q (oldest first, none missing)", i, r.Tool, want)
		}
	}
}

func TestAuditorTornLastLine(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.jsonl")
	old := `{"time":"2025-01-01T00:00:00Z","kind":"call","session":"a","depth":0}` + "\n" + `{"time":"2025-01-01T00:00:01Z","ki`
	if err := os.WriteFile(path, []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}
	au, err := NewAuditor(policy.Audit{}, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := au.Write(Record{Kind: KindCall, Session: "b"}); err != nil {
		t.Fatal(err)
	}
	if err := au.Close(); err != nil {
		t.Fatal(err)
	}
	recs, st := readAll(t, path)
	var got []string
	for _, r := range recs {
		got = append(got, r.Session)
	}
	if want := []string{"a", "b"}; !reflect.DeepEqual(got, want) {
		t.Errorf("sessions = %q, want %q", got, want)
	}
	if st.Skipped != 1 || st.FirstSkipped != path+":2" {
		t.Errorf("skipped = %d at %q, want 1 at %q", st.Skipped, st.FirstSkipped, path+":2")
	}
}

func TestNewAuditorNoop(t *testing.T) {
	for _, path := range []string{"", "-"} {
		au, err := NewAuditor(policy.Audit{Fsync: "bogus"}, path, nil)
		if err != nil {
			t.Fatalf("NewAuditor(%q): %v", path, err)
		}
		if err := au.Write(Record{Kind: KindCall}); err != nil {
			t.Errorf("no-op Write: %v", err)
		}
		au.BranchEvent(context.Background(), fold.Event{Kind: "created"})
		h := Chain(func(context.Context, *Exchange) error { return nil }, Audit(au))
		if err := h(context.Background(), &Exchange{}); err != nil {
			t.Errorf("no-op chain: %v", err)
		}
		if err := au.Close(); err != nil {
			t.Errorf("no-op Close: %v", err)
		}
	}
	var nilAuditor *Auditor
	if err := nilAuditor.Write(Record{Kind: KindCall}); err != nil {
		t.Errorf("nil Write: %v", err)
	}
	if err := nilAuditor.Close(); err != nil {
		t.Errorf("nil Close: %v", err)
	}
}

func TestNewAuditorInvalid(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name  string
		a     policy.Audit
		field string
	}{
		{"fsync", policy.Audit{Fsync: "sometimes"}, "audit.fsync"},
		{"maxBytes", policy.Audit{MaxBytes: -1}, "audit.maxBytes"},
		{"maxFiles", policy.Audit{MaxFiles: -2}, "audit.maxFiles"},
		{"interval", policy.Audit{FsyncInterval: policy.Duration(-time.Second)}, "audit.fsyncInterval"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			au, err := NewAuditor(tt.a, filepath.Join(dir, tt.name+".jsonl"), nil)
			if err == nil {
				au.Close()
				t.Fatal("NewAuditor succeeded, want an error")
			}
			if !strings.Contains(err.Error(), tt.field) {
				t.Errorf("error %q does not name %s", err, tt.field)
			}
		})
	}
	// A folder that cannot be created: its parent is a file.
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := NewAuditor(policy.Audit{}, filepath.Join(file, "audit.jsonl"), nil); err == nil {
		t.Error("NewAuditor under a file succeeded, want an error")
	}
	if err := (&Auditor{}).Write(Record{}); err == nil || !strings.Contains(err.Error(), "kind") {
		t.Errorf("Write without kind: err = %v, want one naming the kind", err)
	}
}

func TestCallRecord(t *testing.T) {
	start := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	now := start.Add(1500 * time.Millisecond)
	tests := []struct {
		name string
		ex   Exchange
		herr error
		want Record
	}{
		{
			name: "ok call",
			ex: Exchange{
				Session: "s1", Upstream: "gh", Method: "tools/call", Name: "search",
				Start: start, Branch: "b1", Parent: "root-s1", Depth: 1,
				ArgTokens: 5, ResultTokens: 300, DeliveredTokens: 310,
				Redactions: map[string]int{"github-pat": 2}, BudgetUsed: 310, BudgetTotal: 1000,
				UpstreamLatency: 250 * time.Millisecond, Outcome: OutcomeOK,
			},
			want: Record{
				Time: now, Kind: KindCall, Session: "s1", Branch: "b1", Parent: "root-s1", Depth: 1,
				Upstream: "gh", Method: "tools/call", Tool: "search",
				ArgTokens: 5, ResultTokens: 300, DeliveredTokens: 310,
				Redactions: map[string]int{"github-pat": 2}, BudgetUsed: 310, BudgetTotal: 1000,
				Outcome: OutcomeOK, LatencyMS: 1500, UpstreamLatencyMS: 250,
			},
		},
		{
			name: "cut",
			ex:   Exchange{Method: "tools/call", Name: "read", Outcome: OutcomeCut, CutHandle: "h-1", ResultTokens: 900, DeliveredTokens: 100},
			want: Record{Time: now, Kind: KindCall, Method: "tools/call", Tool: "read", Outcome: OutcomeCut, CutHandle: "h-1", ResultTokens: 900, DeliveredTokens: 100},
		},
		{
			name: "handler error without outcome",
			ex:   Exchange{Method: "prompts/get", Name: "p"},
			herr: errors.New("upstream gone"),
			want: Record{Time: now, Kind: KindCall, Method: "prompts/get", Tool: "p", Outcome: OutcomeError, Error: "upstream gone"},
		},
		{
			name: "ex.Err wins over RPCError",
			ex:   Exchange{Method: "tools/call", Outcome: OutcomeRefused, Err: errors.New("ErrBranchClosed: b1 is closed"), RPCError: errors.New("other")},
			want: Record{Time: now, Kind: KindCall, Method: "tools/call", Outcome: OutcomeRefused, Error: "ErrBranchClosed: b1 is closed"},
		},
		{
			name: "rpc error on one line",
			ex:   Exchange{Method: "tools/call", RPCError: errors.New("bad\nthing")},
			want: Record{Time: now, Kind: KindCall, Method: "tools/call", Outcome: OutcomeError, Error: "bad thing"},
		},
		{
			name: "resource uri loses credentials",
			ex:   Exchange{Method: "resources/read", Name: "https://user:pw@host/x?token=abc#frag"},
			want: Record{Time: now, Kind: KindCall, Method: "resources/read", Tool: "https://host/x", Outcome: OutcomeOK},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := callRecord(&tt.ex, tt.herr, now)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestShortenAndSafeURI(t *testing.T) {
	long := strings.Repeat("é", 300) // 600 bytes
	tests := []struct {
		name, got, want string
	}{
		{"short", shorten("a\tb\x00c", 10), "a b c"},
		{"cut at rune", shorten(long, 11), "éééé…"},
		{"invalid utf8", shorten("a\xffb", 10), "a\uFFFDb"},
		{"plain uri", safeURI("file:///tmp/a.txt"), "file:///tmp/a.txt"},
		{"query", safeURI("db://x/tables?password=p"), "db://x/tables"},
		{"unparsable", safeURI("%zz://u:p@h/a?k=v"), "h/a"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: got %q, want %q", tt.name, tt.got, tt.want)
		}
	}
	if got := shorten(long, maxErrorLen); len(got) > maxErrorLen {
		t.Errorf("shorten kept %d bytes, want at most %d", len(got), maxErrorLen)
	}
}

// TestAuditInterceptorOrder pins that the record is in the log before the
// response leaves the audit interceptor, and that it holds no content.
func TestAuditInterceptorOrder(t *testing.T) {
	au, path := newTestAuditor(t, policy.Audit{Fsync: "always"})
	const secret = "sk-live-THIS-MUST-NOT-APPEAR"
	inner := func(_ context.Context, ex *Exchange) error {
		ex.Result = json.RawMessage(`{"content":[{"type":"text","text":"` + secret + `"}]}`)
		ex.ResultTokens, ex.DeliveredTokens, ex.Outcome = 12, 12, OutcomeOK
		ex.Branch, ex.Depth = "b7", 2
		return nil
	}
	var seen []byte
	released := func(next Handler) Handler {
		return func(ctx context.Context, ex *Exchange) error {
			err := next(ctx, ex)
			b, rerr := os.ReadFile(path)
			if rerr != nil {
				t.Errorf("reading the log as the response is released: %v", rerr)
			}
			seen = b
			return err
		}
	}
	h := Chain(inner, released, Audit(au))
	ex := &Exchange{
		Session: "s", Upstream: "fs", Method: "tools/call", Name: "read_file",
		Args: json.RawMessage(`{"path":"` + secret + `"}`), Params: json.RawMessage(`{"x":"` + secret + `"}`),
		Start: time.Now(),
	}
	if err := h(context.Background(), ex); err != nil {
		t.Fatal(err)
	}
	if bytes.Count(seen, []byte("\n")) != 1 {
		t.Fatalf("log at release = %q, want one record", seen)
	}
	if bytes.Contains(seen, []byte("THIS-MUST-NOT-APPEAR")) {
		t.Errorf("audit record holds content: %s", seen)
	}
	var rec Record
	if err := json.Unmarshal(seen, &rec); err != nil {
		t.Fatal(err)
	}
	if rec.Branch != "b7" || rec.Depth != 2 || rec.Tool != "read_file" || rec.ResultTokens != 12 {
		t.Errorf("record = %+v", rec)
	}
}

func TestAuditorBranchEvent(t *testing.T) {
	au, path := newTestAuditor(t, policy.Audit{Fsync: "never"})
	at := time.Date(2025, 3, 1, 12, 0, 0, 0, time.FixedZone("x", 3600))
	au.BranchEvent(context.Background(), fold.Event{
		Time: at, Kind: "forced", Session: "s", Branch: "b2", Parent: "b1", Depth: 2,
		Status: fold.StatusForced, Reason: fold.ReasonBudget, Level: "critical",
		Used: 1000, Budget: 1000, Tokens: 42, Err: errors.New("ErrBudgetExceeded"),
	})
	if err := au.Close(); err != nil {
		t.Fatal(err)
	}
	recs, _ := readAll(t, path)
	want := []Record{{
		Time: at.UTC(), Kind: KindBranch, Session: "s", Branch: "b2", Parent: "b1", Depth: 2,
		Event: "forced", Status: "forced", Reason: fold.ReasonBudget, Level: "critical",
		BudgetUsed: 1000, BudgetTotal: 1000, Tokens: 42, Error: "ErrBudgetExceeded",
	}}
	if !reflect.DeepEqual(recs, want) {
		t.Errorf("got  %+v\nwant %+v", recs, want)
	}
}

// TestAuditExchangeEvents: the branch events of an audited exchange are in
// the log, before its call record, once the exchange ends (written with it
// in one write); an event emitted once its records are written, or for
// another auditor's exchange, goes to the log at once; and a handler that
// panics still leaves its events in the log.
func TestAuditExchangeEvents(t *testing.T) {
	for _, fsync := range []string{"always", "interval", "never"} {
		t.Run(fsync, func(t *testing.T) {
			au, path := newTestAuditor(t, policy.Audit{Fsync: fsync, FsyncInterval: policy.Duration(time.Millisecond)})
			other, otherPath := newTestAuditor(t, policy.Audit{Fsync: "never"})
			at := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
			var exCtx context.Context
			inner := func(ctx context.Context, ex *Exchange) error {
				exCtx = ctx
				au.BranchEvent(ctx, fold.Event{Time: at, Kind: "created", Session: "s", Branch: "b2", Parent: "b1", Depth: 1})
				au.BranchEvent(ctx, fold.Event{Kind: "warning", Session: "s", Branch: "b1", Level: "caution"})
				other.BranchEvent(ctx, fold.Event{Time: at, Kind: "created", Session: "o", Branch: "b9"})
				ex.Branch = "b1"
				return nil
			}
			h := Chain(inner, Audit(au))
			ex := &Exchange{Session: "s", Upstream: "foldproxy", Method: "tools/call", Name: "branch_create", Start: time.Now()}
			if err := h(context.Background(), ex); err != nil {
				t.Fatal(err)
			}
			// After the exchange: straight to the log.
			au.BranchEvent(exCtx, fold.Event{Time: at, Kind: "returned", Session: "s", Branch: "b2"})

			recs, st := readAll(t, path)
			if st.Skipped != 0 {
				t.Errorf("skipped %d lines", st.Skipped)
			}
			var got []string
			for _, r := range recs {
				got = append(got, r.Kind+"/"+r.Event+"/"+r.Branch)
			}
			want := []string{"branch/created/b2", "branch/warning/b1", "call//b1", "branch/returned/b2"}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("records %v, want %v", got, want)
			}
			if !recs[0].Time.Equal(at) || recs[0].Parent != "b1" || recs[0].Depth != 1 || recs[0].Session != "s" {
				t.Errorf("the batched event = %+v", recs[0])
			}
			if recs[1].Time.IsZero() || recs[1].Time.After(recs[2].Time) || recs[1].Level != "caution" {
				t.Errorf("an event without a time gets the time it was emitted, before its call record's: %+v, call at %v", recs[1], recs[2].Time)
			}
			orecs, _ := readAll(t, otherPath)
			if len(orecs) != 1 || orecs[0].Branch != "b9" {
				t.Errorf("the other auditor's log = %+v, want its one event", orecs)
			}
		})
	}
	t.Run("panic", func(t *testing.T) {
		au, path := newTestAuditor(t, policy.Audit{Fsync: "never"})
		inner := func(ctx context.Context, ex *Exchange) error {
			au.BranchEvent(ctx, fold.Event{Kind: "created", Session: "s", Branch: "b2"})
			panic("handler failed")
		}
		h := Chain(inner, Audit(au))
		func() {
			defer func() {
				if v := recover(); v != "handler failed" {
					t.Errorf("recovered %v, want the handler's panic", v)
				}
			}()
			_ = h(context.Background(), &Exchange{Session: "s", Method: "tools/call"})
		}()
		recs, _ := readAll(t, path)
		if len(recs) != 1 || recs[0].Kind != KindBranch || recs[0].Branch != "b2" {
			t.Errorf("log after a panic = %+v, want the event", recs)
		}
	})
}
