package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/foldproxy/foldproxy/policy/jsonscan"
)

// importCommand moves a project's Claude Code MCP servers behind foldproxy.
//
// It reads the servers from the project's .mcp.json (or, with --from, from
// another .mcp.json-style file or from ~/.claude.json), and with --write it
// writes them byte for byte into foldproxy's config, rewrites .mcp.json to a
// single entry that runs foldproxy, and rewrites the project's permission
// rules to the proxied tool names. Without --write it changes nothing and
// prints what it would do.
//
// Every file it changes is backed up first (<file>.bak-<UTC timestamp>) and
// replaced atomically (temporary file, fsync, rename), so a failure never
// leaves a half-written file behind.
type importCommand struct {
	stdout, stderr io.Writer
	// home is the user's home folder; "" means os.UserHomeDir().
	home string
	// cwd is the working folder; "" means os.Getwd().
	cwd string
	// now stamps backup names; nil means time.Now. Tests pin it.
	now func() time.Time
	// exe is the foldproxy binary the new .mcp.json runs; "" means the one
	// running (os.Executable). checkStart checks that it starts; nil means
	// running "<exe> version".
	exe        string
	checkStart func(exe string) error
	// pickPort chooses the daemon's address for a project; nil means
	// impPickPort (a free port derived from the project's path).
	pickPort func(project string) string
}

// Run parses args and performs the import. It returns flag.ErrHelp for -h.
func (c *importCommand) Run(ctx context.Context, args []string) error {
	fset := flag.NewFlagSet("import", flag.ContinueOnError)
	fset.SetOutput(c.stderr)
	from := fset.String("from", "", "Claude Code config to import from: a .mcp.json-style file or ~/.claude.json (default <project>/.mcp.json)")
	write := fset.Bool("write", false, "apply the changes; without it nothing is changed and the plan is printed")
	project := fset.String("project", "", "project folder (default the current folder)")
	name := fset.String("name", "foldproxy", "name of the foldproxy entry in .mcp.json")
	out := fset.String("out", "", "foldproxy config file to write (default <project>/foldproxy.json)")
	fset.Usage = func() {
		fmt.Fprint(fset.Output(), "Usage: foldproxy import [--from PATH] [--write] [--project DIR] [--name ENTRY] [--out FILE]\n\n")
		fset.PrintDefaults()
	}
	if err := fset.Parse(args); err != nil {
		return err
	}
	if fset.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q (flags only; see foldproxy import -h)", fset.Arg(0))
	}
	opts, err := c.resolve(*from, *project, *name, *out)
	if err != nil {
		return err
	}
	if opts.binary, err = c.binary(); err != nil {
		return err
	}
	var buf bytes.Buffer
	plan, err := buildImportPlan(opts, &buf)
	if err == nil && plan != nil {
		err = plan.run(ctx, &buf, *write)
	}
	if _, werr := c.stdout.Write(buf.Bytes()); werr != nil && err == nil {
		err = fmt.Errorf("writing output: %w", werr)
	}
	return err
}

// importOptions are the resolved, absolute inputs of one import.
type importOptions struct {
	home, project string
	from          string // the config to read
	fromDefault   bool   // from is <project>/.mcp.json because --from was not given
	mcpJSON       string // <project>/.mcp.json, the file rewritten to run foldproxy
	out           string // foldproxy's config
	outDefault    bool   // out is the default, not --out
	name          string // the foldproxy entry's name
	binary        string // the foldproxy binary .mcp.json runs, absolute
	now           time.Time
	pickPort      func(project string) string
}

// resolve turns the flags into absolute paths and checks the entry name.
func (c *importCommand) resolve(from, project, name, out string) (importOptions, error) {
	var o importOptions
	cwd := c.cwd
	if cwd == "" {
		wd, err := os.Getwd()
		if err != nil {
			return o, fmt.Errorf("finding the current folder: %w", err)
		}
		cwd = wd
	}
	home := c.home
	if home == "" {
		if h, err := os.UserHomeDir(); err == nil {
			home = h
		}
	}
	abs := func(p string) string {
		if p == "~" || strings.HasPrefix(p, "~/") || strings.HasPrefix(p, `~\`) {
			if home != "" {
				p = filepath.Join(home, p[1:])
			}
		}
		if !filepath.IsAbs(p) {
			p = filepath.Join(cwd, p)
		}
		return filepath.Clean(p)
	}
	if name == "" || !impNameRE.MatchString(name) {
		return o, fmt.Errorf("--name %q: want letters, digits, '_' or '-' only (it becomes the mcp__%s__ prefix of every tool name)", name, name)
	}
	o.home, o.name = home, name
	o.project = cwd
	if project != "" {
		o.project = abs(project)
	}
	o.mcpJSON = filepath.Join(o.project, ".mcp.json")
	o.from = o.mcpJSON
	o.fromDefault = from == ""
	if from != "" {
		o.from = abs(from)
	}
	o.out = filepath.Join(o.project, "foldproxy.json")
	o.outDefault = out == ""
	if out != "" {
		o.out = abs(out)
	}
	if impSamePath(o.out, o.mcpJSON) || impSamePath(o.out, o.from) {
		return o, fmt.Errorf("--out %s: foldproxy's config must be a file of its own, not the .mcp.json it replaces or the config imported from", o.out)
	}
	now := time.Now
	if c.now != nil {
		now = c.now
	}
	o.now = now()
	o.pickPort = c.pickPort
	if o.pickPort == nil {
		o.pickPort = impPickPort
	}
	return o, nil
}

// binary returns the absolute path of the foldproxy binary that the
// project's .mcp.json will run: the one running this import. Claude Code
// starts MCP servers with its own PATH, where a bare "foldproxy" may not
// be; a binary that go run built in a temporary folder is refused, since it
// is gone once go run ends.
func (c *importCommand) binary() (string, error) {
	exe := c.exe
	if exe == "" {
		e, err := os.Executable()
		if err != nil {
			return "", fmt.Errorf("finding the foldproxy binary to put in .mcp.json: %w", err)
		}
		if r, err := filepath.EvalSymlinks(e); err == nil {
			e = r
		}
		exe = e
	}
	if strings.Contains(exe, string(filepath.Separator)+"go-build") {
		return "", fmt.Errorf("this foldproxy runs from a temporary build (%s) that .mcp.json cannot run later; install it first, then run import with the installed binary:\n    make install    # or: go install -tags gore2regex ./cmd/foldproxy\n    \"$(go env GOPATH)/bin/foldproxy\" import", exe)
	}
	check := c.checkStart
	if check == nil {
		check = impCheckStarts
	}
	if err := check(exe); err != nil {
		return "", fmt.Errorf("the foldproxy binary %s does not start (%v); reinstall it with make install and run import again", exe, err)
	}
	return exe, nil
}

// impCheckStarts runs "<exe> version" and checks that it answers.
func impCheckStarts(exe string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, exe, "version").CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s version: %w: %s", exe, err, strings.TrimSpace(string(out)))
	}
	if !strings.HasPrefix(string(out), "foldproxy ") {
		return fmt.Errorf("%s version printed %.80q, not foldproxy's version", exe, out)
	}
	return nil
}

// impPrivateConfig is where the servers imported from a user-level file
// (~/.claude.json, which may hold API keys and bearer tokens) are written:
// a file of the user's own, outside the project, so that no secret is one
// "git add" from being published.
func impPrivateConfig(home, project string) string {
	sum := sha256.Sum256([]byte(project))
	base := impClaudeName(filepath.Base(project))
	return filepath.Join(home, ".config", "foldproxy", "projects", base+"-"+hex.EncodeToString(sum[:4]), "foldproxy.json")
}

// impNameRE matches the characters Claude Code keeps in an MCP server name
// when it builds tool names; any other character becomes '_'.
var impNameRE = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// impClaudeName returns a server name as it appears in Claude Code's tool
// names and permission rules (mcp__<name>__<tool>).
func impClaudeName(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r == '_' || r == '-' || ('a' <= r && r <= 'z') || ('A' <= r && r <= 'Z') || ('0' <= r && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

// impMaxPrefix is the length past which the prefix mcp__<name>__<server><sep>
// leaves too little of Claude Code's 64-character tool-name limit for the
// upstream's own tool names.
const impMaxPrefix = 40

// impCount renders n things, in the plural unless n is 1.
func impCount(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return strconv.Itoa(n) + " " + thing + "s"
}

// impQuote quotes a rule for display.
func impQuote(s string) string { return string(jsonscan.Quote(s)) }

// impShellQuote quotes s for a POSIX shell when it needs quoting.
func impShellQuote(s string) string {
	if s != "" && impNameRE.MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
