package main

import (
	"cmp"
	"context"
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/foldproxy/foldproxy/fold"
	"github.com/foldproxy/foldproxy/intercept"
)

// The live page, GET /ui on the HTTP listener (--listen, or the daemon's
// daemonListen), behind the same token and Host/Origin rules as /mcp. It
// is three embedded files (no CDN, works offline) and one JSON document,
// /ui/data, which the page reads every two seconds:
//
//   - report: what "foldproxy report --json" prints for the audit log the
//     process writes (the same aggregation, reportData), so the page and
//     the report show the same numbers;
//   - sessions: each session's branch tree as the state store holds it now
//     (budgets, warning levels, deadlines, status, cut handles, the model
//     context of its main thread).
//
// A browser cannot send foldproxy's token in an Authorization header: with
// a token configured, open /ui?token=<token> once; the token, once the
// guard has checked it, is kept in a cookie of its own (HttpOnly,
// SameSite=Strict, path /ui) that stands for the header from then on.

//go:embed ui/index.html ui/app.js ui/style.css
var uiFiles embed.FS

// uiTokenCookie holds foldproxy's token for the page.
const uiTokenCookie = "foldproxy_ui_token"

// uiHandler serves the page and its data.
type uiHandler struct {
	auditPath string // "-": no audit log
	store     fold.Store
	logger    *slog.Logger
	static    http.Handler

	mu     sync.Mutex
	cached *reportData
	key    string // the audit files' names, sizes and times when cached
}

// newUIHandler serves the page of a process writing auditPath, with its
// state store; guard is the HTTP front's token and Host/Origin check.
func newUIHandler(auditPath string, store fold.Store, guard func(http.Handler) http.Handler, logger *slog.Logger) http.Handler {
	sub, err := fs.Sub(uiFiles, "ui")
	if err != nil {
		panic(err) // the embedded folder is there: a build error otherwise
	}
	h := &uiHandler{auditPath: auditPath, store: store, logger: logger, static: http.FileServerFS(sub)}
	return uiTokenFromBrowser(guard(h))
}

// uiTokenFromBrowser puts the token a browser holds (the query of
// /ui?token=..., else the page's cookie) in the Authorization header the
// guard checks, unless the request has one.
func uiTokenFromBrowser(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "" {
			tok := r.URL.Query().Get("token")
			if tok == "" {
				if c, err := r.Cookie(uiTokenCookie); err == nil {
					tok = c.Value
				}
			}
			if tok != "" {
				r = r.Clone(r.Context())
				r.Header.Set("Authorization", "Bearer "+tok)
			}
		}
		next.ServeHTTP(w, r)
	})
}

func (h *uiHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Security-Policy", "default-src 'self'; style-src 'self'; script-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Referrer-Policy", "no-referrer")
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	if tok := r.URL.Query().Get("token"); tok != "" {
		// The guard accepted it: keep it for the page, and drop it from
		// the address bar.
		http.SetCookie(w, &http.Cookie{Name: uiTokenCookie, Value: tok, Path: "/ui", HttpOnly: true, SameSite: http.SameSiteStrictMode})
		http.Redirect(w, r, "/ui", http.StatusSeeOther)
		return
	}
	switch r.URL.Path {
	case "/ui", "/ui/":
		r = r.Clone(r.Context())
		r.URL.Path = "/"
		h.static.ServeHTTP(w, r)
	case "/ui/app.js", "/ui/style.css":
		r = r.Clone(r.Context())
		r.URL.Path = strings.TrimPrefix(r.URL.Path, "/ui")
		h.static.ServeHTTP(w, r)
	case "/ui/data":
		h.serveData(w, r)
	default:
		http.NotFound(w, r)
	}
}

// uiData is the document /ui/data answers.
type uiData struct {
	Generated time.Time   `json:"generated"`
	Report    *reportData `json:"report"`
	Sessions  []uiSession `json:"sessions"`
}

// uiSession is one session's branch tree, its root first, each branch
// after its parent (creation order among siblings).
type uiSession struct {
	Session  string     `json:"session"`
	Branches []uiBranch `json:"branches"`
}

// uiBranch is one branch as the store holds it now.
type uiBranch struct {
	ID          string             `json:"id"`
	Parent      string             `json:"parent,omitempty"`
	Depth       int                `json:"depth"`
	Description string             `json:"description,omitempty"`
	Status      string             `json:"status"`
	Reason      string             `json:"reason,omitempty"`
	Level       string             `json:"level"`
	Used        int                `json:"budget_used"`
	Budget      int                `json:"budget_total"` // 0: unlimited
	Calls       int                `json:"calls"`
	Created     time.Time          `json:"created"`
	Deadline    time.Time          `json:"deadline,omitzero"`
	Closed      time.Time          `json:"closed,omitzero"`
	CutHandles  []string           `json:"cut_handles,omitempty"`
	CutCount    int                `json:"cut_count,omitempty"`
	Context     *fold.ModelContext `json:"model_context,omitempty"`
}

func (h *uiHandler) serveData(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	data := uiData{Generated: time.Now().UTC(), Sessions: []uiSession{}}
	rep, err := h.report(ctx)
	if err != nil {
		h.logger.Warn("ui: reading the audit log", "err", err)
		http.Error(w, "foldproxy could not read its audit log: "+err.Error(), http.StatusInternalServerError)
		return
	}
	data.Report = rep
	if data.Sessions, err = h.sessions(ctx); err != nil {
		h.logger.Warn("ui: reading the branches", "err", err)
		http.Error(w, "foldproxy could not read its branches: "+err.Error(), http.StatusInternalServerError)
		return
	}
	b, err := json.Marshal(data)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(b)
}

// report aggregates the audit log as "foldproxy report --json" does,
// again only when one of its files changed since the last time.
func (h *uiHandler) report(ctx context.Context) (*reportData, error) {
	if h.auditPath == "-" {
		empty := newRepAggregator("").reportData([]string{}, intercept.ReadStats{})
		return empty, nil
	}
	files, err := intercept.AuditFiles(h.auditPath)
	if err != nil {
		return nil, err
	}
	var key strings.Builder
	for _, f := range files {
		if fi, err := os.Stat(f); err == nil {
			fmt.Fprintf(&key, "%s\x00%d\x00%d\n", f, fi.ModTime().UnixNano(), fi.Size())
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cached != nil && h.key == key.String() {
		return h.cached, nil
	}
	agg := newRepAggregator("")
	st, err := intercept.ReadAuditStats(files, func(r intercept.Record) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		agg.add(r)
		return nil
	})
	if err != nil {
		return nil, err
	}
	h.cached, h.key = agg.reportData(files, st), key.String()
	return h.cached, nil
}

// sessions reads every branch of the store and orders each session's as
// a tree.
func (h *uiHandler) sessions(ctx context.Context) ([]uiSession, error) {
	bs, err := h.store.Branches(ctx, "")
	if err != nil {
		return nil, err
	}
	bySession := map[string][]*fold.Branch{}
	for _, b := range bs {
		bySession[b.Session] = append(bySession[b.Session], b)
	}
	out := make([]uiSession, 0, len(bySession))
	for s, list := range bySession {
		children := map[string][]*fold.Branch{}
		var roots []*fold.Branch
		ids := map[string]bool{}
		for _, b := range list {
			ids[b.ID] = true
		}
		for _, b := range list {
			if b.Parent == "" || !ids[b.Parent] {
				roots = append(roots, b)
			} else {
				children[b.Parent] = append(children[b.Parent], b)
			}
		}
		order := func(x, y *fold.Branch) int {
			return cmp.Or(cmp.Compare(x.Ord, y.Ord), x.Created.Compare(y.Created), cmp.Compare(x.ID, y.ID))
		}
		slices.SortFunc(roots, order)
		sess := uiSession{Session: s, Branches: []uiBranch{}}
		var walk func(b *fold.Branch)
		walk = func(b *fold.Branch) {
			sess.Branches = append(sess.Branches, uiBranch{
				ID: b.ID, Parent: b.Parent, Depth: b.Depth, Description: b.Description, Status: string(b.Status),
				Reason: b.Reason, Level: b.Level, Used: b.Used, Budget: b.Budget, Calls: b.Calls,
				Created: b.Created, Deadline: b.Deadline, Closed: b.Closed,
				CutHandles: b.Cuts, CutCount: b.CutCount, Context: b.ModelContext,
			})
			kids := children[b.ID]
			slices.SortFunc(kids, order)
			for _, k := range kids {
				walk(k)
			}
		}
		for _, rt := range roots {
			walk(rt)
		}
		out = append(out, sess)
	}
	slices.SortFunc(out, func(x, y uiSession) int {
		return cmp.Or(x.Branches[0].Created.Compare(y.Branches[0].Created), cmp.Compare(x.Session, y.Session))
	})
	return out, nil
}
