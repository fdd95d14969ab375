package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/foldproxy/foldproxy/fold"
	"github.com/foldproxy/foldproxy/fold/store"
)

// repStore is what the report reads from a state folder's store.
type repStore struct {
	Dir string `json:"dir"` // the Badger folder that was read
	// Recovered is set when the store had been left open by a process
	// that is gone (kill -9, a crash) and its log was replayed first.
	Recovered bool             `json:"recovered,omitempty"`
	Session   string           `json:"session_filter,omitempty"`
	Branches  []repStoreBranch `json:"branches"`
	// Strategy is the project's strategy score over its closed branches
	// (fold.StrategyScore).
	Strategy fold.Score `json:"strategy"`
}

// repStoreBranch is one branch record as the store holds it.
type repStoreBranch struct {
	Session     string `json:"session"`
	Branch      string `json:"branch"`
	Parent      string `json:"parent,omitempty"`
	Depth       int    `json:"depth"`
	Description string `json:"description,omitempty"`
	Status      string `json:"status"`
	Reason      string `json:"reason,omitempty"`
	BudgetUsed  int    `json:"budget_used"`
	BudgetTotal int    `json:"budget_total"` // 0: unlimited
	Calls       int    `json:"calls"`
	// Archived is the number of calls archived under the branch, which
	// branch_recall can still read.
	Archived int `json:"archived_calls"`
	// CutHandles are the handles of the branch's latest cut results (at
	// most 16: a branch's record keeps no more), CutCount all of them.
	CutHandles []string  `json:"cut_handles"`
	CutCount   int       `json:"cut_count"`
	Created    time.Time `json:"created"`
	Closed     time.Time `json:"closed,omitzero"`
	// ModelContext (roots) is the main thread's context as the model last
	// saw it on the model wire, before and after folding.
	ModelContext *fold.ModelContext `json:"model_context,omitempty"`
}

// reportArchivePage is how many archived calls are read at a time to count
// them.
const reportArchivePage = 64

// readStore opens the Badger store of the state folder dir for reading
// (store.OpenBadgerReader: read-only, or recovered first after a crash) and
// reads its branch records, of session only when not empty. dir may also
// be the Badger folder itself.
func readStore(ctx context.Context, dir, session string) (*repStore, error) {
	bdir := filepath.Join(dir, "badger")
	if fi, err := os.Stat(bdir); err != nil || !fi.IsDir() {
		if _, err := os.Stat(filepath.Join(dir, "MANIFEST")); err != nil {
			return nil, fmt.Errorf("--state %s: no Badger store in it (want %s, as serve --state %s writes): %w", dir, bdir, dir, os.ErrNotExist)
		}
		bdir = dir
	}
	st, recovered, err := store.OpenBadgerReader(bdir, nil)
	if err != nil {
		return nil, fmt.Errorf("--state %s: %w", dir, err)
	}
	defer st.Close()
	bs, err := st.Branches(ctx, session)
	if err != nil {
		return nil, fmt.Errorf("--state %s: reading branches: %w", dir, err)
	}
	out := &repStore{Dir: bdir, Session: session, Recovered: recovered, Branches: make([]repStoreBranch, 0, len(bs)), Strategy: fold.StrategyScore(bs)}
	for _, b := range bs {
		n, err := countArchived(ctx, st, b.ID)
		if err != nil {
			return nil, fmt.Errorf("--state %s: %w", dir, err)
		}
		out.Branches = append(out.Branches, repStoreBranch{
			Session: b.Session, Branch: b.ID, Parent: b.Parent, Depth: b.Depth, Description: b.Description,
			Status: string(b.Status), Reason: b.Reason, BudgetUsed: b.Used, BudgetTotal: b.Budget,
			Calls: b.Calls, Archived: n, CutHandles: append([]string{}, b.Cuts...), CutCount: b.CutCount,
			Created: b.Created, Closed: b.Closed, ModelContext: b.ModelContext,
		})
	}
	slices.SortStableFunc(out.Branches, func(x, y repStoreBranch) int {
		return cmp.Or(cmp.Compare(x.Session, y.Session), cmp.Compare(x.Depth, y.Depth), x.Created.Compare(y.Created), cmp.Compare(x.Branch, y.Branch))
	})
	return out, nil
}

// countArchived counts the archived calls of a branch, a page at a time.
func countArchived(ctx context.Context, st fold.Store, branch string) (int, error) {
	n, from := 0, 0
	for {
		calls, err := st.Calls(ctx, branch, from, reportArchivePage)
		if err != nil {
			return 0, fmt.Errorf("reading the archive of %s: %w", branch, err)
		}
		n += len(calls)
		if len(calls) < reportArchivePage {
			return n, nil
		}
		from = calls[len(calls)-1].Seq + 1
	}
}

// writeText prints the branch records as a table.
func (s *repStore) writeText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	p := func(format string, args ...any) { fmt.Fprintf(tw, format, args...) }
	how := "read-only"
	if s.Recovered {
		how = "left open by a process that is gone; its log replayed, then read"
	}
	p("State store: %s (%s)\nBranches: %d", repCell(s.Dir), how, len(s.Branches))
	if s.Session != "" {
		p(" for session %s", repCell(s.Session))
	}
	sc := s.Strategy
	p("\nStrategy score: %.3f (token efficiency %.3f x 0.4, velocity %.3f x 0.3, accuracy %.3f x 0.3) over %d closed branches, %d returned, %d force-returned",
		sc.Score, sc.TokenEfficiency, sc.Velocity, sc.Accuracy, sc.Branches, sc.Returned, sc.Forced)
	p("\n\nBranches in the store\n")
	p("SESSION\tBRANCH\tPARENT\tDEPTH\tSTATUS\tREASON\tUSED\tBUDGET\tCALLS\tARCHIVED\tCUT HANDLES\n")
	for _, b := range s.Branches {
		budget := "unlimited"
		if b.BudgetTotal > 0 {
			budget = strconv.Itoa(b.BudgetTotal)
		}
		cuts := "-"
		if len(b.CutHandles) > 0 {
			cuts = repCell(strings.Join(b.CutHandles, ","))
			if b.CutCount > len(b.CutHandles) {
				cuts = fmt.Sprintf("%d, the last: %s", b.CutCount, cuts)
			}
		}
		p("%s\t%s\t%s\t%d\t%s\t%s\t%d\t%s\t%d\t%d\t%s\n", repOrDash(b.Session), repOrDash(b.Branch), repOrDash(b.Parent),
			b.Depth, repOrDash(b.Status), repOrDash(b.Reason), b.BudgetUsed, budget, b.Calls, b.Archived, cuts)
	}
	first := true
	for _, b := range s.Branches {
		if mc := b.ModelContext; mc != nil {
			if first {
				p("\nModel context (main thread as the model last saw it)\nSESSION\tREQUESTS\tBEFORE FOLDING\tAFTER FOLDING\tBRANCHES FOLDED\n")
				first = false
			}
			p("%s\t%d\t%d\t%d\t%d\n", repOrDash(b.Session), mc.Requests, mc.TokensBefore, mc.TokensAfter, mc.Folded)
		}
	}
	return tw.Flush()
}
