package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/foldproxy/foldproxy/intercept"
)

// reportDefaultAudit is the audit log in the default state folder, which
// serve puts beside the config file.
const reportDefaultAudit = ".foldproxy/audit.jsonl"

// reportLargest is how many of the largest results the report lists.
const reportLargest = 10

const reportUsage = `Usage: foldproxy report [--audit FILE] [--state DIR] [--session S] [--json]

Summarises foldproxy's token-accounting audit log, with its rotated files
FILE.N … FILE.1: tokens by session, branch, upstream and tool, the
compression achieved by branches, the largest results and redactions.

With --state it reads the branch records from the state folder DIR (the
--state of serve; its Badger store, DIR/badger, is opened read-only): every
branch with its session, parent, depth, status, reason, budget used and
total, calls, archived calls and cut handles. Stop the proxy first: the
store can be read only while no proxy holds it. A store left open by a
proxy that is gone (kill -9, a crash) has its log replayed first, as the
proxy's next start would, and is then read. With --state alone only the
branches are printed; give --audit too for both.

FILE defaults to .foldproxy/audit.jsonl, the log in the default state
folder, which is .foldproxy beside the config file: run report from the
config file's folder, or pass --audit (audit.path or stateDir may have moved
it).

Flags:
`

// reportCommand prints the token-accounting report of an audit log.
type reportCommand struct {
	stdout, stderr io.Writer
}

// Run parses the flags, reads the log and prints the report.
func (c *reportCommand) Run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("report", flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	fs.Usage = func() {
		fmt.Fprint(c.stderr, reportUsage)
		fs.PrintDefaults()
	}
	path := fs.String("audit", reportDefaultAudit, "the audit log `FILE`")
	session := fs.String("session", "", "report on session `S` only")
	state := fs.String("state", "", "read the branch records of the state folder `DIR` (read-only; stop the proxy first; a store left by kill -9 is recovered first)")
	asJSON := fs.Bool("json", false, "print one JSON object instead of tables")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	auditSet := false
	fs.Visit(func(f *flag.Flag) { auditSet = auditSet || f.Name == "audit" })

	var store *repStore
	if *state != "" {
		var err error
		if store, err = readStore(ctx, *state, *session); err != nil {
			return err
		}
		if !auditSet {
			if *asJSON {
				enc := json.NewEncoder(c.stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(struct {
					Store *repStore `json:"store"`
				}{store})
			}
			return store.writeText(c.stdout)
		}
	}

	files, err := intercept.AuditFiles(*path)
	if err != nil {
		return err
	}
	agg := newRepAggregator(*session)
	st, err := intercept.ReadAuditStats(files, func(r intercept.Record) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		agg.add(r)
		return nil
	})
	if err != nil {
		return err
	}
	if st.Skipped > 0 {
		fmt.Fprintf(c.stderr, "foldproxy report: warning: skipped %d line(s) that are not audit records (first at %s)\n",
			st.Skipped, st.FirstSkipped)
	}
	rep := agg.reportData(files, st)
	rep.Store = store
	if *asJSON {
		enc := json.NewEncoder(c.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	if err := rep.writeText(c.stdout); err != nil {
		return err
	}
	if store != nil {
		fmt.Fprintln(c.stdout)
		return store.writeText(c.stdout)
	}
	return nil
}

type repSession struct {
	Session string `json:"session"`
	repSums
	Branches int `json:"branches"` // branches created
}

type repBranch struct {
	Session string `json:"session"`
	Branch  string `json:"branch"`
	Parent  string `json:"parent,omitempty"`
	Depth   int    `json:"depth"`
	Status  string `json:"status,omitempty"`
	Reason  string `json:"reason,omitempty"`
	repSums
	// ReturnedTokens are the tokens its parent received for the branch:
	// the branch_create and branch_return answers, as charged to it.
	ReturnedTokens int `json:"returned_tokens"`

	first time.Time // first record, for ordering
}

type repUpstream struct {
	Upstream string `json:"upstream"`
	repSums
}

type repTool struct {
	Upstream string `json:"upstream"`
	Method   string `json:"method"`
	Tool     string `json:"tool"`
	repSums
}

type repCompression struct {
	// InsideBranches is the sum of delivered tokens of calls attributed to
	// branches other than the root.
	InsideBranches int `json:"tokens_inside_branches"`
	// Returned is what parents received for their branches instead of
	// what the branches saw: the branch_create answers and the
	// branch_return answers (message and return value included), as
	// charged to the parents.
	Returned int `json:"tokens_returned"`
	// Ratio is InsideBranches/Returned; nil when nothing was returned.
	Ratio *float64 `json:"ratio"`
}

type repResult struct {
	Time            time.Time `json:"time"`
	Session         string    `json:"session"`
	Branch          string    `json:"branch"`
	Upstream        string    `json:"upstream"`
	Method          string    `json:"method"`
	Tool            string    `json:"tool"`
	ResultTokens    int       `json:"result_tokens"`
	DeliveredTokens int       `json:"delivered_tokens"`
	Outcome         string    `json:"outcome"`
}

type repRedaction struct {
	Rule  string `json:"rule"`
	Count int    `json:"count"`
}

// reportData is everything the report prints, in text or as JSON.
type reportData struct {
	Files          []string       `json:"files"`
	Session        string         `json:"session_filter,omitempty"`
	Records        int            `json:"records"`
	SkippedLines   int            `json:"skipped_lines"`
	Sessions       []repSession   `json:"sessions"`
	Branches       []repBranch    `json:"branches"`
	Upstreams      []repUpstream  `json:"upstreams"`
	Tools          []repTool      `json:"tools"`
	Compression    repCompression `json:"compression"`
	LargestResults []repResult    `json:"largest_results"`
	Redactions     []repRedaction `json:"redactions"`
	// Store holds the branch records of the state folder, with --state.
	Store *repStore `json:"store,omitempty"`
	// Model is the model wire: per model session and in total.
	Model repModel `json:"model"`
}

// repModel is the model wire's part of the report.
type repModel struct {
	Sessions []repModelSession `json:"sessions"`
	Total    repModelSums      `json:"total"`
	// Folds are the automatic folds decided, oldest first (the newest
	// reportFolds).
	Folds []repFold `json:"folds"`
	// EstimateMethod says how EstimatedWithout is made.
	EstimateMethod string `json:"estimate_method"`
}

// reportFolds bounds the folds listed.
const reportFolds = 200

type repModelSession struct {
	Session string `json:"session"`
	repModelSums
}

// repFold is one automatic fold in the report.
type repFold struct {
	Time    time.Time `json:"time"`
	Session string    `json:"session"`
	intercept.FoldNote
}

// modelEstimateMethod is repModel.EstimateMethod.
const modelEstimateMethod = "Each request's billed input as the model API reported it, scaled by the ratio of two modelled bills of its input in o200k tokens at the cache prices: " +
	"without foldproxy (the conversation as the client sent it, the session's previous request read from the cache and the growth written) " +
	"over as forwarded (read up to the first message that differs from the session's previous forwarded request, the rest written); " +
	"for an answer that reports no cache read or write, by the ratio of the tokens the client sent to those forwarded."
