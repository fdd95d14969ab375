package main

import "fmt"

// addTargets appends the summary of the targets of issues 13 and 29: each
// one taken from a row measured earlier in this run, against the baseline
// measured in the same run. A target whose section did not run is left
// out.
func addTargets(res *results) {
	const sec = "targets (issues 13, 29)"
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
	const oh = "1 call overhead"
	add("tiny call vs direct, p50", oh, "10 B p50")
	add("tiny call vs direct, p50, --standalone", oh, "10 B p50, --standalone")
	add("tiny call vs direct, p50, base", oh, "10 B p50, base")
	add("100 KB vs direct, p50", oh, "100 KB p50")
	add("100 KB vs direct, p50, base", oh, "100 KB p50, base")
	add("1 MB vs direct, p50", oh, "1 MB p50")
	add("1 MB vs direct, p50, base", oh, "1 MB p50, base")
	add("added work, 1 MB results, per CPU second", oh, "1 MB results per CPU second")
	add("added work, 1 MB results, per CPU second, base", oh, "1 MB results per CPU second, base")
	add("added work, 100 KB results, per CPU second", oh, "100 KB results per CPU second")
	if _, ok := find("2 pipeline MB/s", "full chain, GOMAXPROCS 1, per CPU second"); ok {
		add("full call path on the trajectories per core", "2 pipeline MB/s", "full chain, GOMAXPROCS 1, per CPU second")
	} else {
		add("full call path on the trajectories per core", "2 pipeline MB/s", "full chain, GOMAXPROCS 1")
	}
	add("branch_create p99 vs ping p99", "3 branch ops (stdio)", "branch_create p99")
	add("branch_return p99 vs ping p99", "3 branch ops (stdio)", "branch_return p99")
	for _, x := range res.rows {
		if x.Section == "4 archive memory" && x.Target != "" {
			add(x.Metric, x.Section, x.Metric)
		}
	}
	add("start-up to tools/list vs direct", "6 start-up", "exec to tools/list with 3 upstreams, median")
	for _, x := range out {
		res.add(x)
	}
}
