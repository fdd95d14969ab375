package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/foldproxy/foldproxy/fold"
	"github.com/foldproxy/foldproxy/fold/store"
)

// testGuard stands for the HTTP front's guard: the bearer token "tok".
func testGuard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok" {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// TestUIHandler: the page and its data go through the guard; a browser's
// token in /ui?token= is kept in a cookie and dropped from the address;
// /ui/data holds report --json's aggregation and each session's tree, the
// root first and children after their parents.
func TestUIHandler(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	audit := filepath.Join(dir, "audit.jsonl")
	recs := []string{
		`{"time":"2026-01-01T00:00:00Z","kind":"branch","event":"created","session":"s1","branch":"b-1","parent":"root-1","depth":1,"tokens":40}`,
		`{"time":"2026-01-01T00:00:01Z","kind":"call","session":"s1","branch":"b-1","parent":"root-1","depth":1,"upstream":"fs","method":"tools/call","tool":"read","result_tokens":900,"delivered_tokens":900,"outcome":"ok","redactions":{"aws-access-token":1}}`,
		`{"time":"2026-01-01T00:00:02Z","kind":"branch","event":"returned","session":"s1","branch":"b-1","parent":"root-1","depth":1,"status":"returned","tokens":60}`,
	}
	if err := os.WriteFile(audit, []byte(strings.Join(recs, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	st := store.NewMemStore()
	now := time.Now()
	for _, b := range []*fold.Branch{
		{ID: "b-2", Session: "s1", Parent: "root-1", Depth: 1, Status: fold.StatusActive, Budget: 8192, Used: 10, Created: now.Add(2 * time.Second), Ord: 2, Deadline: now.Add(time.Minute)},
		{ID: "b-1", Session: "s1", Parent: "root-1", Depth: 1, Status: "returned", Budget: 6000, Used: 950, Created: now.Add(time.Second), Ord: 1},
		{ID: "b-11", Session: "s1", Parent: "b-1", Depth: 2, Status: "returned", Budget: 1000, Used: 5, Created: now.Add(1500 * time.Millisecond), Ord: 1},
		{ID: "root-1", Session: "s1", Status: fold.StatusActive, Created: now},
	} {
		if err := st.PutBranch(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	srv := httptest.NewServer(newUIHandler(audit, st, testGuard, slog.New(slog.DiscardHandler)))
	defer srv.Close()
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(path string, cookie *http.Cookie) *http.Response {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		if cookie != nil {
			req.AddCookie(cookie)
		}
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	if resp := get("/ui", nil); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("/ui without the token: %d, want 401", resp.StatusCode)
	}
	if resp := get("/ui?token=wrong", nil); resp.StatusCode != http.StatusUnauthorized || len(resp.Cookies()) != 0 {
		t.Errorf("/ui with a wrong token: %d, cookies %v", resp.StatusCode, resp.Cookies())
	}
	resp := get("/ui?token=tok", nil)
	cookies := resp.Cookies()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/ui" || len(cookies) != 1 || !cookies[0].HttpOnly || cookies[0].SameSite != http.SameSiteStrictMode {
		t.Fatalf("/ui?token=tok: %d to %q, cookies %v", resp.StatusCode, resp.Header.Get("Location"), cookies)
	}
	page := get("/ui", cookies[0])
	body, _ := io.ReadAll(page.Body)
	if page.StatusCode != http.StatusOK || !strings.Contains(string(body), `<script src="/ui/app.js"`) || !strings.Contains(page.Header.Get("Content-Security-Policy"), "default-src 'self'") {
		t.Errorf("/ui with the cookie: %d %q", page.StatusCode, body)
	}
	if js := get("/ui/app.js", cookies[0]); js.StatusCode != http.StatusOK || !strings.Contains(js.Header.Get("Content-Type"), "javascript") {
		t.Errorf("/ui/app.js: %d %s", js.StatusCode, js.Header.Get("Content-Type"))
	}
	if nf := get("/ui/../serve.go", cookies[0]); nf.StatusCode == http.StatusOK {
		t.Error("a path outside the page's files was served")
	}
	data := get("/ui/data", cookies[0])
	var d uiData
	if err := json.NewDecoder(data.Body).Decode(&d); err != nil {
		t.Fatal(err)
	}
	if len(d.Report.Sessions) != 1 || d.Report.Sessions[0].DeliveredTokens != 900 || d.Report.Compression.Returned != 100 ||
		len(d.Report.Redactions) != 1 || d.Report.Redactions[0].Count != 1 || d.Report.Model.Sessions == nil {
		t.Errorf("report part: %+v", d.Report)
	}
	var order []string
	for _, b := range d.Sessions[0].Branches {
		order = append(order, b.ID)
	}
	if len(d.Sessions) != 1 || strings.Join(order, ",") != "root-1,b-1,b-11,b-2" || d.Sessions[0].Branches[3].Deadline.IsZero() {
		t.Errorf("trees: %+v (order %v)", d.Sessions, order)
	}
}
