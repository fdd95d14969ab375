package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/foldproxy/foldproxy/policy/jsonscan"
)

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
