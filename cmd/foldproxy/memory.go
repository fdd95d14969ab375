package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/foldproxy/foldproxy/fold"
	"github.com/foldproxy/foldproxy/fold/memory"
	foldstore "github.com/foldproxy/foldproxy/fold/store"
	"github.com/foldproxy/foldproxy/intercept/secrets"
	"github.com/foldproxy/foldproxy/intercept/tokens"
	"github.com/foldproxy/foldproxy/policy"
)

// memoryCommand lets a person inspect and curate the memories the agent
// will be shown: foldproxy memory list|show|forget|export|import.
type memoryCommand struct {
	stdin          io.Reader
	stdout, stderr io.Writer
}

const memoryUsage = `Usage: foldproxy memory <list|show|forget|export|import> [flags] [args]

  list                 one line per memory: id, kind, confidence, origin, principal, flags, title
  show ID...           every field of the given memories, as JSON
  forget ID...         delete the given memories
  export [--out FILE]  every memory as JSON lines (stdout by default)
  import FILE          add memories from JSON lines (or - for stdin); they are
                       scrubbed and flagged again, marked imported (untrusted),
                       and merged into near-duplicates

Flags (before or after the verb's arguments):
  --config FILE   the proxy's configuration (memory settings, default state folder)
  --state DIR     the state folder (default: .foldproxy beside the config)
  --project P     the project (default: memory.project, else the config folder's name)
  --all           list or export every project
  --json          list as JSON lines

The embedded store is a Badger database that one process opens at a time:
stop the proxy first (with the qdrant backend the proxy may keep running).
`

// memoryFlags are the flags of foldproxy memory.
type memoryFlags struct {
	configPath, stateDir, project, out string
	all, asJSON                        bool
}

// Run implements command.
func (c *memoryCommand) Run(ctx context.Context, args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(c.stdout, memoryUsage)
		if len(args) == 0 {
			return errors.New("a verb is required: list, show, forget, export or import")
		}
		return nil
	}
	verb := args[0]
	switch verb {
	case "list", "show", "forget", "export", "import":
	default:
		return fmt.Errorf("unknown verb %q: want list, show, forget, export or import", verb)
	}
	fl, rest, err := c.parse(verb, args[1:])
	if err != nil {
		return err
	}
	settings, set, dir, err := memorySettings(fl)
	if err != nil {
		return err
	}
	if set.Project == "" && !fl.all && verb != "show" && verb != "forget" {
		if verb == "import" {
			return errors.New("import needs a project: give --project or --config")
		}
		fl.all = true
	}
	writes := verb == "forget" || verb == "import"
	logger := slog.New(slog.NewTextHandler(c.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

	var store fold.Store
	if set.Backend == "badger" {
		path := filepath.Join(dir, "badger")
		var bs *foldstore.BadgerStore
		var err error
		if writes {
			bs, err = foldstore.OpenBadger(path, logger)
		} else {
			bs, err = foldstore.OpenBadgerReadOnly(path, logger)
		}
		if err != nil {
			return err
		}
		defer bs.Close()
		store = bs
	}
	counter, err := tokens.NewCounter(settings.Tokens)
	if err != nil {
		return err
	}
	deps := memoryDeps{store: store, logger: logger, count: counter.CountText}
	if verb == "import" { // imported text is scrubbed like any other
		sc, err := secrets.NewScrubber(settings.Scrub, logger)
		if err != nil {
			return err
		}
		deps.scrub = scrubFunc(sc, settings.Scrub.Timeout.D())
	}
	set.Disabled = false
	svc, err := openMemory(ctx, set, deps)
	if err != nil {
		return err
	}
	if svc == nil {
		return errors.New("the memory store could not be opened")
	}
	defer svc.Store().Close()

	switch verb {
	case "list":
		return c.list(ctx, svc, set.Project, fl)
	case "show", "forget":
		return c.showOrForget(ctx, svc.Store(), verb, rest)
	case "export":
		return c.export(ctx, svc.Store(), set.Project, fl)
	default: // import
		return c.importFile(ctx, svc, rest)
	}
}

// parse parses the flags of a verb, which may come before or after the
// verb's arguments, and returns the arguments.
func (c *memoryCommand) parse(verb string, args []string) (memoryFlags, []string, error) {
	var fl memoryFlags
	fs := flag.NewFlagSet("memory "+verb, flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	fs.StringVar(&fl.configPath, "config", "", "the proxy's configuration `FILE`")
	fs.StringVar(&fl.stateDir, "state", "", "the state folder `DIR`")
	fs.StringVar(&fl.project, "project", "", "the `PROJECT` (default: memory.project, else the config folder's name)")
	fs.BoolVar(&fl.all, "all", false, "every project (list, export)")
	fs.BoolVar(&fl.asJSON, "json", false, "list as JSON lines")
	fs.StringVar(&fl.out, "out", "", "export to `FILE` instead of stdout")
	fs.Usage = func() { fmt.Fprint(c.stderr, memoryUsage) }
	var rest []string
	for in := args; ; {
		if err := fs.Parse(in); err != nil {
			return fl, nil, err
		}
		if fs.NArg() == 0 {
			break
		}
		rest = append(rest, fs.Arg(0))
		in = fs.Args()[1:]
	}
	return fl, rest, nil
}

// memorySettings resolves the settings, the memory settings and the state
// folder from the flags: the config's when --config is given, else the
// defaults.
func memorySettings(fl memoryFlags) (settings policy.Settings, set policy.Memory, dir string, err error) {
	settings = policy.Default()
	set = settings.Memory
	dir = fl.stateDir
	cfgDir := ""
	if fl.configPath != "" {
		cfg, err := loadConfig(fl.configPath)
		if err != nil {
			return settings, set, dir, err
		}
		settings, set, cfgDir = cfg.Settings, cfg.Settings.Memory, cfg.Dir
		if settings.Scrub.GitleaksConfig != "" && !filepath.IsAbs(settings.Scrub.GitleaksConfig) {
			settings.Scrub.GitleaksConfig = filepath.Join(cfg.Dir, settings.Scrub.GitleaksConfig)
		}
		if dir == "" {
			dir = cfg.Settings.StateDir
			switch {
			case dir == "":
				dir = filepath.Join(cfg.Dir, ".foldproxy")
			case !filepath.IsAbs(dir):
				dir = filepath.Join(cfg.Dir, dir)
			}
		}
	}
	if dir == "" && set.Backend == "badger" {
		return settings, set, dir, errors.New("give --config or --state: where are the memories?")
	}
	if cfgDir != "" {
		set = memoryDefaults(set, cfgDir)
	} else {
		set = memoryDefaults(set, ".")
		set.Project = ""
	}
	if fl.project != "" {
		set.Project = fl.project
	}
	return settings, set, dir, nil
}

// list prints one line per memory, or JSON lines with --json.
func (c *memoryCommand) list(ctx context.Context, svc *memory.Service, project string, fl memoryFlags) error {
	mems, err := svc.Store().List(ctx, project, fl.all)
	if err != nil {
		return err
	}
	if fl.asJSON {
		return writeJSONLines(c.stdout, mems)
	}
	tw := tabwriter.NewWriter(c.stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tKIND\tCONFIDENCE\tORIGIN\tPRINCIPAL\tFLAGS\tTITLE")
	for _, m := range mems {
		flags := strings.Join(m.Suspicious, ",")
		if svc.Untrusted(m) {
			flags = strings.TrimPrefix(flags+",untrusted", ",")
		}
		fmt.Fprintf(tw, "%s\t%s\t%.2f\t%s\t%s\t%s\t%s\n", m.ID, m.Kind, m.Confidence, m.Provenance.Origin, m.Provenance.Principal, flags, oneLine(m.Title, 60))
	}
	return tw.Flush()
}

// showOrForget prints or deletes the memories ids.
func (c *memoryCommand) showOrForget(ctx context.Context, st memory.Store, verb string, ids []string) error {
	if len(ids) == 0 {
		return fmt.Errorf("%s needs at least one memory id (see foldproxy memory list)", verb)
	}
	for _, id := range ids {
		if verb == "forget" {
			if err := st.Delete(ctx, id); err != nil {
				return err
			}
			fmt.Fprintln(c.stdout, "forgot", id)
			continue
		}
		m, err := st.Get(ctx, id)
		if err != nil {
			return err
		}
		b, _ := json.MarshalIndent(m, "", "  ")
		fmt.Fprintln(c.stdout, string(b))
	}
	return nil
}

// export writes the memories as JSON lines, to --out or stdout.
func (c *memoryCommand) export(ctx context.Context, st memory.Store, project string, fl memoryFlags) error {
	mems, err := st.List(ctx, project, fl.all)
	if err != nil {
		return err
	}
	w := c.stdout
	if fl.out != "" {
		f, err := os.OpenFile(fl.out, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
		if err != nil {
			return err
		}
		defer f.Close()
		w = f
	}
	if err := writeJSONLines(w, mems); err != nil {
		return err
	}
	fmt.Fprintf(c.stderr, "exported %d memories\n", len(mems))
	return nil
}

// importFile imports the memories of one JSON lines file (- for stdin).
func (c *memoryCommand) importFile(ctx context.Context, svc *memory.Service, rest []string) error {
	if len(rest) != 1 {
		return errors.New("import needs one FILE (JSON lines, as export writes them; - for stdin)")
	}
	r := c.stdin
	if rest[0] != "-" {
		f, err := os.Open(rest[0])
		if err != nil {
			return err
		}
		defer f.Close()
		r = f
	}
	added, merged, err := importMemories(ctx, svc, r)
	fmt.Fprintf(c.stdout, "imported %d memories (%d merged into near-duplicates)\n", added, merged)
	return err
}

// importMemories reads JSON lines of memories and imports each.
func importMemories(ctx context.Context, svc *memory.Service, r io.Reader) (added, merged int, err error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" {
			continue
		}
		var m memory.Memory
		if err := json.Unmarshal([]byte(text), &m); err != nil {
			return added, merged, fmt.Errorf("line %d: not a memory: %v", line, err)
		}
		_, wasMerged, err := svc.Import(ctx, &m)
		if err != nil {
			return added, merged, fmt.Errorf("line %d: %w", line, err)
		}
		added++
		if wasMerged {
			merged++
		}
	}
	if err := sc.Err(); err != nil {
		return added, merged, fmt.Errorf("line %d: %w", line+1, err)
	}
	return added, merged, nil
}

func writeJSONLines(w io.Writer, mems []*memory.Memory) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	for _, m := range mems {
		if err := enc.Encode(m); err != nil {
			return err
		}
	}
	return nil
}

// oneLine shortens s to one line of at most n runes.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
