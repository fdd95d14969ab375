package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
)

// row is one line of the results table. Value and Baseline are printed as
// they are; the numeric fields feed the JSON output.
type row struct {
	Section  string `json:"section"`
	Metric   string `json:"metric"`
	Value    string `json:"value"`
	Baseline string `json:"baseline,omitempty"`
	Ratio    string `json:"ratio,omitempty"`
	// Floor is what the cheapest possible stand-in costs against the same
	// baseline (the bare byte-copying relay in the overhead section), as a
	// ratio; FloorNum is its value in Unit.
	Floor    string  `json:"floor,omitempty"`
	FloorNum float64 `json:"floorNum,omitempty"`
	// Floor2 is the same for two bare relays in series, the floor of a
	// stdio process relaying to the daemon.
	Floor2    string  `json:"floor2,omitempty"`
	Floor2Num float64 `json:"floor2Num,omitempty"`
	Target    string  `json:"target,omitempty"`
	Met       string  `json:"met,omitempty"` // "yes", "NO" or "" (no target)
	Note      string  `json:"note,omitempty"`
	Num       float64 `json:"num"`  // the value as a number, in Unit
	Base      float64 `json:"base"` // the baseline as a number, 0 when none
	Unit      string  `json:"unit"` // ms, MB/s, MiB, KiB
}

// results gathers the rows of every section.
type results struct {
	rows   []row
	errors []string
}

func (r *results) add(x row) { r.rows = append(r.rows, x) }

func (r *results) fail(section string, err error) {
	r.errors = append(r.errors, fmt.Sprintf("%s: %v", section, err))
	r.rows = append(r.rows, row{Section: section, Metric: "FAILED", Value: "-", Note: firstLine(err.Error())})
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return truncate(s, 120)
}

// met says whether ok holds, as the table prints it.
func met(ok bool) string {
	if ok {
		return "yes"
	}
	return "NO"
}

// print writes the table.
func (r *results) print(w io.Writer, header string) {
	fmt.Fprintln(w, header)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "section\tmetric\tfoldproxy\tbaseline\tratio\tbare relay\ttwo relays\ttarget\tmet\tnote")
	fmt.Fprintln(tw, "-------\t------\t---------\t--------\t-----\t----------\t----------\t------\t---\t----")
	last := ""
	for _, x := range r.rows {
		sec := x.Section
		if sec == last {
			sec = ""
		} else if last != "" {
			fmt.Fprintln(tw, "\t\t\t\t\t\t\t\t\t")
		}
		last = x.Section
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", sec, x.Metric, x.Value, dash(x.Baseline), dash(x.Ratio), dash(x.Floor), dash(x.Floor2), dash(x.Target), dash(x.Met), x.Note)
	}
	tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// writeJSON writes the rows and the run's environment to path ("-" for stdout).
func (r *results) writeJSON(path string, meta map[string]any) error {
	doc := map[string]any{"meta": meta, "rows": r.rows, "errors": r.errors}
	data, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	data = append(data, '\n')
	if path == "-" {
		_, err = os.Stdout.Write(data)
		return err
	}
	return os.WriteFile(path, data, 0o644)
}
