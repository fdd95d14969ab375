package main

import "fmt"

// addTargets appends the summary of issue 13's targets: each one taken
// from a row measured earlier in this run, against the baseline measured
// in the same run. A target whose section did not run is left out.
func addTargets(res *results) {
	const sec = "targets (issue 13)"
	find := func(section, metric string) (row, bool) {
		for _, x := range res.rows {
			if x.Section == section && x.Metric == metric && x.Met != "" {
				return x, true
			}
		}
		return row{}, false
	}
	var out []row
	add := func(label, section, metric string) {
		x, ok := find(section, metric)
		if !ok {
			return
		}
		y := x
		y.Section, y.Metric = sec, label
		y.Note = fmt.Sprintf("from %q, %s", section, metric)
		out = append(out, y)
	}
	add("tiny call vs direct, p50", "1 call overhead", "10 B p50")
	add("tiny call vs direct, p50, --standalone", "1 call overhead", "10 B p50, --standalone")
	add("100 KB vs direct, p50", "1 call overhead", "100 KB p50")
	add("100 KB vs direct, p50, --standalone", "1 call overhead", "100 KB p50, --standalone")
	add("1 MB vs direct, p50", "1 call overhead", "1 MB p50")
	add("1 MB vs direct, p50, --standalone", "1 call overhead", "1 MB p50, --standalone")
	if _, ok := find("2 pipeline MB/s", "full chain, GOMAXPROCS 1, per CPU second"); ok {
		add("full call path per core", "2 pipeline MB/s", "full chain, GOMAXPROCS 1, per CPU second")
	} else {
		add("full call path per core", "2 pipeline MB/s", "full chain, GOMAXPROCS 1")
	}
	add("branch_create p99 vs ping p99", "3 branch ops (stdio)", "branch_create p99")
	add("branch_return p99 vs ping p99", "3 branch ops (stdio)", "branch_return p99")
	add("RSS idle", "4 archive memory", "VmRSS idle")
	for _, x := range res.rows {
		if x.Section == "4 archive memory" && x.Target == "<= 150 MB" {
			add("RSS after the archive grew", x.Section, x.Metric)
		}
	}
	add("start-up to tools/list vs direct", "6 start-up", "exec to tools/list with 3 upstreams, median")
	for _, x := range out {
		res.add(x)
	}
}
