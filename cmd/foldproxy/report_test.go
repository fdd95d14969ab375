package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/foldproxy/foldproxy/fold"
	"github.com/foldproxy/foldproxy/fold/store"
	"github.com/foldproxy/foldproxy/intercept"
	"github.com/foldproxy/foldproxy/policy"
)

// writeReportFixture writes a small audit log through the real Auditor,
// rotated over three files, and returns its path. Two sessions: s1 works in
// its root and in three branches (b3 inside b2), s2 only in its root.
func writeReportFixture(tb testing.TB) string {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "audit.jsonl")
	au, err := intercept.NewAuditor(policy.Audit{MaxBytes: 1500, MaxFiles: 5, Fsync: "never"}, path, nil)
	if err != nil {
		tb.Fatal(err)
	}
	t0 := time.Date(2025, 6, 1, 9, 0, 0, 0, time.UTC)
	sec := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Second) }
	call := func(n int, session, branch, parent string, depth int, upstream, method, tool string, arg, result, delivered int, outcome string) intercept.Record {
		return intercept.Record{
			Time: sec(n), Kind: intercept.KindCall, Session: session, Branch: branch, Parent: parent, Depth: depth,
			Upstream: upstream, Method: method, Tool: tool,
			ArgTokens: arg, ResultTokens: result, DeliveredTokens: delivered, Outcome: outcome,
		}
	}
	event := func(n int, session, branch, parent string, depth int, kind, status, reason string, tokens int) intercept.Record {
		return intercept.Record{
			Time: sec(n), Kind: intercept.KindBranch, Session: session, Branch: branch, Parent: parent, Depth: depth,
			Event: kind, Status: status, Reason: reason, Tokens: tokens,
		}
	}
	withRedactions := func(r intercept.Record, m map[string]int) intercept.Record { r.Redactions = m; return r }
	cut := call(4, "s1", "b1", "root-s1", 1, "fs", "tools/call", "read_file", 8, 9000, 1000, intercept.OutcomeCut)
	cut.CutHandle = "cut-1"
	records := []intercept.Record{
		withRedactions(call(1, "s1", "root-s1", "", 0, "gh", "tools/call", "search", 10, 500, 500, "ok"), map[string]int{"github-pat": 1}),
		event(2, "s1", "b1", "root-s1", 1, "created", "active", "", 30),
		call(3, "s1", "b1", "root-s1", 1, "fs", "tools/call", "read_file", 8, 3000, 3000, "ok"),
		withRedactions(cut, map[string]int{"aws-access-token": 2, "github-pat": 1}),
		event(5, "s1", "b1", "root-s1", 1, "warning", "", "", 0),
		event(6, "s1", "b1", "root-s1", 1, "forced", "forced", "budget exhausted", 200),
		event(7, "s1", "b2", "root-s1", 1, "created", "active", "", 30),
		call(8, "s1", "b2", "root-s1", 1, "gh", "tools/call", "search", 12, 800, 800, "ok"),
		event(9, "s1", "b3", "b2", 2, "created", "active", "", 30),
		call(10, "s1", "b3", "b2", 2, "fs", "resources/read", "file:///repo/README.md", 0, 1200, 1200, "ok"),
		event(11, "s1", "b3", "b2", 2, "returned", "returned", "", 100),
		event(12, "s1", "b2", "root-s1", 1, "returned", "returned", "", 150),
		call(13, "s1", "root-s1", "", 0, "", "tools/call", "branch_status", 0, 50, 50, "ok"),
		call(14, "s2", "root-s2", "", 0, "gh", "tools/call", "search", 6, 400, 400, "ok"),
		call(15, "s2", "root-s2", "", 0, "gh", "tools/call", "create_issue", 30, 0, 0, "error"),
		event(16, "s2", "", "", 0, "refused", "", "", 0),
	}
	for _, r := range records {
		if err := au.Write(r); err != nil {
			tb.Fatal(err)
		}
	}
	if err := au.Close(); err != nil {
		tb.Fatal(err)
	}
	return path
}

func runReport(tb testing.TB, args ...string) (stdout, stderr string, err error) {
	tb.Helper()
	var out, errOut bytes.Buffer
	c := &reportCommand{stdout: &out, stderr: &errOut}
	err = c.Run(context.Background(), args)
	return out.String(), errOut.String(), err
}

func TestReportText(t *testing.T) {
	path := writeReportFixture(t)
	if _, err := os.Stat(path + ".1"); err != nil {
		t.Fatalf("the fixture should span rotated files: %v", err)
	}
	got, stderr, err := runReport(t, "--audit", path)
	if err != nil {
		t.Fatalf("report: %v (stderr %q)", err, stderr)
	}
	if stderr != "" {
		t.Errorf("stderr = %q, want nothing", stderr)
	}
	got = strings.Replace(got, path, "AUDIT", 1)
	want := `Audit log: AUDIT (+2 rotated)
Records: 16

Tokens by session
SESSION  CALLS  ARG  RESULT  DELIVERED  CUTS  ERRORS  BRANCHES
s1       6      38   14550   6550       1     0       3
s2       2      36   400     400        0     1       0

Tokens by branch
SESSION  BRANCH   PARENT   DEPTH  STATUS    CALLS  ARG  RESULT  DELIVERED  CUTS  ERRORS  RETURNED
s1       root-s1  -        0      -         2      10   550     550        0     0       0
s1       b1       root-s1  1      forced    2      16   12000   4000       1     0       230
s1       b2       root-s1  1      returned  1      12   800     800        0     0       180
s1       b3       b2       2      returned  1      0    1200    1200       0     0       130
s2       root-s2  -        0      -         2      36   400     400        0     1       0

Tokens by upstream
UPSTREAM     CALLS  ARG  RESULT  DELIVERED  CUTS  ERRORS
fs           3      16   13200   5200       1     0
gh           4      58   1700    1700       0     1
(foldproxy)  1      0    50      50         0     0

Tokens by tool
UPSTREAM     METHOD          TOOL                    CALLS  ARG  RESULT  DELIVERED  CUTS  ERRORS
fs           tools/call      read_file               2      16   12000   4000       1     0
gh           tools/call      search                  3      28   1700    1700       0     0
fs           resources/read  file:///repo/README.md  1      0    1200    1200       0     0
(foldproxy)  tools/call      branch_status           1      0    50      50         0     0
gh           tools/call      create_issue            1      30   0       0          0     1

Compression
tokens received inside branches  6000
tokens returned to parents       540
ratio                            11.1:1

Largest results (top 10)
TIME                  UPSTREAM     TOOL                    RESULT  DELIVERED  OUTCOME  BRANCH
2025-06-01T09:00:04Z  fs           read_file               9000    1000       cut      b1
2025-06-01T09:00:03Z  fs           read_file               3000    3000       ok       b1
2025-06-01T09:00:10Z  fs           file:///repo/README.md  1200    1200       ok       b3
2025-06-01T09:00:08Z  gh           search                  800     800        ok       b2
2025-06-01T09:00:01Z  gh           search                  500     500        ok       root-s1
2025-06-01T09:00:14Z  gh           search                  400     400        ok       root-s2
2025-06-01T09:00:13Z  (foldproxy)  branch_status           50      50         ok       root-s1

Redactions by rule
RULE              COUNT
aws-access-token  2
github-pat        2
`
	if got != want {
		t.Errorf("report differs.\n--- got\n%s\n--- want\n%s", got, want)
	}
}

func TestReportJSON(t *testing.T) {
	path := writeReportFixture(t)
	tests := []struct {
		name         string
		args         []string
		wantRecords  int
		wantSessions []string
		wantInside   int
		wantReturned int
		wantRatio    *float64
		wantLargest  int
	}{
		{"all", []string{"--json"}, 16, []string{"s1", "s2"}, 6000, 540, repPtr(6000.0 / 540), 7},
		{"session s2", []string{"--json", "--session", "s2"}, 3, []string{"s2"}, 0, 0, nil, 1},
		{"unknown session", []string{"--json", "--session", "nope"}, 0, nil, 0, 0, nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stdout, _, err := runReport(t, append([]string{"--audit", path}, tt.args...)...)
			if err != nil {
				t.Fatal(err)
			}
			var rep reportData
			dec := json.NewDecoder(strings.NewReader(stdout))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&rep); err != nil {
				t.Fatalf("decoding %s: %v", stdout, err)
			}
			if dec.More() {
				t.Error("more than one JSON value printed")
			}
			var sessions []string
			for _, s := range rep.Sessions {
				sessions = append(sessions, s.Session)
			}
			if rep.Records != tt.wantRecords || !slices.Equal(sessions, tt.wantSessions) {
				t.Errorf("records %d, sessions %q; want %d, %q", rep.Records, sessions, tt.wantRecords, tt.wantSessions)
			}
			c := rep.Compression
			if c.InsideBranches != tt.wantInside || c.Returned != tt.wantReturned || !repSameRatio(c.Ratio, tt.wantRatio) {
				t.Errorf("compression = %d/%d ratio %v, want %d/%d ratio %v", c.InsideBranches, c.Returned, repDeref(c.Ratio),
					tt.wantInside, tt.wantReturned, repDeref(tt.wantRatio))
			}
			if len(rep.LargestResults) != tt.wantLargest {
				t.Errorf("largest results = %d, want %d", len(rep.LargestResults), tt.wantLargest)
			}
			if len(rep.Files) != 3 || rep.Files[2] != path {
				t.Errorf("files = %q, want two rotated files then %s", rep.Files, path)
			}
		})
	}
}

func TestReportLargestCapped(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	var lines []string
	for i := range 25 {
		b, _ := json.Marshal(intercept.Record{Kind: intercept.KindCall, Session: "s", Tool: "t", ResultTokens: i + 1, Time: time.Unix(int64(i), 0)})
		lines = append(lines, string(b))
	}
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	stdout, _, err := runReport(t, "--audit", path, "--json")
	if err != nil {
		t.Fatal(err)
	}
	var rep reportData
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.LargestResults) != reportLargest {
		t.Fatalf("largest results = %d, want %d", len(rep.LargestResults), reportLargest)
	}
	for i, r := range rep.LargestResults {
		if want := 25 - i; r.ResultTokens != want {
			t.Errorf("largest[%d] = %d tokens, want %d", i, r.ResultTokens, want)
		}
	}
}

func TestReportSkipsGarbledLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	content := `{"time":"2025-06-01T09:00:00Z","kind":"call","session":"s","tool":"t\tx\u001b[31m","result_tokens":5,"delivered_tokens":5,"outcome":"ok"}
not json at all
{"time":"2025-06-01T09:00:01Z","kind":"ca`
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, err := runReport(t, "--audit", path)
	if err != nil {
		t.Fatalf("report failed on garbled lines: %v", err)
	}
	if want := "skipped 2 line(s)"; !strings.Contains(stderr, want) || !strings.Contains(stderr, path+":2") {
		t.Errorf("stderr = %q, want it to contain %q and %s:2", stderr, want, path)
	}
	if !strings.Contains(stdout, "Records: 1 (2 unreadable lines skipped)") {
		t.Errorf("stdout lacks the record count:\n%s", stdout)
	}
	if strings.ContainsAny(stdout, "\x1b") || !strings.Contains(stdout, "t x [31m") {
		t.Errorf("control characters of a name reached the table:\n%q", stdout)
	}
}

func TestReportErrors(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "nothere.jsonl")
	tests := []struct {
		name       string
		args       []string
		wantErr    string
		wantIs     error
		wantStderr string
	}{
		{"missing file", []string{"--audit", missing}, missing, os.ErrNotExist, ""},
		{"bad flag", []string{"--nope"}, "flag provided but not defined", nil, "Usage: foldproxy report"},
		{"extra argument", []string{"--audit", missing, "extra"}, `unexpected argument "extra"`, nil, "Usage: foldproxy report"},
		{"help", []string{"-h"}, "help requested", flag.ErrHelp, ".foldproxy beside the config file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, stderr, err := runReport(t, tt.args...)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
			}
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Errorf("err = %v, want it to wrap %v", err, tt.wantIs)
			}
			if !strings.Contains(stderr, tt.wantStderr) {
				t.Errorf("stderr = %q, want it to contain %q", stderr, tt.wantStderr)
			}
		})
	}
}

func TestReportDefaultPath(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	_, _, err := runReport(t)
	if err == nil || !strings.Contains(err.Error(), reportDefaultAudit) {
		t.Fatalf("err = %v, want one naming %s", err, reportDefaultAudit)
	}
	src := writeReportFixture(t)
	if err := os.MkdirAll(filepath.Join(dir, ".foldproxy"), 0o700); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, reportDefaultAudit), b, 0o600); err != nil {
		t.Fatal(err)
	}
	stdout, _, err := runReport(t)
	if err != nil || !strings.Contains(stdout, "Audit log: "+reportDefaultAudit) {
		t.Errorf("err = %v, stdout = %q; want the report of %s", err, stdout, reportDefaultAudit)
	}
}

func repPtr[T any](v T) *T { return &v }

func repDeref(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}

func repSameRatio(a, b *float64) bool {
	if a == nil || b == nil {
		return a == b
	}
	d := *a - *b
	return d < 1e-9 && d > -1e-9
}

// writeStoreFixture writes a state folder the way serve does (DIR/badger)
// with two sessions' branches and archived calls, closes it, and returns
// DIR.
func writeStoreFixture(tb testing.TB) string {
	tb.Helper()
	dir := tb.TempDir()
	st, err := store.OpenBadger(filepath.Join(dir, "badger"), nil)
	if err != nil {
		tb.Fatal(err)
	}
	ctx := context.Background()
	t0 := time.Date(2025, 6, 1, 9, 0, 0, 0, time.UTC)
	branches := []*fold.Branch{
		{ID: "root-s1", Session: "s1", Status: fold.StatusActive, Created: t0, Cuts: []string{"root-s1~a", "root-s1~b"}, CutCount: 30,
			ModelContext: &fold.ModelContext{TokensBefore: 48210, TokensAfter: 9120, Folded: 3, Requests: 41, At: t0}},
		{ID: "b1", Session: "s1", Parent: "root-s1", Depth: 1, Description: "read\tfiles", Status: fold.StatusForced,
			Reason: fold.ReasonBudget, Budget: 500, Used: 500, Calls: 2, Cuts: []string{"b1~abc"}, Created: t0.Add(time.Second), Closed: t0.Add(2 * time.Second)},
		{ID: "b2", Session: "s1", Parent: "b1", Depth: 2, Status: fold.StatusFailed, Reason: fold.ReasonProxyRestarted,
			Budget: 100, Used: 7, Calls: 1, Created: t0.Add(1500 * time.Millisecond)},
		{ID: "root-s2", Session: "s2", Status: fold.StatusActive, Created: t0},
	}
	for _, b := range branches {
		if err := st.PutBranch(ctx, b); err != nil {
			tb.Fatal(err)
		}
	}
	for i := range 70 { // more than one page of the archive
		if _, err := st.AppendCall(ctx, "b1", &fold.CallRecord{Time: t0, Upstream: "fs", Method: "tools/call", Name: "read", Result: fmt.Sprintf(`{"n":%d}`, i)}); err != nil {
			tb.Fatal(err)
		}
	}
	if _, err := st.AppendCall(ctx, "b2", &fold.CallRecord{Time: t0, Upstream: "fs", Method: "tools/call", Name: "read", Result: `{}`}); err != nil {
		tb.Fatal(err)
	}
	if err := st.Close(); err != nil {
		tb.Fatal(err)
	}
	return dir
}

func TestReportState(t *testing.T) {
	dir := writeStoreFixture(t)
	got, stderr, err := runReport(t, "--state", dir)
	if err != nil {
		t.Fatalf("report --state: %v (stderr %q)", err, stderr)
	}
	got = strings.Replace(got, filepath.Join(dir, "badger"), "STORE", 1)
	want := `State store: STORE (read-only)
Branches: 4
Strategy score: 0.000 (token efficiency 0.000 x 0.4, velocity 0.000 x 0.3, accuracy 0.000 x 0.3) over 1 closed branches, 0 returned, 1 force-returned

Branches in the store
SESSION  BRANCH   PARENT   DEPTH  STATUS  REASON            USED  BUDGET     CALLS  ARCHIVED  CUT HANDLES
s1       root-s1  -        0      active  -                 0     unlimited  0      0         30, the last: root-s1~a,root-s1~b
s1       b1       root-s1  1      forced  budget exhausted  500   500        2      70        b1~abc
s1       b2       b1       2      failed  proxy restarted   7     100        1      1         -
s2       root-s2  -        0      active  -                 0     unlimited  0      0         -

Model context (main thread as the model last saw it)
SESSION  REQUESTS  BEFORE FOLDING  AFTER FOLDING  BRANCHES FOLDED
s1       41        48210           9120           3
`
	if got != want {
		t.Errorf("report --state differs.\n--- got\n%s\n--- want\n%s", got, want)
	}

	// JSON, one session.
	stdout, _, err := runReport(t, "--state", dir, "--session", "s1", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var only struct {
		Store repStore `json:"store"`
	}
	dec := json.NewDecoder(strings.NewReader(stdout))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&only); err != nil {
		t.Fatalf("decoding %s: %v", stdout, err)
	}
	var ids []string
	for _, b := range only.Store.Branches {
		ids = append(ids, b.Branch)
	}
	if !slices.Equal(ids, []string{"root-s1", "b1", "b2"}) {
		t.Errorf("branches of s1 = %q, want root-s1, b1, b2", ids)
	}
	if b := only.Store.Branches[1]; b.Status != "forced" || b.Reason != fold.ReasonBudget || b.BudgetUsed != 500 || b.BudgetTotal != 500 ||
		b.Calls != 2 || b.Archived != 70 || !slices.Equal(b.CutHandles, []string{"b1~abc"}) || b.CutCount != 1 || b.Description != "read\tfiles" {
		t.Errorf("b1 = %+v", b)
	}

	// Both: the audit report with the store beside it.
	audit := writeReportFixture(t)
	stdout, _, err = runReport(t, "--state", dir, "--audit", audit, "--json")
	if err != nil {
		t.Fatal(err)
	}
	var rep reportData
	dec = json.NewDecoder(strings.NewReader(stdout))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rep); err != nil {
		t.Fatalf("decoding %s: %v", stdout, err)
	}
	if rep.Records != 16 || rep.Store == nil || len(rep.Store.Branches) != 4 {
		t.Errorf("combined report: %d records, store %+v; want 16 records and 4 branches", rep.Records, rep.Store)
	}
	text, _, err := runReport(t, "--state", dir, "--audit", audit)
	if err != nil || !strings.Contains(text, "Tokens by branch") || !strings.Contains(text, "Branches in the store") {
		t.Errorf("combined text report (err %v) lacks one of its parts:\n%s", err, text)
	}
}

func TestReportStateErrors(t *testing.T) {
	empty := t.TempDir()
	_, _, err := runReport(t, "--state", empty)
	if err == nil || !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), empty) {
		t.Errorf("report --state on an empty folder: %v, want a not-exist error naming it", err)
	}
	// A store held open by a running proxy cannot be read.
	dir := t.TempDir()
	st, err := store.OpenBadger(filepath.Join(dir, "badger"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	_, _, err = runReport(t, "--state", dir)
	if !errors.Is(err, store.ErrStoreBusy) || !strings.Contains(err.Error(), fmt.Sprintf("process %d", os.Getpid())) {
		t.Errorf("report --state on a store in use: %v, want ErrStoreBusy naming process %d", err, os.Getpid())
	}
}
