package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
)

// cell makes a name safe for a table cell: control characters (tabs,
// newlines, terminal escapes from a tampered log) become spaces.
func repCell(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
}

// repOrDash shows an empty name as "-".
func repOrDash(s string) string {
	if s == "" {
		return "-"
	}
	return repCell(s)
}

// repUpstreamName shows foldproxy's own tools, which have no upstream.
func repUpstreamName(s string) string {
	if s == "" {
		return "(foldproxy)"
	}
	return repCell(s)
}

// writeText prints the report as tables.
func (rep *reportData) writeText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	p := func(format string, args ...any) { fmt.Fprintf(tw, format, args...) }
	section := func(title string) { p("\n%s\n", title) }
	sums := func(s repSums) string {
		return fmt.Sprintf("%d\t%d\t%d\t%d\t%d\t%d", s.Calls, s.ArgTokens, s.ResultTokens, s.DeliveredTokens, s.Cuts, s.Errors)
	}
	const sumsHead = "CALLS\tARG\tRESULT\tDELIVERED\tCUTS\tERRORS"

	p("Audit log: %s", repCell(rep.Files[len(rep.Files)-1]))
	if n := len(rep.Files) - 1; n > 0 {
		p(" (+%d rotated)", n)
	}
	p("\nRecords: %d", rep.Records)
	if rep.SkippedLines > 0 {
		p(" (%d unreadable lines skipped)", rep.SkippedLines)
	}
	if rep.Session != "" {
		p(" for session %s", repCell(rep.Session))
	}
	p("\n")

	section("Tokens by session")
	p("SESSION\t%s\tBRANCHES\n", sumsHead)
	for _, s := range rep.Sessions {
		p("%s\t%s\t%d\n", repOrDash(s.Session), sums(s.repSums), s.Branches)
	}

	section("Tokens by branch")
	p("SESSION\tBRANCH\tPARENT\tDEPTH\tSTATUS\t%s\tRETURNED\n", sumsHead)
	for _, b := range rep.Branches {
		p("%s\t%s\t%s\t%d\t%s\t%s\t%d\n", repOrDash(b.Session), repOrDash(b.Branch), repOrDash(b.Parent), b.Depth,
			repOrDash(b.Status), sums(b.repSums), b.ReturnedTokens)
	}

	section("Tokens by upstream")
	p("UPSTREAM\t%s\n", sumsHead)
	for _, u := range rep.Upstreams {
		p("%s\t%s\n", repUpstreamName(u.Upstream), sums(u.repSums))
	}

	section("Tokens by tool")
	p("UPSTREAM\tMETHOD\tTOOL\t%s\n", sumsHead)
	for _, t := range rep.Tools {
		p("%s\t%s\t%s\t%s\n", repUpstreamName(t.Upstream), repOrDash(t.Method), repOrDash(t.Tool), sums(t.repSums))
	}

	section("Compression")
	ratio := "n/a (no branch returned)"
	if r := rep.Compression.Ratio; r != nil {
		ratio = strconv.FormatFloat(*r, 'f', 1, 64) + ":1"
	}
	p("tokens received inside branches\t%d\n", rep.Compression.InsideBranches)
	p("tokens returned to parents\t%d\n", rep.Compression.Returned)
	p("ratio\t%s\n", ratio)

	section(fmt.Sprintf("Largest results (top %d)", reportLargest))
	p("TIME\tUPSTREAM\tTOOL\tRESULT\tDELIVERED\tOUTCOME\tBRANCH\n")
	for _, r := range rep.LargestResults {
		p("%s\t%s\t%s\t%d\t%d\t%s\t%s\n", r.Time.UTC().Format(time.RFC3339), repUpstreamName(r.Upstream), repOrDash(r.Tool),
			r.ResultTokens, r.DeliveredTokens, repOrDash(r.Outcome), repOrDash(r.Branch))
	}

	section("Redactions by rule")
	p("RULE\tCOUNT\n")
	for _, r := range rep.Redactions {
		p("%s\t%d\n", repOrDash(r.Rule), r.Count)
	}
	if len(rep.Redactions) == 0 {
		p("(none)\n")
	}
	rep.Model.writeText(p, section)
	return tw.Flush()
}

// writeText prints the model wire's part of the report.
func (m *repModel) writeText(p func(string, ...any), section func(string)) {
	if m.Total.Requests == 0 {
		return
	}
	section("Model requests by session (tokens: o200k as received and forwarded; usage and billed input as the model APIs reported them)")
	p("SESSION\tREQUESTS\tRECEIVED\tFORWARDED\tFOLDS\tFOLD SAVED\tRECALLS\tINPUT\tCACHE READ\tCACHE WRITE\tOUTPUT\tBILLED\tWITHOUT (EST.)\tSAVED\n")
	row := func(name string, s repModelSums) {
		saved := "-"
		if s.EstimatedWithout > 0 {
			saved = fmt.Sprintf("%.1f%%", 100*(1-s.Billed/s.EstimatedWithout))
		}
		p("%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%.0f\t%.0f\t%s\n", name, s.Requests, s.Received, s.Forwarded, s.Folds, s.FoldSaved, s.Recalls,
			s.Input, s.CacheRead, s.CacheWrite, s.Output, s.Billed, s.EstimatedWithout, saved)
	}
	for _, s := range m.Sessions {
		row(repOrDash(s.Session), s.repModelSums)
	}
	row("(total)", m.Total)
	if m.Total.WouldFolds > 0 || m.Total.WouldSave > 0 {
		p("observe mode, nothing folded: would have folded %d results, keeping %d tokens out of the requests\n", m.Total.WouldFolds, m.Total.WouldSave)
	}
	p("modelled input bill (o200k): %.0f forwarded, %.0f without foldproxy\n", m.Total.ModelledBilled, m.Total.ModelledWithout)
	p("estimate: %s\n", m.EstimateMethod)
	if len(m.Folds) > 0 {
		section(fmt.Sprintf("Automatic folds (newest %d)", reportFolds))
		p("TIME\tSESSION\tKIND\tTOOL\tINPUT\tTOKENS\tHANDLE\n")
		for _, f := range m.Folds {
			p("%s\t%s\t%s\t%s\t%s\t%d\t%s\n", f.Time.UTC().Format(time.RFC3339), repOrDash(f.Session), repOrDash(f.Kind), repOrDash(f.Tool),
				repOrDash(f.Brief), f.Tokens, repOrDash(f.Handle))
		}
	}
}
