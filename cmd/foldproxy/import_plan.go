package main

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/foldproxy/foldproxy/policy"
	"github.com/foldproxy/foldproxy/policy/jsonscan"
)

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
	mcp, err := impReadMCP(o, src)
	if err != nil {
		return nil, err
	}

	servers, skipped := impSplitProxied(source.servers)
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

	private := false
	if source.claudeJSON && o.home != "" {
		private = impPrivateOut(&o)
		if !private {
			warnings = append(warnings, fmt.Sprintf("%s is inside the project: the servers of %s may carry API keys or tokens; it is written with mode 0600 and listed in .gitignore, but keep it out of commits", o.out, o.from))
		}
	}

	// foldproxy's config: imported servers merged into what is already there.
	outFile, proxied, sep, warn, err := impPlanOut(o, source.claudeJSON, servers)
	if err != nil {
		return nil, err
	}
	warnings = append(warnings, warn...)
	if outFile.newData != nil {
		plan.files = append(plan.files, outFile)
	}

	// The project's .mcp.json: one entry that runs foldproxy.
	if err := impPlanMCP(o, mcp); err != nil {
		return nil, err
	}

	// Permission rules in the project's Claude Code settings.
	imported := make([]string, len(servers))
	for i, s := range servers {
		imported[i] = impClaudeName(s.name)
	}
	collapse := len(proxied) == len(servers)
	settings, warn, err := impPlanSettings(o, impRuleMapping{servers: imported, name: o.name, sep: sep, collapse: collapse})
	if err != nil {
		return nil, err
	}
	warnings = append(warnings, warn...)
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

	gi, err := impPlanGitignore(o, source.claudeJSON)
	if err != nil {
		return nil, err
	}
	if gi != nil {
		plan.files = append(plan.files, gi)
	}
	warnings = append(warnings, impNameWarnings(o, servers, imported, sep)...)

	// Backups, named now so the dry run shows them.
	stamp := o.now.UTC().Format("20060102T150405Z")
	for _, f := range plan.files {
		if f.exists {
			f.backup = impBackupName(f.target, stamp)
		}
	}

	impPrintPlan(w, o, source, servers, skipped, private)
	plan.warnings = warnings
	plan.removals = impRemovals(source, servers)
	return plan, nil
}

// impPrivateOut sends servers from a user-level file to a private file of
// the user's, outside the project (see impPrivateConfig), unless a project
// config exists already (servers imported from the project before): that
// is where they all stay together. It reports whether o.out is outside the
// project.
func impPrivateOut(o *importOptions) bool {
	if _, err := os.Stat(o.out); o.outDefault && errors.Is(err, fs.ErrNotExist) {
		o.out = impPrivateConfig(o.home, o.project)
	}
	return !impInside(o.out, o.project)
}

// impReadMCP reads the project's .mcp.json, which is rewritten, unless it
// is the source src; it refuses one that defines servers not being
// imported, as they would be lost.
func impReadMCP(o importOptions, src *impFile) (*impFile, error) {
	if impSamePath(o.from, o.mcpJSON) {
		return src, nil
	}
	mcp, err := impReadFile(o.mcpJSON)
	if err != nil {
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
	return mcp, nil
}

// impSplitProxied sets apart the servers that already run foldproxy (never
// wrap foldproxy in foldproxy) and returns the others and a note for each
// skipped one.
func impSplitProxied(all []impServer) (servers []impServer, skipped []string) {
	for _, s := range all {
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
	return servers, skipped
}

// impPlanOut reads foldproxy's config o.out and merges the imported servers
// into what is already there. The returned file has newData set only when
// it changes.
func impPlanOut(o importOptions, claudeJSON bool, servers []impServer) (outFile *impFile, proxied []string, sep string, warnings []string, err error) {
	outFile, err = impReadFile(o.out)
	if err != nil {
		return nil, nil, "", nil, err
	}
	if claudeJSON {
		outFile.mode = 0o600
		outFile.private = true
	}
	outData, proxied, sep, warnings, err := impBuildOut(o.out, outFile, servers)
	if err != nil {
		return nil, nil, "", nil, err
	}
	if !bytes.Equal(outData, outFile.data) {
		outFile.newData = outData
		outFile.verb = "create"
		if outFile.exists {
			outFile.verb = "update"
		}
		outFile.what = fmt.Sprintf("with %s (%s)", impCount(len(proxied), "upstream server"), strings.Join(proxied, ", "))
	}
	return outFile, proxied, sep, warnings, nil
}

// impPlanMCP sets the project's .mcp.json to one entry that runs foldproxy.
func impPlanMCP(o importOptions, mcp *impFile) error {
	mcpData, err := impBuildMCPJSON(o, mcp)
	if err != nil {
		return err
	}
	mcp.newData = mcpData
	mcp.verb, mcp.what = "rewrite", "to run foldproxy only:"
	if !mcp.exists {
		mcp.verb = "create"
	}
	mcp.details = strings.Split(strings.TrimRight(string(mcpData), "\n"), "\n")
	return nil
}

// impPlanSettings rewrites the permission rules in the project's Claude
// Code settings files; it returns the files that change.
func impPlanSettings(o importOptions, m impRuleMapping) (settings []*impFile, warnings []string, err error) {
	for _, base := range []string{"settings.json", "settings.local.json"} {
		f, err := impReadFile(filepath.Join(o.project, ".claude", base))
		if err != nil {
			return nil, nil, err
		}
		if !f.exists {
			continue
		}
		res, err := impRewriteSettings(f.data, m)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", f.path, err)
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
	return settings, warnings, nil
}

// impPlanGitignore keeps foldproxy's state, the backups and a config inside
// the project that holds user-level servers out of git. It returns nil when
// .gitignore needs no change.
func impPlanGitignore(o importOptions, claudeJSON bool) (*impFile, error) {
	ignore := []string{"/.foldproxy/", "*.bak-*"}
	if claudeJSON && impInside(o.out, o.project) {
		if rel, err := filepath.Rel(o.project, o.out); err == nil {
			ignore = append(ignore, "/"+filepath.ToSlash(rel))
		}
	}
	return impGitignore(filepath.Join(o.project, ".gitignore"), ignore)
}

// impNameWarnings warns of user-level permission rules import leaves alone
// and of tool names that would grow past Claude Code's limit.
func impNameWarnings(o importOptions, servers []impServer, imported []string, sep string) []string {
	var warnings []string
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
	return warnings
}

// impPrintPlan prints what is imported, from where and to where.
func impPrintPlan(w *bytes.Buffer, o importOptions, source impSource, servers []impServer, skipped []string, private bool) {
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
}

// impRemovals is the claude mcp remove commands to print for servers
// imported from ~/.claude.json: only scopes that still hold the entry after
// the merge; a user entry shadowed by a local one is removed too, as it
// would otherwise keep running beside the proxy.
func impRemovals(source impSource, servers []impServer) []string {
	if !source.claudeJSON {
		return nil
	}
	var removals []string
	for _, s := range servers {
		removals = append(removals, fmt.Sprintf("claude mcp remove %s -s %s", impShellQuote(s.name), s.scope))
	}
	for _, n := range source.overridden {
		removals = append(removals, fmt.Sprintf("claude mcp remove %s -s user", impShellQuote(n)))
	}
	return removals
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
