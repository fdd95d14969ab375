// Command bench is foldproxy's benchmark harness: it builds the binary, the
// replay server, the scripted model server and a bare stdio relay, runs ten
// sections against them and in process, and prints one table on stdout (logs
// go to stderr), ending with a summary of issue 13's targets.
//
//	go run -tags gore2regex ./e2e/cmd/bench [-rounds N] [-quick] [-json FILE] [-only SECTION,...]
//
// Sections: overhead (per-call latency through the proxy against the same
// server directly, with a bare byte-copying relay as the floor), pipeline
// (scrub/count/full-chain throughput on real tool output), branch
// (branch_create/branch_return latency), cut (a 10 MB result cut into an 8K
// budget), archive (RSS of the process holding the store, idle and after
// 3,000 results of 100 KB), memory (RSS with 1,000 HTTP sessions holding
// 10,000 branches), startup (exec to a served tools/list with three
// upstreams; exec to the first tools/list with one dead and one slow
// upstream, cold and warm; the relay's memory; three sessions on one
// project against three separate proxies), model (first streamed byte of a Messages API answer through
// the model front against the scripted model server directly) and
// transparent (the same through the forward proxy, against base-URL mode
// and direct; RSS with 100 tunnelled connections) and cost (what foldproxy's
// own words cost the agent, in exact tokens: a branch's fixed cost, the fold
// tool definitions, the catalogue against direct, and the share of the main
// thread folding saves on the replay, before and after the compact answers)
// and replay (automatic folding on the trajectories played as Claude Code
// conversations by an agent that never branches, against the same sent
// directly: billed input under prompt caching, context at the end and at
// the peak, prefix stability, folds and recalls; and the time the model
// front adds to a growing 200-turn conversation).
//
// Every figure is measured in the same run as its baseline, in alternating
// rounds, and reported as the median over rounds. Targets are printed beside
// the figures; they are never assertions. Loopback only.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"time"
)

// sections in the order they run.
var sections = []struct {
	name string
	run  func(context.Context, *env, *results) error
}{
	{"overhead", runOverhead},
	{"pipeline", runPipeline},
	{"branch", runBranchOps},
	{"cut", runCut},
	{"archive", runArchive},
	{"memory", runMemory},
	{"startup", runStartup},
	{"model", runModel},
	{"transparent", runTransparent},
	{"cost", runCost},
	{"replay", runReplay},
}

func main() {
	os.Exit(run())
}

func run() int {
	rounds := flag.Int("rounds", 5, "rounds per measurement; each figure is the median over rounds")
	quick := flag.Bool("quick", false, "fewer calls, sessions and rounds: a smoke run of every section")
	jsonOut := flag.String("json", "", "also write the results as JSON to this file (- for stdout)")
	only := flag.String("only", "", "comma-separated sections to run: overhead, pipeline, branch, cut, archive, memory, startup, model, transparent, cost, replay")
	data := flag.String("data", "", "trajectory file (default e2e/testdata/trajectories/swe-dev.jsonl.gz from the repository root)")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of this process (the in-process sections: pipeline, cut) to this file")
	worker := flag.Bool("scrub-worker", false, "internal: run as the stdlib-regexp scrub child of the pipeline section")
	base := flag.String("base", "", "another worktree of foldproxy (say, the main branch's) whose binary is measured beside this one's in the overhead section")
	profSize := flag.Int("profile", 0, "instead of the sections: make -profile-calls calls of this many bytes through foldproxy (default mode) in front of the fast server, each foldproxy process writing a CPU profile into -profile-out")
	profCalls := flag.Int("profile-calls", 100, "with -profile: how many calls")
	profOut := flag.String("profile-out", "profiles", "with -profile: the folder for the profiles")
	profBase := flag.Bool("profile-base", false, "with -profile and -base: profile the base binary")
	profArgs := flag.String("profile-args", "", "with -profile: extra arguments to foldproxy serve, space-separated (say, --standalone)")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))

	if *worker {
		if err := scrubWorker(*data); err != nil {
			log.Error("scrub worker", "err", err)
			return 1
		}
		return 0
	}

	want, unknown := parseOnly(*only)
	if unknown != "" {
		log.Error("unknown section", "section", unknown)
		return 2
	}
	if *rounds < 1 {
		log.Error("-rounds must be at least 1")
		return 2
	}
	if *quick && !isFlagSet("rounds") {
		*rounds = 3
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, 20*time.Minute)
	defer cancel()

	e, err := setup(ctx, log, *data, *base)
	if err != nil {
		log.Error("setup", "err", err)
		return 1
	}
	defer os.RemoveAll(e.tmp)
	e.quick, e.rounds = *quick, *rounds

	if *profSize > 0 {
		bin := e.proxy
		if *profBase {
			if e.base == "" {
				log.Error("-profile-base needs -base")
				return 2
			}
			bin = e.base
		}
		if err := runProfile(ctx, e, bin, *profSize, *profCalls, *profOut, strings.Fields(*profArgs)); err != nil {
			log.Error("profile", "err", err)
			return 1
		}
		return 0
	}

	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			log.Error("cpuprofile", "err", err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			log.Error("cpuprofile", "err", err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}

	start := time.Now()
	loadStart := loadAvg()
	res := runSections(ctx, log, e, want)

	addTargets(res)
	loadEnd := loadAvg()
	header := fmt.Sprintf("foldproxy bench — %s, %s/%s, %d CPUs, GOMAXPROCS %d, gitleaks regexp: %s, rounds %d%s, %.0fs, load average %s at start, %s at end",
		runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.GOMAXPROCS(0), regexEngine, e.rounds,
		map[bool]string{true: " (quick)", false: ""}[e.quick], time.Since(start).Seconds(), loadStart, loadEnd)
	res.print(os.Stdout, header)
	if *jsonOut != "" {
		meta := map[string]any{
			"go": runtime.Version(), "os": runtime.GOOS, "arch": runtime.GOARCH, "cpus": runtime.NumCPU(),
			"regexp": regexEngine, "rounds": e.rounds, "quick": e.quick, "time": start.UTC().Format(time.RFC3339),
			"seconds": time.Since(start).Seconds(), "loadavgStart": loadStart, "loadavgEnd": loadEnd,
		}
		if err := res.writeJSON(*jsonOut, meta); err != nil {
			log.Error("writing JSON", "err", err)
			return 1
		}
	}
	if len(res.errors) > 0 {
		return 1
	}
	return 0
}

// parseOnly parses -only: the sections to run (none: all), or the first
// name that is no section.
func parseOnly(only string) (want map[string]bool, unknown string) {
	want = map[string]bool{}
	if only == "" {
		return want, ""
	}
	for _, s := range strings.Split(only, ",") {
		s = strings.TrimSpace(s)
		if !slices.ContainsFunc(sections[:], func(x struct {
			name string
			run  func(context.Context, *env, *results) error
		}) bool {
			return x.name == s
		}) {
			return nil, s
		}
		want[s] = true
	}
	return want, ""
}

// runSections runs the sections in want (every one when want is empty)
// until ctx ends; a section that fails is recorded and the next one runs.
func runSections(ctx context.Context, log *slog.Logger, e *env, want map[string]bool) *results {
	res := &results{}
	for _, s := range sections {
		if len(want) > 0 && !want[s.name] {
			continue
		}
		if ctx.Err() != nil {
			break
		}
		log.Info("section", "name", s.name)
		t0 := time.Now()
		if err := s.run(ctx, e, res); err != nil {
			log.Error("section failed", "name", s.name, "err", err)
			res.fail(s.name, err)
		}
		log.Info("section done", "name", s.name, "seconds", time.Since(t0).Seconds())
	}
	return res
}

func isFlagSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) {
		if f.Name == name {
			set = true
		}
	})
	return set
}

// setup finds the repository and the data, builds the binaries and locates
// the Node servers.
func setup(ctx context.Context, log *slog.Logger, data, base string) (*env, error) {
	repo, err := findRepo()
	if err != nil {
		return nil, err
	}
	e := &env{repo: repo, log: log}
	if base != "" {
		if e.baseRepo, err = filepath.Abs(base); err != nil {
			return nil, err
		}
		if !fileExists(filepath.Join(e.baseRepo, "go.mod")) {
			return nil, fmt.Errorf("-base %s: no go.mod there", base)
		}
	}
	e.data = data
	if e.data == "" {
		e.data = filepath.Join(repo, dataRel)
	}
	if e.data, err = filepath.Abs(e.data); err != nil {
		return nil, err
	}
	if _, err := os.Stat(e.data); err != nil {
		return nil, fmt.Errorf("trajectory data: %w", err)
	}
	if e.tmp, err = os.MkdirTemp("", "foldproxy-bench-"); err != nil {
		return nil, err
	}
	log.Info("building foldproxy (-tags gore2regex) and the replay server", "into", e.tmp)
	if err := e.buildBinaries(ctx); err != nil {
		os.RemoveAll(e.tmp)
		return nil, err
	}
	node := filepath.Join(repo, "e2e", "node_modules", "node", "bin", "node")
	fs := filepath.Join(repo, "e2e", "node_modules", "@modelcontextprotocol", "server-filesystem", "dist", "index.js")
	if fileExists(node) && fileExists(fs) {
		e.node, e.fsScript = node, fs
	}
	return e, nil
}

// loadAvg returns the 1-minute load average, which says how noisy the
// machine was, or "?" when it cannot be read.
func loadAvg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	if f := strings.Fields(string(data)); len(f) > 0 {
		return f[0]
	}
	return "?"
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
