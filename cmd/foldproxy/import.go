package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/foldproxy/foldproxy/policy"
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

// impServer is one mcpServers entry, kept as the raw bytes it was read as.
type impServer struct {
	name  string
	raw   []byte
	scope string // "project", "user" or "local"
}

// impSource is what a Claude Code config holds for one project.
type impSource struct {
	claudeJSON bool        // the file is ~/.claude.json-style (has "projects")
	projectKey string      // the projects key that matched, if any
	servers    []impServer // in file order, user scope first, merged
	userCount  int
	localCount int
	overridden []string // names defined in both scopes: local won
}

// impParseSource parses a Claude Code config: either a .mcp.json-style file
// ({"mcpServers": {...}}) or ~/.claude.json, whose top-level mcpServers are
// the user scope and whose projects[<abs path>].mcpServers are the local
// scope of that project. projectKeys are the spellings of the project's path
// to look for. Server entries are returned byte for byte; errors name the
// file and the JSON path that is wrong.
func impParseSource(path string, data []byte, projectKeys []string) (impSource, error) {
	var src impSource
	top, err := impTopObject(path, data)
	if err != nil {
		return src, err
	}
	projects, hasProjects := top.get("projects")
	src.claudeJSON = hasProjects || filepath.Base(path) == ".claude.json"
	if !src.claudeJSON {
		ms, ok := top.get("mcpServers")
		if !ok {
			return src, fmt.Errorf("%s: no mcpServers: want {\"mcpServers\": {\"<name>\": {...}}}", path)
		}
		servers, err := impServers(path, data, ms, []string{"mcpServers"}, "project")
		if err != nil {
			return src, err
		}
		if len(servers) == 0 {
			return src, fmt.Errorf("%s: mcpServers is empty: nothing to import", path)
		}
		src.servers = servers
		return src, nil
	}

	var user, local []impServer
	if ms, ok := top.get("mcpServers"); ok {
		if user, err = impServers(path, data, ms, []string{"mcpServers"}, "user"); err != nil {
			return src, err
		}
	}
	if hasProjects {
		if data[projects.valStart] != '{' {
			return src, fmt.Errorf("%s: projects: want an object, got %s", path, jsonscan.Kind(data[projects.valStart:]))
		}
		pm, err := impObjectMembers(data, projects.valStart)
		if err != nil {
			return src, fmt.Errorf("%s: projects: %w", path, err)
		}
		for _, k := range projectKeys {
			p, ok := pm.get(k)
			if !ok {
				continue
			}
			src.projectKey = k
			if data[p.valStart] != '{' {
				return src, fmt.Errorf("%s: %s: want an object, got %s", path, impJSONPath("projects", k), jsonscan.Kind(data[p.valStart:]))
			}
			pobj, err := impObjectMembers(data, p.valStart)
			if err != nil {
				return src, fmt.Errorf("%s: %s: %w", path, impJSONPath("projects", k), err)
			}
			if ms, ok := pobj.get("mcpServers"); ok {
				if local, err = impServers(path, data, ms, []string{"projects", k, "mcpServers"}, "local"); err != nil {
					return src, err
				}
			}
			break
		}
	}
	if len(user) == 0 && len(local) == 0 {
		where := "mcpServers (user scope)"
		if len(projectKeys) > 0 {
			where += " or " + impJSONPath("projects", projectKeys[0], "mcpServers") + " (local scope)"
		}
		return src, fmt.Errorf("%s: no mcpServers: found no servers in %s", path, where)
	}
	src.userCount, src.localCount = len(user), len(local)
	// Local scope wins over user scope, as in Claude Code. A server defined
	// in both keeps the user entry's position and takes the local bytes.
	at := make(map[string]int, len(user))
	for i, s := range user {
		at[s.name] = i
	}
	src.servers = user
	for _, s := range local {
		if i, ok := at[s.name]; ok {
			src.servers[i] = s
			src.overridden = append(src.overridden, s.name)
			continue
		}
		src.servers = append(src.servers, s)
	}
	return src, nil
}

// impServers reads an mcpServers object whose member is m; every entry must
// be an object.
func impServers(path string, data []byte, m impMember, at []string, scope string) ([]impServer, error) {
	if data[m.valStart] != '{' {
		return nil, fmt.Errorf("%s: %s: want an object of servers, got %s", path, impJSONPath(at...), jsonscan.Kind(data[m.valStart:]))
	}
	members, err := impObjectMembers(data, m.valStart)
	if err != nil {
		return nil, fmt.Errorf("%s: %s: %w", path, impJSONPath(at...), err)
	}
	servers := make([]impServer, 0, len(members.members))
	for _, e := range members.members {
		if data[e.valStart] != '{' {
			return nil, fmt.Errorf("%s: %s: server %q is %s, want an object such as {\"command\": ...} or {\"type\": \"http\", \"url\": ...}",
				path, impJSONPath(append(at[:len(at):len(at)], e.key)...), e.key, jsonscan.Kind(data[e.valStart:]))
		}
		if e.key == "" {
			return nil, fmt.Errorf("%s: %s: a server has an empty name", path, impJSONPath(at...))
		}
		servers = append(servers, impServer{name: e.key, raw: data[e.valStart:e.valEnd], scope: scope})
	}
	return servers, nil
}

// impRunsFoldproxy reports whether a server entry already runs foldproxy
// serve, so that import never wraps foldproxy in foldproxy. It returns the
// --config argument when there is one.
func impRunsFoldproxy(raw []byte) (config string, ok bool) {
	var e struct {
		Command string   `json:"command"`
		Args    []string `json:"args"`
	}
	if json.Unmarshal(raw, &e) != nil {
		return "", false
	}
	base := strings.TrimSuffix(filepath.Base(filepath.ToSlash(e.Command)), ".exe")
	if base != "foldproxy" || len(e.Args) == 0 || e.Args[0] != "serve" {
		return "", false
	}
	for i, a := range e.Args {
		if a == "--config" || a == "-config" {
			if i+1 < len(e.Args) {
				return e.Args[i+1], true
			}
		} else if v, ok := strings.CutPrefix(a, "--config="); ok {
			return v, true
		}
	}
	return "", true
}

// impFile is one file the import reads and may change.
type impFile struct {
	private bool   // create its folder 0700
	path    string // as shown to the user
	target  string // the path written: path with symlinks resolved
	exists  bool
	data    []byte
	mode    fs.FileMode
	newData []byte // nil: unchanged
	backup  string // set when the file exists and changes
	verb    string // "create", "update" or "rewrite"
	what    string // the rest of the one-line description
	details []string
}

// impReadFile reads path, following symlinks for the write target. A
// missing file is not an error.
func impReadFile(path string) (*impFile, error) {
	f := &impFile{path: path, target: path, mode: 0o644}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return f, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	f.exists, f.data = true, data
	if t, err := filepath.EvalSymlinks(path); err == nil {
		f.target = t
	}
	if st, err := os.Stat(f.target); err == nil {
		f.mode = st.Mode().Perm()
	}
	return f, nil
}

// importPlan is everything an import would change, computed before any
// file is touched.
type importPlan struct {
	files    []*impFile // in the order they are written
	removals []string   // claude mcp remove commands to print
	from     string     // the config imported from
	out      string     // foldproxy's config
	warnings []string
}

// buildImportPlan reads and checks every input, prints the plan to w and
// returns it. It returns a nil plan, after saying why, when there is nothing
// to do.
func buildImportPlan(o importOptions, w *bytes.Buffer) (*importPlan, error) {
	src, err := impReadFile(o.from)
	if err != nil {
		return nil, err
	}
	if !src.exists {
		return nil, impNotFound(o)
	}
	keys := impProjectKeys(o.project)
	source, err := impParseSource(o.from, src.data, keys)
	if err != nil {
		return nil, err
	}

	// The project's .mcp.json is rewritten; read it unless it is the source.
	mcp := src
	if !impSamePath(o.from, o.mcpJSON) {
		if mcp, err = impReadFile(o.mcpJSON); err != nil {
			return nil, err
		}
		if mcp.exists {
			others, err := impNonProxyServers(o.mcpJSON, mcp.data)
			if err != nil {
				return nil, err
			}
			if len(others) > 0 {
				return nil, fmt.Errorf("%s also defines servers (%s) that are not being imported and would be lost; run \"foldproxy import --write\" without --from first to import them, then import from %s",
					o.mcpJSON, strings.Join(others, ", "), o.from)
			}
		}
	}

	// Never wrap foldproxy in foldproxy.
	var servers []impServer
	var skipped []string
	for _, s := range source.servers {
		if cfg, ok := impRunsFoldproxy(s.raw); ok {
			note := s.name
			if cfg != "" {
				note += " (serve --config " + cfg + ")"
			}
			skipped = append(skipped, note)
			continue
		}
		servers = append(servers, s)
	}
	if len(servers) == 0 {
		fmt.Fprintf(w, "%s already runs foldproxy only: %s. Nothing to import.\n", o.from, strings.Join(skipped, ", "))
		return impModelOnlyPlan(o, source.servers)
	}
	for _, s := range servers {
		if impClaudeName(s.name) == o.name {
			return nil, fmt.Errorf("%s: server %q has the same name as the foldproxy entry; choose another with --name", o.from, s.name)
		}
	}

	var warnings []string
	plan := &importPlan{from: o.from}
	defer func() { plan.out = o.out }()

	// Servers from a user-level file go to a private file of the user's,
	// outside the project (see impPrivateConfig).
	private := false
	if source.claudeJSON && o.home != "" {
		// A project config that exists already (servers imported from the
		// project before) is where they all stay together.
		if _, err := os.Stat(o.out); o.outDefault && errors.Is(err, fs.ErrNotExist) {
			o.out = impPrivateConfig(o.home, o.project)
		}
		private = !impInside(o.out, o.project)
		if !private {
			warnings = append(warnings, fmt.Sprintf("%s is inside the project: the servers of %s may carry API keys or tokens; it is written with mode 0600 and listed in .gitignore, but keep it out of commits", o.out, o.from))
		}
	}

	// foldproxy's config: imported servers merged into what is already there.
	outFile, err := impReadFile(o.out)
	if err != nil {
		return nil, err
	}
	if source.claudeJSON {
		outFile.mode = 0o600
		outFile.private = true
	}
	outData, proxied, sep, warn, err := impBuildOut(o.out, outFile, servers)
	if err != nil {
		return nil, err
	}
	warnings = append(warnings, warn...)
	if !bytes.Equal(outData, outFile.data) {
		outFile.newData = outData
		outFile.verb = "create"
		if outFile.exists {
			outFile.verb = "update"
		}
		outFile.what = fmt.Sprintf("with %s (%s)", impCount(len(proxied), "upstream server"), strings.Join(proxied, ", "))
		plan.files = append(plan.files, outFile)
	}

	// The project's .mcp.json: one entry that runs foldproxy.
	mcpData, err := impBuildMCPJSON(o, mcp)
	if err != nil {
		return nil, err
	}
	mcp.newData = mcpData
	mcp.verb, mcp.what = "rewrite", "to run foldproxy only:"
	if !mcp.exists {
		mcp.verb = "create"
	}
	mcp.details = strings.Split(strings.TrimRight(string(mcpData), "\n"), "\n")

	// Permission rules in the project's Claude Code settings.
	var settings []*impFile
	imported := make([]string, len(servers))
	for i, s := range servers {
		imported[i] = impClaudeName(s.name)
	}
	collapse := len(proxied) == len(servers)
	for _, base := range []string{"settings.json", "settings.local.json"} {
		f, err := impReadFile(filepath.Join(o.project, ".claude", base))
		if err != nil {
			return nil, err
		}
		if !f.exists {
			continue
		}
		res, err := impRewriteSettings(f.data, impRuleMapping{servers: imported, name: o.name, sep: sep, collapse: collapse})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.path, err)
		}
		for _, wmsg := range res.warnings {
			warnings = append(warnings, f.path+": "+wmsg)
		}
		if len(res.changes) == 0 {
			continue
		}
		f.newData = res.data
		f.verb, f.what = "rewrite", impCount(len(res.changes), "permission rule")+":"
		for _, ch := range res.changes {
			if ch.removed {
				f.details = append(f.details, fmt.Sprintf("%s: %s → removed (covered by %s)", ch.at, impQuote(ch.old), impQuote(ch.new)))
			} else {
				f.details = append(f.details, fmt.Sprintf("%s: %s → %s", ch.at, impQuote(ch.old), impQuote(ch.new)))
			}
		}
		settings = append(settings, f)
	}
	// The model wire: the daemon's fixed port in foldproxy's config, and
	// Claude Code's model endpoint in .claude/settings.json.
	sf, err := impSettingsFile(o, settings)
	if err != nil {
		return nil, err
	}
	outChanged := outFile.newData != nil
	warn, err = impWireModel(o, outFile, sf)
	if err != nil {
		return nil, err
	}
	warnings = append(warnings, warn...)
	if outFile.newData != nil && !outChanged {
		outFile.verb, outFile.what = "update", "with the daemon's model front (daemonListen)"
		plan.files = append([]*impFile{outFile}, plan.files...)
	}
	if sf.newData != nil && !slices.Contains(settings, sf) {
		settings = append(settings, sf)
	}
	// Write order: the proxy's config first, so .mcp.json never points at a
	// config that is not there yet; then .mcp.json; then the rules.
	if !mcp.exists || !bytes.Equal(mcp.data, mcp.newData) {
		plan.files = append(plan.files, mcp)
	}
	plan.files = append(plan.files, settings...)

	// foldproxy's state, the backups and a config inside the project that
	// holds user-level servers stay out of git.
	ignore := []string{"/.foldproxy/", "*.bak-*"}
	if source.claudeJSON && impInside(o.out, o.project) {
		if rel, err := filepath.Rel(o.project, o.out); err == nil {
			ignore = append(ignore, "/"+filepath.ToSlash(rel))
		}
	}
	gi, err := impGitignore(filepath.Join(o.project, ".gitignore"), ignore)
	if err != nil {
		return nil, err
	}
	if gi != nil {
		plan.files = append(plan.files, gi)
	}

	if o.home != "" {
		if n := impCountHomeRules(filepath.Join(o.home, ".claude", "settings.json"), imported); n > 0 {
			warnings = append(warnings, fmt.Sprintf("%s has %d permission rules for imported servers; it applies to every project, so import leaves it unchanged: rewrite them by hand to mcp__%s__<server>%s<tool> if this project should keep them",
				filepath.Join(o.home, ".claude", "settings.json"), n, o.name, sep))
		}
	}
	for _, s := range servers {
		prefix := "mcp__" + o.name + "__" + impClaudeName(s.name) + sep
		if len(prefix) > impMaxPrefix {
			warnings = append(warnings, fmt.Sprintf("server %q: its tools will be named %s<tool> in Claude Code (%d characters before the tool name); Claude Code refuses tool names over 64 characters, so tool names over %d characters will fail; foldproxy checks the real names when it starts (a shorter --name or server name helps)",
				s.name, prefix, len(prefix), 64-len(prefix)))
		}
	}

	// Backups, named now so the dry run shows them.
	stamp := o.now.UTC().Format("20060102T150405Z")
	for _, f := range plan.files {
		if f.exists {
			f.backup = impBackupName(f.target, stamp)
		}
	}

	// The plan.
	scope := "project scope"
	if source.claudeJSON {
		switch {
		case source.userCount > 0 && source.localCount > 0:
			scope = fmt.Sprintf("user scope %d and local scope %d for %s, merged", source.userCount, source.localCount, o.project)
		case source.localCount > 0:
			scope = "local scope for " + o.project
		default:
			scope = "user scope"
		}
	}
	names := make([]string, len(servers))
	for i, s := range servers {
		names[i] = s.name
	}
	fmt.Fprintf(w, "Importing %s from %s (%s): %s\n", impCount(len(servers), "server"), o.from, scope, strings.Join(names, ", "))
	if private {
		fmt.Fprintf(w, "  they go to %s (mode 0600, outside the project): user-level servers may carry API keys and tokens\n", o.out)
	}
	fmt.Fprintf(w, "  .mcp.json will run %s\n", o.binary)
	if len(source.overridden) > 0 {
		fmt.Fprintf(w, "  defined in both scopes, the local (project) entry wins: %s\n", strings.Join(source.overridden, ", "))
	}
	if len(skipped) > 0 {
		fmt.Fprintf(w, "  skipped, already runs foldproxy: %s\n", strings.Join(skipped, ", "))
	}
	plan.warnings = warnings

	if source.claudeJSON {
		for _, s := range servers {
			// Only scopes that still hold the entry after the merge; a user
			// entry shadowed by a local one is removed too, as it would
			// otherwise keep running beside the proxy.
			plan.removals = append(plan.removals, fmt.Sprintf("claude mcp remove %s -s %s", impShellQuote(s.name), s.scope))
		}
		for _, n := range source.overridden {
			plan.removals = append(plan.removals, fmt.Sprintf("claude mcp remove %s -s user", impShellQuote(n)))
		}
	}
	return plan, nil
}

// impNotFound says where import looked for a config.
func impNotFound(o importOptions) error {
	if !o.fromDefault {
		return fmt.Errorf("no Claude Code config found: %s does not exist", o.from)
	}
	hint := ""
	if o.home != "" {
		cj := filepath.Join(o.home, ".claude.json")
		if _, err := os.Stat(cj); err == nil {
			hint = fmt.Sprintf("; for user- or local-scope servers use --from %s", cj)
		}
	}
	return fmt.Errorf("no Claude Code config found: looked for %s (project scope; pass --project DIR or --from PATH)%s", o.from, hint)
}

// impProjectKeys lists the spellings under which ~/.claude.json may key a
// project: as given, and with symlinks resolved.
func impProjectKeys(project string) []string {
	keys := []string{project, filepath.ToSlash(project)}
	if r, err := filepath.EvalSymlinks(project); err == nil {
		keys = append(keys, r, filepath.ToSlash(r))
	}
	out := keys[:0]
	seen := map[string]bool{}
	for _, k := range keys {
		if !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	return out
}

// impSamePath reports whether a and b name the same file.
func impSamePath(a, b string) bool {
	if filepath.Clean(a) == filepath.Clean(b) {
		return true
	}
	sa, ea := os.Stat(a)
	sb, eb := os.Stat(b)
	return ea == nil && eb == nil && os.SameFile(sa, sb)
}

// impNonProxyServers lists the servers of a .mcp.json-style file that do not
// run foldproxy.
func impNonProxyServers(path string, data []byte) ([]string, error) {
	top, err := impTopObject(path, data)
	if err != nil {
		return nil, err
	}
	ms, ok := top.get("mcpServers")
	if !ok {
		return nil, nil
	}
	servers, err := impServers(path, data, ms, []string{"mcpServers"}, "project")
	if err != nil {
		return nil, err
	}
	var names []string
	for _, s := range servers {
		if _, ok := impRunsFoldproxy(s.raw); !ok {
			names = append(names, s.name)
		}
	}
	return names, nil
}

// impBuildOut returns foldproxy's config with servers merged into it, the
// names of every proxied server, and the tool-name separator its settings
// use. An existing file keeps its other keys (its "foldproxy" settings
// first of all) and its servers; a server of the same name must be
// identical, apart from whitespace, or import refuses rather than choose.
func impBuildOut(path string, f *impFile, servers []impServer) (data []byte, proxied []string, sep string, warnings []string, err error) {
	sep = policy.Default().Separator
	var top impObject
	var existing []impServer
	if f.exists {
		if top, err = impTopObject(path, f.data); err != nil {
			return nil, nil, "", nil, err
		}
		if ms, ok := top.get("mcpServers"); ok {
			if existing, err = impServers(path, f.data, ms, []string{"mcpServers"}, "project"); err != nil {
				return nil, nil, "", nil, err
			}
		}
		if fp, ok := top.get(policy.Key); ok {
			s, perr := policy.Parse(f.data[fp.valStart:fp.valEnd])
			if perr != nil {
				warnings = append(warnings, fmt.Sprintf("%s: %v (foldproxy serve will refuse it until fixed; permission rules assume separator %q)", path, perr, sep))
			} else {
				sep = s.Separator
			}
		}
	}
	merged := append([]impServer(nil), existing...)
	at := make(map[string]int, len(merged))
	for i, s := range merged {
		at[s.name] = i
	}
	for _, s := range servers {
		i, ok := at[s.name]
		if !ok {
			at[s.name] = len(merged)
			merged = append(merged, s)
			continue
		}
		if !impSameJSON(merged[i].raw, s.raw) {
			return nil, nil, "", nil, fmt.Errorf("%s: %s is already defined differently there than in the import; edit one of them (or use --out) and run import again",
				path, impJSONPath("mcpServers", s.name))
		}
	}
	proxied = make([]string, len(merged))
	for i, s := range merged {
		proxied[i] = s.name
	}

	var b bytes.Buffer
	b.WriteString("{\n  \"mcpServers\": {")
	for i, s := range merged {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString("\n    ")
		b.Write(jsonscan.Quote(s.name))
		b.WriteString(": ")
		b.Write(s.raw)
	}
	if len(merged) > 0 {
		b.WriteString("\n  ")
	}
	b.WriteString("}")
	hasSettings := false
	for _, m := range top.members {
		if m.key == "mcpServers" {
			continue
		}
		if m.key == policy.Key {
			hasSettings = true
		}
		b.WriteString(",\n  ")
		b.Write(jsonscan.Quote(m.key))
		b.WriteString(": ")
		b.Write(f.data[m.valStart:m.valEnd])
	}
	if !hasSettings {
		b.WriteString(",\n  \"" + policy.Key + "\": {}")
	}
	b.WriteString("\n}\n")
	return b.Bytes(), proxied, sep, warnings, nil
}

// impBuildMCPJSON returns the project's .mcp.json with one server, named
// o.name, that runs foldproxy on o.out. Other top-level keys are kept.
func impBuildMCPJSON(o importOptions, f *impFile) ([]byte, error) {
	var b bytes.Buffer
	b.WriteString("{\n  \"mcpServers\": {\n    ")
	b.Write(jsonscan.Quote(o.name))
	b.WriteString(": {\n      \"command\": ")
	b.Write(jsonscan.Quote(o.binary))
	b.WriteString(",\n      \"args\": [\"serve\", \"--config\", ")
	b.Write(jsonscan.Quote(o.out))
	b.WriteString("]\n    }\n  }")
	if f.exists {
		top, err := impTopObject(f.path, f.data)
		if err != nil {
			return nil, err
		}
		for _, m := range top.members {
			if m.key == "mcpServers" {
				continue
			}
			b.WriteString(",\n  ")
			b.Write(jsonscan.Quote(m.key))
			b.WriteString(": ")
			b.Write(f.data[m.valStart:m.valEnd])
		}
	}
	b.WriteString("\n}\n")
	return b.Bytes(), nil
}

// impRuleMapping says how permission rules are renamed.
type impRuleMapping struct {
	servers []string // imported servers, as Claude Code names them
	name    string   // the foldproxy entry
	sep     string   // foldproxy's separator between server and tool
	// collapse permits replacing whole-server allow rules by one rule for
	// the whole proxy when they cover every server the proxy serves.
	collapse bool
}

// impRuleChange is one rewritten rule.
type impRuleChange struct {
	at       string // JSON path, such as permissions.allow[2]
	old, new string
	removed  bool // the rule is dropped; new names the rule that covers it
}

// impSettingsResult is the outcome of impRewriteSettings.
type impSettingsResult struct {
	data     []byte
	changes  []impRuleChange
	warnings []string
}

// impRewriteSettings renames the MCP permission rules of imported servers in
// a Claude Code settings file. Only the strings of permissions.allow, .deny
// and .ask that name an imported server change; every other byte of the
// file stays as it was.
//
// A tool rule mcp__S__T becomes mcp__N__S<sep>T, the name Claude Code gives
// the proxied tool. A whole-server rule (mcp__S or mcp__S__*) has no exact
// equivalent once S sits behind the proxy N:
//   - in deny and ask it becomes mcp__N__S<sep>*, a tool-name glob after the
//     literal mcp__N__ prefix, which deny and ask rules accept;
//   - in allow, Claude Code versions differ on such partial globs (some
//     refuse them in allow rules), and a rule for the whole proxy would
//     grant more than before. So when the allow list grants every proxied
//     server wholesale, those rules become the one rule mcp__N, which grants
//     exactly the same upstream tools (plus the proxy's fold tools); else
//     the rule is kept unchanged, with a warning: it no longer matches
//     anything, and Claude Code asks once per tool as usual.
func impRewriteSettings(data []byte, m impRuleMapping) (impSettingsResult, error) {
	res := impSettingsResult{data: data}
	top, err := impTopObject("", data)
	if err != nil {
		return res, err
	}
	perm, ok := top.get("permissions")
	if !ok {
		return res, nil
	}
	if data[perm.valStart] != '{' {
		return res, fmt.Errorf("permissions: want an object, got %s", jsonscan.Kind(data[perm.valStart:]))
	}
	pobj, err := impObjectMembers(data, perm.valStart)
	if err != nil {
		return res, fmt.Errorf("permissions: %w", err)
	}
	// Longest names first, so that server "a__b" wins over server "a".
	servers := append([]string(nil), m.servers...)
	sort.Slice(servers, func(i, j int) bool { return len(servers[i]) > len(servers[j]) })
	match := func(rule string) (server, tool string, whole, ok bool) {
		for _, s := range servers {
			p := "mcp__" + s
			if rule == p || rule == p+"__*" {
				return s, "", true, true
			}
			if t, found := strings.CutPrefix(rule, p+"__"); found && t != "" {
				return s, t, false, true
			}
		}
		return "", "", false, false
	}

	type edit struct {
		start, end int
		text       []byte
	}
	var edits []edit
	for _, list := range []string{"allow", "deny", "ask"} {
		arr, ok := pobj.get(list)
		if !ok {
			continue
		}
		at := "permissions." + list
		if data[arr.valStart] != '[' {
			return res, fmt.Errorf("%s: want an array of rules, got %s", at, jsonscan.Kind(data[arr.valStart:]))
		}
		elems, err := impArrayElems(data, arr.valStart)
		if err != nil {
			return res, fmt.Errorf("%s: %w", at, err)
		}
		rules := make([]string, len(elems))
		isRule := make([]bool, len(elems))
		for i, e := range elems {
			if data[e.Start] == '"' && json.Unmarshal(data[e.Start:e.End], &rules[i]) == nil {
				isRule[i] = true
			}
		}
		// Does this allow list grant every proxied server wholesale?
		whole := map[string]bool{}
		proxyRule := "mcp__" + m.name
		hasProxyRule := false
		for i := range elems {
			if !isRule[i] {
				continue
			}
			if rules[i] == proxyRule {
				hasProxyRule = true
			}
			if s, _, w, ok := match(rules[i]); ok && w {
				whole[s] = true
			}
		}
		collapse := list == "allow" && m.collapse && len(servers) > 0 && len(whole) == len(servers)
		placed := hasProxyRule
		removed := make([]bool, len(elems))
		for i, e := range elems {
			if !isRule[i] {
				continue
			}
			s, tool, w, ok := match(rules[i])
			if !ok {
				continue
			}
			elemAt := fmt.Sprintf("%s[%d]", at, i)
			var repl string
			switch {
			case !w:
				repl = "mcp__" + m.name + "__" + s + m.sep + tool
			case list != "allow":
				repl = "mcp__" + m.name + "__" + s + m.sep + "*"
			case collapse && !placed:
				repl = proxyRule
				placed = true
			case collapse:
				// Covered by the proxy rule, already in the list or placed
				// by an earlier element.
				removed[i] = true
				res.changes = append(res.changes, impRuleChange{at: elemAt, old: rules[i], new: proxyRule, removed: true})
				continue
			default:
				res.warnings = append(res.warnings, fmt.Sprintf("%s %s kept unchanged: a rule that allows one whole server behind the proxy (%s) is refused in allow rules by some Claude Code versions, and %s would also allow the other proxied servers; Claude Code will ask once per tool of %s (answer \"don't ask again\" to record it)",
					elemAt, impQuote(rules[i]), impQuote("mcp__"+m.name+"__"+s+m.sep+"*"), impQuote(proxyRule), s))
				continue
			}
			if repl == rules[i] {
				continue
			}
			res.changes = append(res.changes, impRuleChange{at: elemAt, old: rules[i], new: repl})
			edits = append(edits, edit{e.Start, e.End, jsonscan.Quote(repl)})
		}
		// Remove elements with one separating comma each: after a kept
		// element, from its end; before any kept element, up to the next
		// element's start. The ranges never overlap.
		keptBefore := false
		for i, e := range elems {
			switch {
			case !removed[i]:
				keptBefore = true
			case keptBefore:
				edits = append(edits, edit{elems[i-1].End, e.End, nil})
			case i+1 < len(elems):
				edits = append(edits, edit{e.Start, elems[i+1].Start, nil})
			default:
				edits = append(edits, edit{e.Start, e.End, nil})
			}
		}
	}
	if len(edits) == 0 {
		return res, nil
	}
	sort.Slice(edits, func(i, j int) bool { return edits[i].start < edits[j].start })
	var b bytes.Buffer
	last := 0
	for _, e := range edits {
		if e.start < last {
			return res, fmt.Errorf("internal error: overlapping edits at byte %d", e.start)
		}
		b.Write(data[last:e.start])
		b.Write(e.text)
		last = e.end
	}
	b.Write(data[last:])
	res.data = b.Bytes()
	return res, nil
}

// impCountHomeRules counts the rules for servers in the user's own Claude
// Code settings. Errors count as none: the file is only read for a warning.
func impCountHomeRules(path string, servers []string) int {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	var s struct {
		Permissions map[string]json.RawMessage `json:"permissions"`
	}
	if json.Unmarshal(data, &s) != nil {
		return 0
	}
	n := 0
	for _, list := range []string{"allow", "deny", "ask"} {
		var rules []any
		if json.Unmarshal(s.Permissions[list], &rules) != nil {
			continue
		}
		for _, r := range rules {
			rule, ok := r.(string)
			if !ok {
				continue
			}
			for _, srv := range servers {
				if rule == "mcp__"+srv || strings.HasPrefix(rule, "mcp__"+srv+"__") {
					n++
					break
				}
			}
		}
	}
	return n
}

// run prints the plan's changes and, with write, applies them: for each
// file, it checks that the file has not changed since it was read, writes
// the backup, then replaces the file atomically.
func (p *importPlan) run(ctx context.Context, w *bytes.Buffer, write bool) error {
	past := map[string]string{"create": "created", "update": "updated", "rewrite": "rewrote"}
	describe := func(f *impFile, dry bool) {
		verb := past[f.verb]
		if dry {
			verb = "would " + f.verb
		}
		fmt.Fprintf(w, "%s: %s %s\n", f.path, verb, f.what)
		for _, d := range f.details {
			fmt.Fprintf(w, "    %s\n", d)
		}
	}
	if len(p.files) == 0 {
		fmt.Fprintln(w, "Nothing to change: foldproxy already serves these servers for this project.")
		p.printWarnings(w)
		p.printRemovals(w, "If not done yet, remove")
		return nil
	}
	if !write {
		for _, f := range p.files {
			describe(f, true)
		}
		if n := p.backups(); n > 0 {
			fmt.Fprintln(w, "Backups it would make:")
			for _, f := range p.files {
				if f.backup != "" {
					fmt.Fprintf(w, "    %s → %s\n", f.target, f.backup)
				}
			}
		}
		p.printWarnings(w)
		p.printRemovals(w, "After --write, remove")
		fmt.Fprintln(w, "Dry run: nothing was changed. Run again with --write to apply.")
		return nil
	}
	for _, f := range p.files {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("stopped before writing %s: %w", f.path, err)
		}
		if err := f.apply(); err != nil {
			return err
		}
		if f.backup != "" {
			fmt.Fprintf(w, "%s: backed up to %s\n", f.path, f.backup)
		}
		describe(f, false)
	}
	// The config written must be one serve accepts.
	if _, err := loadConfig(p.out); err != nil {
		fmt.Fprintf(w, "warning: foldproxy serve will refuse %s as it is: %v\n", p.out, err)
	}
	p.printWarnings(w)
	p.printRemovals(w, "Now remove")
	fmt.Fprintln(w, "Done. Restart Claude Code (it asks once to approve the new project server).")
	return nil
}

// backups counts the backups the plan makes.
func (p *importPlan) backups() int {
	n := 0
	for _, f := range p.files {
		if f.backup != "" {
			n++
		}
	}
	return n
}

// printWarnings prints one line per warning.
func (p *importPlan) printWarnings(w *bytes.Buffer) {
	for _, m := range p.warnings {
		fmt.Fprintf(w, "warning: %s\n", m)
	}
}

// printRemovals prints the claude mcp remove commands for servers that were
// imported from ~/.claude.json, which import never edits.
func (p *importPlan) printRemovals(w *bytes.Buffer, lead string) {
	if len(p.removals) == 0 {
		return
	}
	fmt.Fprintf(w, "%s the imported servers from %s (import does not edit it), or Claude Code runs them beside the proxy; user-scope removals apply to every project:\n", lead, p.from)
	for _, r := range p.removals {
		fmt.Fprintf(w, "    %s\n", r)
	}
}

// apply backs f up and replaces it with its new content.
func (f *impFile) apply() error {
	cur, err := os.ReadFile(f.target)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if f.exists {
			return fmt.Errorf("%s was removed while import ran; nothing more written", f.path)
		}
	case err != nil:
		return fmt.Errorf("reading %s again: %w", f.path, err)
	case !f.exists || !bytes.Equal(cur, f.data):
		return fmt.Errorf("%s changed while import ran; nothing more written", f.path)
	}
	if f.backup != "" {
		if err := impWriteNew(f.backup, f.data, f.mode); err != nil {
			return fmt.Errorf("backing up %s: %w", f.path, err)
		}
	}
	if err := impWriteAtomic(f.target, f.newData, f.mode); err != nil {
		if f.backup != "" {
			return fmt.Errorf("writing %s (unchanged; backup at %s): %w", f.path, f.backup, err)
		}
		return fmt.Errorf("writing %s: %w", f.path, err)
	}
	return nil
}

// impInside reports whether path is inside dir.
func impInside(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}

// impGitignore returns the project's .gitignore with the lines it lacks
// appended, or nil when it has them all.
func impGitignore(path string, lines []string) (*impFile, error) {
	f, err := impReadFile(path)
	if err != nil {
		return nil, err
	}
	have := map[string]bool{}
	for _, l := range strings.Split(string(f.data), "\n") {
		have[strings.TrimSpace(l)] = true
	}
	var add []string
	for _, l := range lines {
		if !have[l] && !have[strings.TrimPrefix(l, "/")] {
			add = append(add, l)
		}
	}
	if len(add) == 0 {
		return nil, nil
	}
	data := append([]byte(nil), f.data...)
	if len(data) > 0 && data[len(data)-1] != '\n' {
		data = append(data, '\n')
	}
	data = append(data, "# foldproxy: its state, import's backups and private config\n"...)
	for _, l := range add {
		data = append(data, l+"\n"...)
	}
	f.newData = data
	f.verb, f.what = "update", "to ignore "+strings.Join(add, " ")
	if !f.exists {
		f.verb = "create"
	}
	return f, nil
}

// impBackupName returns <path>.bak-<stamp>, with a counter when that name
// is taken.
func impBackupName(path, stamp string) string {
	name := path + ".bak-" + stamp
	for i := 1; ; i++ {
		if _, err := os.Lstat(name); errors.Is(err, fs.ErrNotExist) {
			return name
		}
		name = fmt.Sprintf("%s.bak-%s-%d", path, stamp, i)
	}
}

// impWriteNew writes a file that must not exist yet, and syncs it.
func impWriteNew(path string, data []byte, mode fs.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// impWriteAtomic replaces path with data: it writes a temporary file in the
// same folder, syncs it and renames it over path, so readers see the old or
// the new content, never a mix. The folder is created when missing.
func impWriteAtomic(path string, data []byte, mode fs.FileMode) (err error) {
	dir := filepath.Dir(path)
	dirMode := fs.FileMode(0o755)
	if mode&0o077 == 0 {
		dirMode = 0o700 // a private file gets a private folder
	}
	if err := os.MkdirAll(dir, dirMode); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err = tmp.Write(data); err != nil {
		return err
	}
	if err = tmp.Chmod(mode); err != nil {
		return err
	}
	if err = tmp.Sync(); err != nil {
		return err
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	// Make the rename itself durable. Not every platform can sync a folder.
	if d, derr := os.Open(dir); derr == nil {
		_ = d.Sync() // best effort: the data itself is already synced
		d.Close()
	}
	return nil
}

// impMember is one member of a JSON object, located in the document.
type impMember struct {
	key              string
	valStart, valEnd int
}

// impObject is a JSON object's members in document order. A key that
// occurs twice keeps its first position and its last value, as in
// JavaScript's JSON.parse, which Claude Code uses.
type impObject struct{ members []impMember }

func (o impObject) get(key string) (impMember, bool) {
	for _, m := range o.members {
		if m.key == key {
			return m, true
		}
	}
	return impMember{}, false
}

// impTopObject checks that data is valid JSON whose top level is an object
// and returns its members. Syntax errors name path, line and column.
func impTopObject(path string, data []byte) (impObject, error) {
	prefix := ""
	if path != "" {
		prefix = path + ": "
	}
	var raw json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			// Offset counts the bytes read, the bad one included.
			bad := max(int(se.Offset)-1, 0)
			line, col := impLineCol(data, bad)
			return impObject{}, fmt.Errorf("%smalformed JSON at line %d, column %d (byte offset %d): %v", prefix, line, col, bad, se)
		}
		return impObject{}, fmt.Errorf("%smalformed JSON: %v", prefix, err)
	}
	i := jsonscan.SkipSpace(data, 0)
	if data[i] != '{' {
		return impObject{}, fmt.Errorf("%stop level is %s, want an object", prefix, jsonscan.Kind(data[i:]))
	}
	o, err := impObjectMembers(data, i)
	if err != nil {
		return impObject{}, fmt.Errorf("%s%w", prefix, err)
	}
	return o, nil
}

// impLineCol converts a byte offset to a 1-based line and column.
func impLineCol(data []byte, off int) (line, col int) {
	off = min(max(off, 0), len(data))
	line = 1 + bytes.Count(data[:off], []byte("\n"))
	col = off - bytes.LastIndexByte(data[:off], '\n')
	return line, col
}

// impObjectMembers scans the object starting at data[i]. data must be valid
// JSON (see impTopObject); the scanner still refuses to run off the end.
func impObjectMembers(data []byte, i int) (impObject, error) {
	ms, _, err := jsonscan.ObjectAt(data, i)
	if err != nil {
		return impObject{}, err
	}
	var o impObject
	at := make(map[string]int, len(ms))
	for _, m := range ms {
		if j, dup := at[m.Key]; dup {
			o.members[j].valStart, o.members[j].valEnd = m.Value.Start, m.Value.End
			continue
		}
		at[m.Key] = len(o.members)
		o.members = append(o.members, impMember{key: m.Key, valStart: m.Value.Start, valEnd: m.Value.End})
	}
	return o, nil
}

// impArrayElems scans the array starting at data[i], which must be valid.
func impArrayElems(data []byte, i int) ([]jsonscan.Span, error) {
	es, _, err := jsonscan.ArrayAt(data, i)
	return es, err
}

// impSameJSON reports whether a and b are the same JSON apart from
// insignificant whitespace.
func impSameJSON(a, b []byte) bool {
	var ca, cb bytes.Buffer
	if json.Compact(&ca, a) != nil || json.Compact(&cb, b) != nil {
		return bytes.Equal(a, b)
	}
	return bytes.Equal(ca.Bytes(), cb.Bytes())
}

// impCount renders n things, in the plural unless n is 1.
func impCount(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return strconv.Itoa(n) + " " + thing + "s"
}

// impQuote quotes a rule for display.
func impQuote(s string) string { return string(jsonscan.Quote(s)) }

var impIdentRE = regexp.MustCompile(`^[A-Za-z_$][A-Za-z0-9_$-]*$`)

// impJSONPath renders keys as a JSON path: mcpServers.github or
// projects["/home/me/p"].mcpServers.
func impJSONPath(keys ...string) string {
	var b strings.Builder
	for i, k := range keys {
		if impIdentRE.MatchString(k) {
			if i > 0 {
				b.WriteByte('.')
			}
			b.WriteString(k)
		} else {
			b.WriteString("[" + strconv.Quote(k) + "]")
		}
	}
	return b.String()
}

// impShellQuote quotes s for a POSIX shell when it needs quoting.
func impShellQuote(s string) string {
	if s != "" && impNameRE.MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// The model wire. Only the model wire folds (a returned branch leaves the
// conversation the model sees), and a stdio entry has no model front of
// its own: the project's daemon serves one for every stdio session on
// foldproxy.daemonListen. So import gives the daemon a fixed loopback
// port in foldproxy's config and points Claude Code at it in the
// project's .claude/settings.json "env": a plain "claude" in the project
// then folds with no other step. MCP_CONNECTION_NONBLOCKING=false makes
// Claude Code connect its MCP servers (foldproxy's relay, which starts
// the daemon) before its first model request.

// impModelEnv are the variables import sets in .claude/settings.json.
const (
	impBaseURLVar     = "ANTHROPIC_BASE_URL"
	impNonblockingVar = "MCP_CONNECTION_NONBLOCKING"
)

// impWireModel edits out (foldproxy's config, its newData or data) to give
// the daemon a fixed port, and settings (.claude/settings.json, which may
// not exist) to use it as Claude Code's model endpoint. It returns the
// warnings to print. A config whose daemonListen is "off" is left alone.
func impWireModel(o importOptions, out, settings *impFile) ([]string, error) {
	outData := out.data
	if out.newData != nil {
		outData = out.newData
	}
	if !out.exists && out.newData == nil {
		return nil, nil
	}
	if _, err := impTopObject(out.path, outData); err != nil {
		return nil, err
	}
	fp, ok := jsonscan.Field(outData, policy.Key)
	if !ok {
		fp = []byte("{}")
	}
	fpWasEmpty := impEmptyObject(fp)
	var warnings []string
	addr := jsonscan.StringField(fp, "daemonListen")
	switch _, port, err := net.SplitHostPort(addr); {
	case addr == policy.DaemonListenOff:
		return []string{fmt.Sprintf("%s sets daemonListen \"off\": the project's daemon serves no model front, so Claude Code's requests are not folded; remove it and run import again to wire the model endpoint", out.path)}, nil
	case err == nil && port != "0":
		// A fixed port already: keep it.
	default:
		addr = o.pickPort(o.project)
		var err error
		if fp, err = impSetMember(fp, "daemonListen", jsonscan.Quote(addr), false); err != nil {
			return nil, fmt.Errorf("%s: %w", out.path, err)
		}
	}
	url := "http://" + addr

	sd := settings.data
	if settings.newData != nil {
		sd = settings.newData
	}
	if !settings.exists && settings.newData == nil {
		sd = []byte("{}\n")
	}
	if _, err := impTopObject(settings.path, sd); err != nil {
		return nil, err
	}
	env, ok := jsonscan.Field(sd, "env")
	if !ok {
		env = []byte("{}")
	} else if t := jsonscan.TrimSpace(env); len(t) == 0 || t[0] != '{' {
		return nil, fmt.Errorf("%s: env: want an object, got %s", settings.path, jsonscan.Kind(env))
	}
	old := jsonscan.StringField(env, impBaseURLVar)
	if old != "" && old != url && !impServedBy(old, jsonscan.StringField(fp, "listen")) {
		// The project reached Claude's API through another endpoint (a
		// gateway, a local one too): foldproxy forwards there now.
		model, _ := jsonscan.Field(fp, "model")
		if model == nil {
			model = []byte("{}")
		}
		if cur := jsonscan.StringField(model, "anthropicURL"); cur == "" {
			var err error
			wasEmpty := impEmptyObject(model)
			if model, err = impSetMember(model, "anthropicURL", jsonscan.Quote(strings.TrimRight(old, "/")), false); err == nil {
				fp, err = impSetMember(fp, "model", model, wasEmpty)
			}
			if err != nil {
				return nil, fmt.Errorf("%s: %w", out.path, err)
			}
			warnings = append(warnings, fmt.Sprintf("%s had %s %s: foldproxy forwards Claude Code's requests there now (model.anthropicURL in %s)", settings.path, impBaseURLVar, old, out.path))
		} else if cur != strings.TrimRight(old, "/") {
			warnings = append(warnings, fmt.Sprintf("%s had %s %s, but %s forwards to model.anthropicURL %s: check which one you want", settings.path, impBaseURLVar, old, out.path, cur))
		}
	}
	if token := jsonscan.StringField(fp, "authToken"); token != "" {
		warnings = append(warnings, fmt.Sprintf("%s sets authToken: Claude Code must send it on model requests; put \"ANTHROPIC_CUSTOM_HEADERS\": \"X-Foldproxy-Token: <token>\" in the env of .claude/settings.local.json (not in the shared settings.json)", out.path))
	}
	newEnv, err := impSetMember(env, impBaseURLVar, jsonscan.Quote(url), false)
	if err == nil && jsonscan.StringField(env, impNonblockingVar) == "" {
		newEnv, err = impSetMember(newEnv, impNonblockingVar, jsonscan.Quote("false"), false)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: env: %w", settings.path, err)
	}
	newOut, err := impSetMember(outData, policy.Key, fp, fpWasEmpty)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", out.path, err)
	}
	if !bytes.Equal(newOut, out.data) {
		out.newData = newOut
	}
	if !bytes.Equal(newEnv, env) {
		newSettings, err := impSetMember(sd, "env", newEnv, impEmptyObject(env))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", settings.path, err)
		}
		settings.newData = newSettings
		settings.details = append(settings.details, fmt.Sprintf("env.%s: %s (the model front of the project's foldproxy daemon, %s in %s)", impBaseURLVar, impQuote(url), "daemonListen", out.path))
	}
	return warnings, nil
}

// impSettingsFile returns the project's .claude/settings.json: the one
// among rewritten (the permission rules' rewrite) when it is there, else
// read (it may not exist; it is then created, 0644).
func impSettingsFile(o importOptions, rewritten []*impFile) (*impFile, error) {
	path := filepath.Join(o.project, ".claude", "settings.json")
	for _, f := range rewritten {
		if f.path == path {
			return f, nil
		}
	}
	f, err := impReadFile(path)
	if err != nil {
		return nil, err
	}
	f.verb, f.what = "update", "to fold on the model wire:"
	if !f.exists {
		f.verb = "create"
	}
	return f, nil
}

// impModelOnlyPlan is the plan for a project whose .mcp.json runs
// foldproxy already (imported before): only the model wire, when it is
// not wired yet; nil when there is nothing to do.
func impModelOnlyPlan(o importOptions, entries []impServer) (*importPlan, error) {
	for _, e := range entries {
		cfg, ok := impRunsFoldproxy(e.raw)
		if !ok || cfg == "" {
			continue
		}
		if !filepath.IsAbs(cfg) {
			cfg = filepath.Join(o.project, cfg)
		}
		out, err := impReadFile(cfg)
		if err != nil || !out.exists {
			return nil, err
		}
		sf, err := impSettingsFile(o, nil)
		if err != nil {
			return nil, err
		}
		warnings, err := impWireModel(o, out, sf)
		if err != nil {
			return nil, err
		}
		plan := &importPlan{from: o.from, out: cfg, warnings: warnings}
		if out.newData != nil {
			out.verb, out.what = "update", "with the daemon's model front (daemonListen)"
			plan.files = append(plan.files, out)
		}
		if sf.newData != nil {
			plan.files = append(plan.files, sf)
		}
		stamp := o.now.UTC().Format("20060102T150405Z")
		for _, f := range plan.files {
			if f.exists {
				f.backup = impBackupName(f.target, stamp)
			}
		}
		return plan, nil
	}
	return nil, nil
}

// impServedBy reports whether u is an http URL of the listen address
// (foldproxy's own --listen front, which it must not forward to).
func impServedBy(u, listen string) bool {
	rest, ok := strings.CutPrefix(u, "http://")
	if !ok || listen == "" {
		return false
	}
	return strings.TrimRight(rest, "/") == listen
}

// impPickPort chooses the daemon's port for a project: one derived from
// its path (so that another import of it chooses the same), the first of
// the next 64 that is free now.
func impPickPort(project string) string {
	sum := sha256.Sum256([]byte(project))
	first := 20000 + (int(sum[0])<<8|int(sum[1]))%20000
	for i := range 64 {
		addr := "127.0.0.1:" + strconv.Itoa(first+i)
		if ln, err := net.Listen("tcp", addr); err == nil {
			ln.Close()
			return addr
		}
	}
	return "127.0.0.1:" + strconv.Itoa(first)
}

// impSetMember sets key to val (raw JSON) in the object obj holds: in place
// when the key is there, else appended after the last member, on a line of
// its own with the first member's indentation when the object spans lines.
// Every other byte is kept. relative says val spans lines indented from
// column 0 (an object impSetMember filled from empty): its lines are
// indented as the member's.
func impSetMember(obj []byte, key string, val []byte, relative bool) ([]byte, error) {
	ms, err := jsonscan.Object(obj)
	if err != nil {
		return nil, err
	}
	indentAt := func(i int) string {
		nl := bytes.LastIndexByte(obj[:i], '\n')
		if nl < 0 {
			return ""
		}
		ind := obj[nl+1 : i]
		if len(bytes.TrimLeft(ind, " \t")) != 0 {
			return ""
		}
		return string(ind)
	}
	reindent := func(ind string) []byte {
		if !relative {
			return val
		}
		return bytes.ReplaceAll(val, []byte("\n"), []byte("\n"+ind))
	}
	for _, m := range ms {
		if m.Key == key {
			return jsonscan.SetField(obj, key, reindent(indentAt(m.KeyAt.Start)))
		}
	}
	var b bytes.Buffer
	if len(ms) == 0 {
		open := bytes.IndexByte(obj, '{')
		closing := bytes.LastIndexByte(obj, '}')
		b.Write(obj[:open+1])
		b.WriteString("\n  ")
		b.Write(jsonscan.Quote(key))
		b.WriteString(": ")
		b.Write(reindent("  "))
		b.WriteString("\n")
		b.Write(obj[closing:])
		return b.Bytes(), nil
	}
	sep, ind := ", ", ""
	if bytes.IndexByte(obj[:ms[0].KeyAt.Start], '\n') >= 0 {
		ind = indentAt(ms[0].KeyAt.Start)
		sep = ",\n" + ind
	}
	last := ms[len(ms)-1].Value.End
	b.Write(obj[:last])
	b.WriteString(sep)
	b.Write(jsonscan.Quote(key))
	b.WriteString(": ")
	b.Write(reindent(ind))
	b.Write(obj[last:])
	return b.Bytes(), nil
}

// impEmptyObject reports whether raw is an object without members.
func impEmptyObject(raw []byte) bool {
	ms, err := jsonscan.Object(raw)
	return err == nil && len(ms) == 0
}
