package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
)

// runStartupSlow is the second half of section 6: an agent's first
// tools/list when one upstream is dead (its command does not exist) and one
// is slow (it never comes up during the measurement: a shell loop waits for
// a file the bench never writes), beside one that starts at once (replay).
// Measured from exec of "foldproxy serve" (a relay) to the answers of
// initialize and of the first tools/list, sent as an agent sends them:
// cold (no daemon: the relay starts one) and warm (the project's daemon is
// up, held by another session). The baseline is what the agent waits for
// the ready server without foldproxy: exec of the replay server to its
// tools/list (the agent starts each server on its own, so the dead and the
// slow one hold nothing). Also the relay's memory, and the processes and
// memory of three sessions on one project against three separate
// (--standalone) proxies.
func runStartupSlow(ctx context.Context, e *env, res *results, threeCfg string, threeWant []string) error {
	const sec = "6 start-up"
	gate := filepath.Join(e.tmp, "startup-gate-never-opened")
	servers := map[string]any{
		"ready": e.replayEntry(),
		"dead":  map[string]any{"command": filepath.Join(e.tmp, "no-such-server")},
		"slow": map[string]any{"command": "sh", "args": []string{"-c", `while [ ! -e "$0" ]; do sleep 0.05; done; exec "$@"`,
			gate, e.replay, "-data", e.data}},
	}
	cfg, err := e.writeConfig("startup-slow.json", servers, benchSettings())
	if err != nil {
		return err
	}
	first := func(state string, keep bool) (slowRound, *mcpPeer, error) {
		return e.startupFirst(ctx, cfg, state, keep)
	}
	cold := func() (slowRound, error) {
		state, err := e.stateDir("startup-slow")
		if err != nil {
			return slowRound{}, err
		}
		r, _, err := first(state, false)
		return r, err
	}
	// The warm daemon: a session that stays for the whole measurement.
	warmState, err := e.stateDir("startup-warm")
	if err != nil {
		return err
	}
	_, holder, err := first(warmState, true)
	if err != nil {
		return err
	}
	defer holder.close()
	warm := func() (slowRound, error) {
		r, _, err := first(warmState, false)
		return r, err
	}
	direct := func() (time.Duration, error) {
		t0 := time.Now()
		p, err := connectStdio(ctx, "direct replay", e.replay, "-data", e.data)
		if err != nil {
			return 0, err
		}
		defer p.close()
		if _, err := listTools(ctx, p); err != nil {
			return 0, err
		}
		return time.Since(t0), nil
	}
	// One untimed round of each first.
	if _, err := cold(); err != nil {
		return err
	}
	if _, err := direct(); err != nil {
		return err
	}
	var colds, warms []slowRound
	var dx []time.Duration
	for r := range e.rounds {
		steps := []func() error{
			func() error { x, err := cold(); colds = append(colds, x); return err },
			func() error { x, err := warm(); warms = append(warms, x); return err },
			func() error { d, err := direct(); dx = append(dx, d); return err },
		}
		// Rotate the order from round to round.
		for i := range steps {
			if err := steps[(i+r)%len(steps)](); err != nil {
				return err
			}
		}
	}
	d50 := median(dx)
	startupSlowRows(res, sec, colds, warms, d50)
	return runThreeSessions(ctx, e, res, threeCfg, threeWant)
}

// slowRound is one measured start of a relay (section 6).
type slowRound struct {
	init, list time.Duration
	ready      bool // the first tools/list had the ready upstream's tools
	mem        map[string]int64
	relayCPU   time.Duration // user+system time of the relay at its first tools/list
	daemonCPU  time.Duration // and of the daemon
}

// startupFirst runs a relay on cfg and state to its first tools/list, as
// an agent does: initialize (declaring roots, as Claude Code does), then
// tools/list at once. With keep, the relay is left running and returned.
func (e *env) startupFirst(ctx context.Context, cfg, state string, keep bool) (slowRound, *mcpPeer, error) {
	var r slowRound
	t0 := time.Now()
	p, err := startStdio("foldproxy startup-slow", e.proxy, "serve", "--config", cfg, "--state", state, "--log-level", "warn")
	if err != nil {
		return r, nil, err
	}
	_, err = p.Initialize(ctx, mcp.InitializeRequest{Params: mcp.InitializeParams{
		ProtocolVersion: protocolVersion,
		ClientInfo:      mcp.Implementation{Name: "foldproxy-bench", Version: "1.0.0"},
		Capabilities: mcp.ClientCapabilities{Roots: &struct {
			ListChanged bool `json:"listChanged,omitempty"`
		}{ListChanged: true}},
	}})
	if err != nil {
		p.close()
		return r, nil, fmt.Errorf("%s: initialize: %w%s", p.name, err, p.stderr.tail())
	}
	r.init = time.Since(t0)
	names, err := listTools(ctx, p)
	if err != nil {
		p.close()
		return r, nil, fmt.Errorf("%s: tools/list: %w%s", p.name, err, p.stderr.tail())
	}
	r.list = time.Since(t0)
	r.ready = slices.Contains(names, "ready__emit")
	if slices.ContainsFunc(names, func(n string) bool { return strings.HasPrefix(n, "slow__") }) {
		p.close()
		return r, nil, fmt.Errorf("the slow upstream's tools are listed, but it cannot have started: %v", names)
	}
	if r.mem, err = procMemory(p.pid()); err != nil {
		p.close()
		return r, nil, err
	}
	// CPU time does not grow with the machine's load as wall time
	// does: the relay's, and the daemon's (which on a cold start
	// is all start-up).
	if r.relayCPU, err = procCPU(p.pid()); err != nil {
		p.close()
		return r, nil, err
	}
	if pid, err := daemonPid(state); err == nil {
		r.daemonCPU, _ = procCPU(pid)
	}
	if !keep {
		p.close()
		p = nil
	}
	return r, p, nil
}

// startupSlowRows adds section sec's rows: the cold and warm rounds'
// times against d50, the direct start's median, their CPU time and the
// relay's memory.
func startupSlowRows(res *results, sec string, colds, warms []slowRound, d50 time.Duration) {
	pick := func(rs []slowRound, f func(slowRound) time.Duration) time.Duration {
		xs := make([]time.Duration, len(rs))
		for i, r := range rs {
			xs[i] = f(r)
		}
		return median(xs)
	}
	readyIn := func(rs []slowRound) int {
		n := 0
		for _, r := range rs {
			if r.ready {
				n++
			}
		}
		return n
	}
	for _, c := range []struct {
		name string
		rs   []slowRound
	}{{"cold (the relay starts the daemon)", colds}, {"warm (daemon up)", warms}} {
		l50, i50 := pick(c.rs, func(r slowRound) time.Duration { return r.list }), pick(c.rs, func(r slowRound) time.Duration { return r.init })
		res.add(row{Section: sec, Metric: "exec to first tools/list, 1 dead + 1 slow + 1 ready upstream, " + c.name + ", median",
			Value: ms(l50), Baseline: ms(d50) + " direct (ready server)", Ratio: ratio(float64(l50), float64(d50)),
			Num: msf(l50), Base: msf(d50), Unit: "ms", Target: "<= 1000 ms", Met: met(l50 <= time.Second),
			Note: fmt.Sprintf("initialize answered at %s; the ready upstream's tools were in the first list in %d of %d rounds; the slow one's in none", ms(i50), readyIn(c.rs), len(c.rs))})
	}
	c50 := func(rs []slowRound, f func(slowRound) time.Duration) string { return ms(pick(rs, f)) }
	res.add(row{Section: sec, Metric: "CPU time at the first tools/list (user+system), median",
		Value:    "relay " + c50(colds, func(r slowRound) time.Duration { return r.relayCPU }) + ", daemon " + c50(colds, func(r slowRound) time.Duration { return r.daemonCPU }) + " (cold)",
		Baseline: "relay " + c50(warms, func(r slowRound) time.Duration { return r.relayCPU }) + " (warm)",
		Num:      msf(pick(colds, func(r slowRound) time.Duration { return r.relayCPU + r.daemonCPU })), Unit: "ms",
		Note: "what an idle machine would wait for, roughly: the wall times above grow with the load, CPU time does not (10 ms ticks)"})
	// The relay's memory, after its first tools/list (cold rounds). VmRSS
	// counts the binary's pages in the page cache, which every foldproxy
	// process maps and none owns: the target is on RssAnon, the memory the
	// relay itself holds, and VmRSS is shown with it and with Pss.
	mem := map[string]int64{}
	for _, f := range []string{"VmRSS", "VmHWM", "RssAnon", "Pss"} {
		xs := make([]int64, len(colds))
		for i, r := range colds {
			xs[i] = r.mem[f]
		}
		mem[f] = median(xs)
	}
	memRow := func(f string) row {
		return row{Section: sec, Metric: "relay (stdio foldproxy serve) " + f + ", median", Value: mib(mem[f]), Num: float64(mem[f]) / (1 << 20), Unit: "MiB"}
	}
	vm := memRow("VmRSS")
	vm.Note = fmt.Sprintf("of which %s is the relay's own (RssAnon) and the rest mostly the binary's pages in the page cache, shared by every foldproxy process; Pss, its own pages plus its share of the shared ones: %s",
		mib(mem["RssAnon"]), mib(mem["Pss"]))
	own := memRow("RssAnon")
	own.Target, own.Met = "< 20 MiB", met(mem["RssAnon"] < 20<<20)
	own.Note = "the relay's own memory (anonymous pages: heap, stacks, runtime); VmRSS " + mib(mem["VmRSS"]) + " also counts shared file pages"
	pss := memRow("Pss")
	pss.Note = "shared pages divided among the processes mapping them"
	for _, x := range []row{vm, memRow("VmHWM"), own, pss} {
		res.add(x)
	}
}

// runThreeSessions starts three stdio sessions on one project (three
// relays, one daemon, one set of upstreams) and, as the baseline, three
// separate --standalone proxies (each with its own upstreams), and counts
// their processes and memory once every session lists its tools.
func runThreeSessions(ctx context.Context, e *env, res *results, cfg string, want []string) error {
	const sec = "6 start-up"
	measure := func(standalone bool) (procs int, rss, pss int64, err error) {
		var peers []*mcpPeer
		defer func() {
			for _, p := range peers {
				p.close()
			}
		}()
		shared, err := e.stateDir("three")
		if err != nil {
			return 0, 0, 0, err
		}
		var roots []int
		for i := range 3 {
			state := shared
			args := []string{"serve", "--config", cfg, "--log-level", "warn"}
			if standalone {
				if state, err = e.stateDir("three-" + strconv.Itoa(i)); err != nil {
					return 0, 0, 0, err
				}
				args = append(args, "--standalone")
			}
			p, err := connectStdio(ctx, "foldproxy session "+strconv.Itoa(i), e.proxy, append(args, "--state", state)...)
			if err != nil {
				return 0, 0, 0, err
			}
			peers = append(peers, p)
			if err := waitTools(ctx, p, want...); err != nil {
				return 0, 0, 0, err
			}
			roots = append(roots, p.pid())
		}
		if !standalone {
			pid, err := daemonPid(shared)
			if err != nil {
				return 0, 0, 0, err
			}
			roots = append(roots, pid)
		}
		for _, pid := range withDescendants(roots) {
			m, err := procMemory(pid)
			if err != nil {
				continue // a process that ended meanwhile
			}
			procs++
			rss += m["VmRSS"]
			pss += m["Pss"]
		}
		return procs, rss, pss, nil
	}
	n1, r1, p1, err := measure(false)
	if err != nil {
		return err
	}
	n3, r3, p3, err := measure(true)
	if err != nil {
		return err
	}
	res.add(row{Section: sec, Metric: "3 sessions on one project: processes", Value: strconv.Itoa(n1), Baseline: strconv.Itoa(n3) + " (3 separate proxies)",
		Ratio: ratio(float64(n1), float64(n3)), Num: float64(n1), Base: float64(n3), Unit: "processes",
		Note: "foldproxy processes and the upstream processes under them, once every session lists its tools"})
	res.add(row{Section: sec, Metric: "3 sessions on one project: summed VmRSS", Value: mib(r1), Baseline: mib(r3) + " (3 separate proxies)",
		Ratio: ratio(float64(r1), float64(r3)), Num: float64(r1) / (1 << 20), Base: float64(r3) / (1 << 20), Unit: "MiB"})
	res.add(row{Section: sec, Metric: "3 sessions on one project: summed Pss", Value: mib(p1), Baseline: mib(p3) + " (3 separate proxies)",
		Ratio: ratio(float64(p1), float64(p3)), Num: float64(p1) / (1 << 20), Base: float64(p3) / (1 << 20), Unit: "MiB",
		Note: "Pss shares the binaries' pages among the processes that map them: the memory the sessions really cost"})
	return nil
}

// procMemory reads VmRSS, VmHWM and RssAnon from /proc/<pid>/status and Pss
// from /proc/<pid>/smaps_rollup, in bytes.
func procMemory(pid int) (map[string]int64, error) {
	m, err := procStatus(pid, "VmRSS", "VmHWM", "RssAnon")
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return nil, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "Pss:"); ok {
			var n int64
			if _, err := fmt.Sscanf(strings.TrimSpace(v), "%d kB", &n); err == nil {
				m["Pss"] = n << 10
			}
		}
	}
	if _, ok := m["Pss"]; !ok {
		return nil, fmt.Errorf("/proc/%d/smaps_rollup: no Pss", pid)
	}
	return m, nil
}

// withDescendants returns roots and every process under them.
func withDescendants(roots []int) []int {
	children := map[int][]int{}
	ents, _ := os.ReadDir("/proc")
	for _, d := range ents {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + d.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 2 {
			continue
		}
		if ppid, err := strconv.Atoi(f[1]); err == nil {
			children[ppid] = append(children[ppid], pid)
		}
	}
	seen := map[int]bool{}
	var out []int
	var walk func(int)
	walk = func(pid int) {
		if seen[pid] {
			return
		}
		seen[pid] = true
		out = append(out, pid)
		for _, c := range children[pid] {
			walk(c)
		}
	}
	for _, r := range roots {
		walk(r)
	}
	return out
}

// daemonPid reads the pid of the daemon of state folder dir from its lock.
func daemonPid(dir string) (int, error) {
	b, err := os.ReadFile(filepath.Join(dir, "daemon.lock"))
	if err != nil {
		return 0, fmt.Errorf("the daemon's pid: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("the daemon's pid in daemon.lock: %q", b)
	}
	return pid, nil
}

// procCPU returns the user and system time process pid has used
// (/proc/<pid>/stat, in clock ticks of 10 ms).
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, s)
	}
	// After the command: state (field 3) ... utime (14), stime (15).
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, s)
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, s)
	}
	return time.Duration(ut+st) * 10 * time.Millisecond, nil
}
