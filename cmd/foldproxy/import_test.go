package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// importClock pins the backup timestamp.
var importClock = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

const importStamp = "20260102T030405Z"

// importEnv is a fake home and project folder.
type importEnv struct {
	home, project string
}

func newImportEnv(t testing.TB) importEnv {
	t.Helper()
	root := t.TempDir()
	e := importEnv{home: filepath.Join(root, "home"), project: filepath.Join(root, "proj")}
	for _, d := range []string{e.home, e.project} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// write creates a file under the project (or at an absolute path).
func (e importEnv) write(t testing.TB, path, content string) string {
	t.Helper()
	if !filepath.IsAbs(path) {
		path = filepath.Join(e.project, path)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func (e importEnv) read(t testing.TB, path string) string {
	t.Helper()
	if !filepath.IsAbs(path) {
		path = filepath.Join(e.project, path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// importExe stands for the installed foldproxy binary that import writes
// into .mcp.json.
const importExe = "/opt/foldproxy/bin/foldproxy"

// run runs foldproxy import in the project folder.
func (e importEnv) run(t testing.TB, args ...string) (string, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	c := &importCommand{stdout: &stdout, stderr: &stderr, home: e.home, cwd: e.project, now: func() time.Time { return importClock },
		exe: importExe, checkStart: func(string) error { return nil }, pickPort: func(string) string { return importAddr }}
	err := c.Run(context.Background(), args)
	return stdout.String() + stderr.String(), err
}

// impSnapshot returns every file under root with its content.
func impSnapshot(t testing.TB, root string) map[string]string {
	t.Helper()
	got := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		got[rel] = string(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

const importMCPJSON = `{
  "mcpServers": {
    "github": {
      "command": "npx",
      "args": ["-y", "@modelcontextprotocol/server-github"],
      "env": {"GITHUB_TOKEN": "${GITHUB_TOKEN}", "X": "a\u00e9\"b"}
    },
    "fs": {"type": "stdio", "command": "mcp-fs", "args": ["/tmp"], "unknownField": 1.50}
  }
}
`

const importSettings = `{
  "model": "opus",
  "permissions": {
    "allow": [
      "Bash(npm run *)",
      "mcp__github__get_issue",
      "mcp__fs__read_file",
      "mcp__other__x",
      42
    ],
    "deny": ["mcp__fs__write_file", "mcp__github"],
    "ask": ["mcp__fs__*"],
    "defaultMode": "default"
  },
  "hooks": {"PreToolUse": []},
  "zzz": true
}
`

const importSettingsWant = `{
  "model": "opus",
  "permissions": {
    "allow": [
      "Bash(npm run *)",
      "mcp__foldproxy__github__get_issue",
      "mcp__foldproxy__fs__read_file",
      "mcp__other__x",
      42
    ],
    "deny": ["mcp__foldproxy__fs__write_file", "mcp__foldproxy__github__*"],
    "ask": ["mcp__foldproxy__fs__*"],
    "defaultMode": "default"
  },
  "hooks": {"PreToolUse": []},
  "zzz": true,
  "env": {
    "ANTHROPIC_BASE_URL": "http://` + importAddr + `",
    "MCP_CONNECTION_NONBLOCKING": "false"
  }
}
`

// importAddr is the daemon's address import chooses in these tests.
const importAddr = "127.0.0.1:23456"

func TestImportMCPJSON(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		wantOut    []string // substrings of the output
		wantChange bool
	}{
		{
			name: "dry run",
			args: nil,
			wantOut: []string{
				"Importing 2 servers from PROJ/.mcp.json (project scope): github, fs",
				"PROJ/foldproxy.json: would create with 2 upstream servers (github, fs)",
				"PROJ/.mcp.json: would rewrite to run foldproxy only:",
				`"args": ["serve", "--config", "PROJ/foldproxy.json"]`,
				"PROJ/.claude/settings.json: would rewrite 5 permission rules:",
				`permissions.allow[1]: "mcp__github__get_issue" → "mcp__foldproxy__github__get_issue"`,
				`permissions.deny[1]: "mcp__github" → "mcp__foldproxy__github__*"`,
				`permissions.ask[0]: "mcp__fs__*" → "mcp__foldproxy__fs__*"`,
				"Backups it would make:",
				"PROJ/.mcp.json → PROJ/.mcp.json.bak-" + importStamp,
				"PROJ/.claude/settings.json → PROJ/.claude/settings.json.bak-" + importStamp,
				"Dry run: nothing was changed.",
			},
		},
		{
			name: "write",
			args: []string{"--write"},
			wantOut: []string{
				"PROJ/foldproxy.json: created with 2 upstream servers (github, fs)",
				"PROJ/.mcp.json: backed up to PROJ/.mcp.json.bak-" + importStamp,
				"PROJ/.mcp.json: rewrote to run foldproxy only:",
				"PROJ/.claude/settings.json: rewrote 5 permission rules:",
				"Done.",
			},
			wantChange: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newImportEnv(t)
			e.write(t, ".mcp.json", importMCPJSON)
			e.write(t, ".claude/settings.json", importSettings)
			e.write(t, ".claude/settings.local.json", `{"permissions": {"allow": ["Read"]}}`)
			before := impSnapshot(t, e.project)

			out, err := e.run(t, tt.args...)
			if err != nil {
				t.Fatalf("import: %v\n%s", err, out)
			}
			out = strings.ReplaceAll(out, e.project, "PROJ")
			for _, w := range tt.wantOut {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q; got:\n%s", w, out)
				}
			}
			if strings.Contains(out, "settings.local.json:") {
				t.Errorf("output mentions settings.local.json, which has no MCP rules:\n%s", out)
			}
			after := impSnapshot(t, e.project)
			if !tt.wantChange {
				if !reflect.DeepEqual(after, before) {
					t.Fatalf("dry run changed files:\ngot  %v\nwant %v", after, before)
				}
				return
			}

			want := map[string]string{
				".mcp.json.bak-" + importStamp:             importMCPJSON,
				".claude/settings.json.bak-" + importStamp: importSettings,
				".claude/settings.json":                    importSettingsWant,
				".claude/settings.local.json":              `{"permissions": {"allow": ["Read"]}}`,
				"foldproxy.json":                           "",
				".mcp.json":                                "",
				".gitignore":                               "",
			}
			if len(after) != len(want) {
				t.Errorf("files after import = %v, want %v", impKeys(after), impKeys(want))
			}
			for name, content := range want {
				if content != "" && after[name] != content {
					t.Errorf("%s =\n%s\nwant\n%s", name, after[name], content)
				}
			}

			// foldproxy.json holds every server byte for byte.
			var cfg struct {
				MCPServers map[string]json.RawMessage `json:"mcpServers"`
				Foldproxy  json.RawMessage            `json:"foldproxy"`
			}
			if err := json.Unmarshal([]byte(after["foldproxy.json"]), &cfg); err != nil {
				t.Fatalf("foldproxy.json: %v\n%s", err, after["foldproxy.json"])
			}
			for name, raw := range cfg.MCPServers {
				if !strings.Contains(importMCPJSON, string(raw)) {
					t.Errorf("foldproxy.json server %s = %s, not byte for byte from .mcp.json", name, raw)
				}
			}
			if len(cfg.MCPServers) != 2 || string(cfg.Foldproxy) != "{\n    \"daemonListen\": \""+importAddr+"\"\n  }" {
				t.Errorf("foldproxy.json = %s, want 2 servers and foldproxy settings of the daemon's address alone", after["foldproxy.json"])
			}

			// .mcp.json runs foldproxy only.
			var mcp struct {
				MCPServers map[string]struct {
					Command string   `json:"command"`
					Args    []string `json:"args"`
				} `json:"mcpServers"`
			}
			if err := json.Unmarshal([]byte(after[".mcp.json"]), &mcp); err != nil {
				t.Fatal(err)
			}
			got := mcp.MCPServers["foldproxy"]
			wantArgs := []string{"serve", "--config", filepath.Join(e.project, "foldproxy.json")}
			if len(mcp.MCPServers) != 1 || got.Command != importExe || !reflect.DeepEqual(got.Args, wantArgs) {
				t.Errorf(".mcp.json = %s, want one foldproxy entry with args %q", after[".mcp.json"], wantArgs)
			}
		})
	}
}

// impKeys lists the file names of a snapshot, for messages.
func impKeys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestImportClaudeJSON(t *testing.T) {
	tests := []struct {
		name        string
		claudeJSON  string // PROJ stands for the project path
		args        []string
		wantServers []string
		wantOut     []string
		wantErr     string
	}{
		{
			name: "project (local) scope",
			claudeJSON: `{"numStartups": 3, "projects": {
  "/elsewhere": {"mcpServers": {"nope": {"command": "x"}}},
  "PROJ": {"allowedTools": [], "mcpServers": {"db": {"command": "pg-mcp", "args": ["--ro"]}}}
}}`,
			wantServers: []string{"db"},
			wantOut: []string{
				"Importing 1 server from HOME/.claude.json (local scope for PROJ): db",
				"claude mcp remove db -s local",
			},
		},
		{
			name: "user and project scope merged, project wins",
			claudeJSON: `{
  "mcpServers": {"web": {"type": "http", "url": "https://u.example/mcp"}, "db": {"command": "user-db"}},
  "projects": {"PROJ": {"mcpServers": {"db": {"command": "pg-mcp"}}}}
}`,
			wantServers: []string{"web", "db"},
			wantOut: []string{
				"(user scope 2 and local scope 1 for PROJ, merged): web, db",
				"defined in both scopes, the local (project) entry wins: db",
				"claude mcp remove web -s user",
				"claude mcp remove db -s local",
				"claude mcp remove db -s user",
				"user-scope removals apply to every project",
			},
		},
		{
			name:        "user scope only",
			claudeJSON:  `{"mcpServers": {"my server": {"command": "s"}}, "projects": {}}`,
			wantServers: []string{"my server"},
			wantOut:     []string{"(user scope): my server", "claude mcp remove 'my server' -s user"},
		},
		{
			name:       "no servers for this project",
			claudeJSON: `{"projects": {"PROJ": {"mcpServers": {}}}}`,
			wantErr:    `.claude.json: no mcpServers: found no servers in mcpServers (user scope) or projects["PROJ"].mcpServers (local scope)`,
		},
		{
			name:       "project entry not an object",
			claudeJSON: `{"projects": {"PROJ": []}}`,
			wantErr:    `projects["PROJ"]: want an object, got an array`,
		},
		{
			name:       "local server not an object",
			claudeJSON: `{"projects": {"PROJ": {"mcpServers": {"bad": "npx thing"}}}}`,
			wantErr:    `projects["PROJ"].mcpServers.bad: server "bad" is a string, want an object`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newImportEnv(t)
			cj := e.write(t, filepath.Join(e.home, ".claude.json"), strings.ReplaceAll(tt.claudeJSON, "PROJ", e.project))
			cjBefore := e.read(t, cj)
			projBefore := impSnapshot(t, e.project)

			out, err := e.run(t, "--from", "~/.claude.json", "--write")
			repl := strings.NewReplacer(e.project, "PROJ", e.home, "HOME")
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(repl.Replace(err.Error()), tt.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tt.wantErr)
				}
				if got := impSnapshot(t, e.project); !reflect.DeepEqual(got, projBefore) {
					t.Errorf("failed import changed the project: %v", got)
				}
				return
			}
			if err != nil {
				t.Fatalf("import: %v\n%s", err, out)
			}
			out = repl.Replace(out)
			for _, w := range tt.wantOut {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q; got:\n%s", w, out)
				}
			}
			if got := e.read(t, cj); got != cjBefore {
				t.Errorf("~/.claude.json changed:\n%s", got)
			}
			var cfg struct {
				MCPServers map[string]json.RawMessage `json:"mcpServers"`
			}
			// Servers from ~/.claude.json go to a private file outside
			// the project.
			private := impPrivateConfig(e.home, e.project)
			if fi, err := os.Stat(private); err != nil || fi.Mode().Perm() != 0o600 {
				t.Errorf("private config %s: %v, %v; want mode 0600", private, fi, err)
			}
			if _, err := os.Stat(filepath.Join(e.project, "foldproxy.json")); err == nil {
				t.Errorf("servers of ~/.claude.json were written inside the project")
			}
			if err := json.Unmarshal([]byte(e.read(t, private)), &cfg); err != nil {
				t.Fatal(err)
			}
			var got []string
			for name, raw := range cfg.MCPServers {
				got = append(got, name)
				if !strings.Contains(cjBefore, string(raw)) {
					t.Errorf("server %s = %s, not byte for byte from ~/.claude.json", name, raw)
				}
			}
			if len(got) != len(tt.wantServers) {
				t.Errorf("servers = %v, want %v", got, tt.wantServers)
			}
			for _, name := range tt.wantServers {
				if _, ok := cfg.MCPServers[name]; !ok {
					t.Errorf("foldproxy.json lacks server %q", name)
				}
			}
			if db, ok := cfg.MCPServers["db"]; ok && strings.Contains(string(db), "user-db") {
				t.Errorf("db = %s: the user scope won over the local scope", db)
			}
			if !strings.Contains(e.read(t, ".mcp.json"), `"command": "`+importExe+`"`) {
				t.Errorf(".mcp.json was not created to run foldproxy")
			}
		})
	}
}

// TestImportClaudeJSONKeepsProjectServers checks that importing from
// ~/.claude.json refuses to drop servers of the project's .mcp.json.
func TestImportClaudeJSONKeepsProjectServers(t *testing.T) {
	e := newImportEnv(t)
	e.write(t, filepath.Join(e.home, ".claude.json"), `{"mcpServers": {"web": {"url": "https://x"}}}`)
	e.write(t, ".mcp.json", importMCPJSON)
	before := impSnapshot(t, e.project)
	_, err := e.run(t, "--from", filepath.Join(e.home, ".claude.json"), "--write")
	if err == nil || !strings.Contains(err.Error(), "also defines servers (github, fs)") {
		t.Fatalf("error = %v, want one naming the project servers that would be lost", err)
	}
	if got := impSnapshot(t, e.project); !reflect.DeepEqual(got, before) {
		t.Errorf("refused import changed files")
	}

	// Importing the project first, then ~/.claude.json, keeps both.
	for _, args := range [][]string{{"--write"}, {"--from", filepath.Join(e.home, ".claude.json"), "--write"}} {
		if out, err := e.run(t, args...); err != nil {
			t.Fatalf("import %v: %v\n%s", args, err, out)
		}
	}
	var cfg struct {
		MCPServers map[string]json.RawMessage `json:"mcpServers"`
	}
	if err := json.Unmarshal([]byte(e.read(t, "foldproxy.json")), &cfg); err != nil {
		t.Fatal(err)
	}
	if len(cfg.MCPServers) != 3 {
		t.Errorf("foldproxy.json servers = %v, want github, fs and web", cfg.MCPServers)
	}
}

func TestImportIdempotent(t *testing.T) {
	tests := []struct {
		name     string
		setup    func(t *testing.T, e importEnv)
		args     []string
		wantSays string
	}{
		{
			name: ".mcp.json",
			setup: func(t *testing.T, e importEnv) {
				e.write(t, ".mcp.json", importMCPJSON)
				e.write(t, ".claude/settings.json", importSettings)
			},
			wantSays: "already runs foldproxy only",
		},
		{
			name: "~/.claude.json",
			setup: func(t *testing.T, e importEnv) {
				e.write(t, filepath.Join(e.home, ".claude.json"), `{"mcpServers": {"web": {"url": "https://x"}}}`)
				e.write(t, ".claude/settings.local.json", `{"permissions": {"allow": ["mcp__web"]}}`)
			},
			args:     []string{"--from", "~/.claude.json"},
			wantSays: "Nothing to change",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newImportEnv(t)
			tt.setup(t, e)
			if out, err := e.run(t, append(tt.args, "--write")...); err != nil {
				t.Fatalf("first import: %v\n%s", err, out)
			}
			after1 := impSnapshot(t, e.project)
			for _, extra := range [][]string{nil, {"--write"}} {
				args := append(append([]string(nil), tt.args...), extra...)
				out, err := e.run(t, args...)
				if err != nil {
					t.Fatalf("second import %v: %v\n%s", args, err, out)
				}
				if !strings.Contains(out, tt.wantSays) {
					t.Errorf("second import %v output = %q, want it to say %q", args, out, tt.wantSays)
				}
				if got := impSnapshot(t, e.project); !reflect.DeepEqual(got, after1) {
					t.Errorf("second import %v changed files: %v", args, impKeys(got))
				}
				cfg := filepath.Join(e.project, "foldproxy.json")
				if _, err := os.Stat(cfg); err != nil {
					cfg = impPrivateConfig(e.home, e.project)
				}
				if strings.Contains(e.read(t, cfg), `"command": "`+importExe+`"`) {
					t.Errorf("foldproxy.json wraps foldproxy:\n%s", e.read(t, cfg))
				}
			}
		})
	}
}

// TestImportAddsNewServer checks a second import after a server was added
// beside the foldproxy entry: the new one joins foldproxy.json, the proxy
// entry is not wrapped, and foldproxy's settings are kept.
func TestImportAddsNewServer(t *testing.T) {
	e := newImportEnv(t)
	e.write(t, ".mcp.json", importMCPJSON)
	if out, err := e.run(t, "--write"); err != nil {
		t.Fatalf("first import: %v\n%s", err, out)
	}
	cfg := e.read(t, "foldproxy.json")
	cfg = strings.Replace(cfg, `"foldproxy": {
    "daemonListen": "`+importAddr+`"
  }`, `"foldproxy": {"daemonListen": "`+importAddr+`", "separator": "--", "fold": {"maxDepth": 2}}`, 1)
	e.write(t, "foldproxy.json", cfg)
	mcp := e.read(t, ".mcp.json")
	mcp = strings.Replace(mcp, `"mcpServers": {`, `"mcpServers": {
    "new": {"command": "new-mcp"},`, 1)
	e.write(t, ".mcp.json", mcp)
	e.write(t, ".claude/settings.json", `{"permissions": {"allow": ["mcp__new__t", "mcp__foldproxy__github__x"]}}`)

	out, err := e.run(t, "--write")
	if err != nil {
		t.Fatalf("second import: %v\n%s", err, out)
	}
	if !strings.Contains(out, "skipped, already runs foldproxy: foldproxy") {
		t.Errorf("output does not mention the skipped foldproxy entry:\n%s", out)
	}
	got := e.read(t, "foldproxy.json")
	for _, w := range []string{`"github": {`, `"fs": {`, `"new": {"command": "new-mcp"}`, `"foldproxy": {"daemonListen": "` + importAddr + `", "separator": "--", "fold": {"maxDepth": 2}}`} {
		if !strings.Contains(got, w) {
			t.Errorf("foldproxy.json lacks %s:\n%s", w, got)
		}
	}
	if strings.Count(e.read(t, ".mcp.json"), `"command"`) != 1 {
		t.Errorf(".mcp.json = %s, want one entry", e.read(t, ".mcp.json"))
	}
	// The separator from the kept settings shapes the rule.
	if want := `{"permissions": {"allow": ["mcp__foldproxy__new--t", "mcp__foldproxy__github__x"]}, "env": {
  "ANTHROPIC_BASE_URL": "http://` + importAddr + `",
  "MCP_CONNECTION_NONBLOCKING": "false"
}}`; e.read(t, ".claude/settings.json") != want {
		t.Errorf("settings = %s, want %s", e.read(t, ".claude/settings.json"), want)
	}
	if _, err := os.Stat(filepath.Join(e.project, "foldproxy.json.bak-"+importStamp)); err != nil {
		t.Errorf("no backup of foldproxy.json: %v", err)
	}
}

func TestImportErrors(t *testing.T) {
	tests := []struct {
		name    string
		files   map[string]string
		args    []string
		wantErr string // PROJ stands for the project path
	}{
		{
			name:    "no config",
			wantErr: "no Claude Code config found: looked for PROJ/.mcp.json",
		},
		{
			name:    "no config with --from",
			args:    []string{"--from", "missing.json"},
			wantErr: "no Claude Code config found: PROJ/missing.json does not exist",
		},
		{
			name:    "malformed JSON",
			files:   map[string]string{".mcp.json": "{\n  \"mcpServers\": {\n    \"a\": {\"command\": \"x\",}\n  }\n}"},
			wantErr: "PROJ/.mcp.json: malformed JSON at line 3, column 26",
		},
		{
			name:    "truncated JSON",
			files:   map[string]string{".mcp.json": `{"mcpServers": {`},
			wantErr: "PROJ/.mcp.json: malformed JSON",
		},
		{
			name:    "top level not an object",
			files:   map[string]string{".mcp.json": `[1]`},
			wantErr: "PROJ/.mcp.json: top level is an array, want an object",
		},
		{
			name:    "no mcpServers",
			files:   map[string]string{".mcp.json": `{"servers": {}}`},
			wantErr: "PROJ/.mcp.json: no mcpServers",
		},
		{
			name:    "empty mcpServers",
			files:   map[string]string{".mcp.json": `{"mcpServers": {}}`},
			wantErr: "PROJ/.mcp.json: mcpServers is empty",
		},
		{
			name:    "mcpServers not an object",
			files:   map[string]string{".mcp.json": `{"mcpServers": ["a"]}`},
			wantErr: "PROJ/.mcp.json: mcpServers: want an object of servers, got an array",
		},
		{
			name:    "server not an object",
			files:   map[string]string{".mcp.json": `{"mcpServers": {"ok": {"command": "x"}, "bad one": null}}`},
			wantErr: `PROJ/.mcp.json: mcpServers["bad one"]: server "bad one" is null, want an object`,
		},
		{
			name:    "malformed settings",
			files:   map[string]string{".mcp.json": `{"mcpServers": {"a": {}}}`, ".claude/settings.json": `{"permissions": }`},
			wantErr: "PROJ/.claude/settings.json: malformed JSON at line 1, column 17",
		},
		{
			name:    "settings allow not an array",
			files:   map[string]string{".mcp.json": `{"mcpServers": {"a": {}}}`, ".claude/settings.local.json": `{"permissions": {"allow": "mcp__a"}}`},
			wantErr: "PROJ/.claude/settings.local.json: permissions.allow: want an array of rules, got a string",
		},
		{
			name:    "malformed existing foldproxy.json",
			files:   map[string]string{".mcp.json": `{"mcpServers": {"a": {}}}`, "foldproxy.json": `{"mcpServers": 1}`},
			wantErr: "PROJ/foldproxy.json: mcpServers: want an object of servers, got a number",
		},
		{
			name:    "conflicting server in foldproxy.json",
			files:   map[string]string{".mcp.json": `{"mcpServers": {"a": {"command": "new"}}}`, "foldproxy.json": `{"mcpServers": {"a": {"command": "old"}}}`},
			wantErr: "PROJ/foldproxy.json: mcpServers.a is already defined differently",
		},
		{
			name:    "name collides with a server",
			files:   map[string]string{".mcp.json": `{"mcpServers": {"foldproxy-x": {}}}`},
			args:    []string{"--name", "foldproxy-x"},
			wantErr: `server "foldproxy-x" has the same name as the foldproxy entry`,
		},
		{
			name:    "bad name",
			files:   map[string]string{".mcp.json": `{"mcpServers": {"a": {}}}`},
			args:    []string{"--name", "fold proxy"},
			wantErr: `--name "fold proxy": want letters, digits`,
		},
		{
			name:    "out is .mcp.json",
			files:   map[string]string{".mcp.json": `{"mcpServers": {"a": {}}}`},
			args:    []string{"--out", ".mcp.json"},
			wantErr: "foldproxy's config must be a file of its own",
		},
		{
			name:    "stray argument",
			args:    []string{"now"},
			wantErr: `unexpected argument "now"`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newImportEnv(t)
			for name, content := range tt.files {
				e.write(t, name, content)
			}
			before := impSnapshot(t, e.project)
			out, err := e.run(t, append(tt.args, "--write")...)
			if err == nil {
				t.Fatalf("import succeeded, want error %q; output:\n%s", tt.wantErr, out)
			}
			if got := strings.ReplaceAll(err.Error(), e.project, "PROJ"); !strings.Contains(got, tt.wantErr) {
				t.Errorf("error = %q, want it to contain %q", got, tt.wantErr)
			}
			if got := impSnapshot(t, e.project); !reflect.DeepEqual(got, before) {
				t.Errorf("failed import changed files: got %v, want %v", impKeys(got), impKeys(before))
			}
		})
	}
}

func TestImportNoConfigHint(t *testing.T) {
	e := newImportEnv(t)
	e.write(t, filepath.Join(e.home, ".claude.json"), `{}`)
	_, err := e.run(t)
	if err == nil || !strings.Contains(err.Error(), "--from "+filepath.Join(e.home, ".claude.json")) {
		t.Errorf("error = %v, want a hint to use --from ~/.claude.json", err)
	}
}

func TestImportLongNameWarning(t *testing.T) {
	tests := []struct {
		server   string
		wantWarn bool
	}{
		{"short", false},
		{"a-really-quite-long-server-name", true}, // mcp__foldproxy__ + 31 + __ = 49
		{"exactly-twenty-one-ch", false},          // 16 + 21 + 2 = 39
	}
	for _, tt := range tests {
		t.Run(tt.server, func(t *testing.T) {
			e := newImportEnv(t)
			e.write(t, ".mcp.json", `{"mcpServers": {"`+tt.server+`": {"command": "x"}}}`)
			out, err := e.run(t)
			if err != nil {
				t.Fatal(err)
			}
			got := strings.Contains(out, "warning: server \""+tt.server+"\"") && strings.Contains(out, "foldproxy checks the real names when it starts")
			if got != tt.wantWarn {
				t.Errorf("long-name warning = %v, want %v; output:\n%s", got, tt.wantWarn, out)
			}
		})
	}
}

func TestImportKeepsSymlinkAndMode(t *testing.T) {
	e := newImportEnv(t)
	real := e.write(t, "config/real-mcp.json", importMCPJSON)
	if err := os.Chmod(real, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(real, filepath.Join(e.project, ".mcp.json")); err != nil {
		t.Skipf("no symlinks here: %v", err)
	}
	if out, err := e.run(t, "--write"); err != nil {
		t.Fatalf("import: %v\n%s", err, out)
	}
	if fi, err := os.Lstat(filepath.Join(e.project, ".mcp.json")); err != nil || fi.Mode()&fs.ModeSymlink == 0 {
		t.Errorf(".mcp.json is no longer a symlink (%v)", err)
	}
	fi, err := os.Stat(real)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("mode = %v, want 0600", fi.Mode().Perm())
	}
	if !strings.Contains(e.read(t, real), `"command": "`+importExe+`"`) {
		t.Errorf("symlink target not rewritten")
	}
	if got := e.read(t, real+".bak-"+importStamp); got != importMCPJSON {
		t.Errorf("backup = %q", got)
	}
}

func TestRewriteSettings(t *testing.T) {
	tests := []struct {
		name     string
		in       string
		servers  []string
		collapse bool
		want     string // "" means unchanged
		wantWarn int
		wantErr  string
	}{
		{
			name:    "no permissions",
			in:      `{"model": "x"}`,
			servers: []string{"a"},
		},
		{
			name:    "tool rules in every list, others untouched",
			in:      "{\"b\":1,\"permissions\":{\"ask\":[\"mcp__a__t\"],\"allow\":[ \"mcp__a__t1\" , \"mcp__ab__t\",\"Read\", {\"x\":\"mcp__a__y\"}],\"deny\":[\"mcp__a__t2\"]},\"a\":2}",
			servers: []string{"a"},
			want:    "{\"b\":1,\"permissions\":{\"ask\":[\"mcp__foldproxy__a__t\"],\"allow\":[ \"mcp__foldproxy__a__t1\" , \"mcp__ab__t\",\"Read\", {\"x\":\"mcp__a__y\"}],\"deny\":[\"mcp__foldproxy__a__t2\"]},\"a\":2}",
		},
		{
			name:     "whole-server allow of every server collapses to the proxy",
			in:       `{"permissions": {"allow": ["mcp__a", "Bash", "mcp__b__*", "mcp__a__t"]}}`,
			servers:  []string{"a", "b"},
			collapse: true,
			want:     `{"permissions": {"allow": ["mcp__foldproxy", "Bash", "mcp__foldproxy__a__t"]}}`,
		},
		{
			name:     "collapse with the proxy rule already there",
			in:       `{"permissions": {"allow": ["mcp__a", "mcp__b", "mcp__foldproxy"]}}`,
			servers:  []string{"a", "b"},
			collapse: true,
			want:     `{"permissions": {"allow": ["mcp__foldproxy"]}}`,
		},
		{
			name:     "no collapse when one server is not allowed wholesale",
			in:       `{"permissions": {"allow": ["mcp__a", "mcp__b__t"]}}`,
			servers:  []string{"a", "b"},
			collapse: true,
			want:     `{"permissions": {"allow": ["mcp__a", "mcp__foldproxy__b__t"]}}`,
			wantWarn: 1,
		},
		{
			name:     "no collapse when the proxy serves other servers too",
			in:       `{"permissions": {"allow": ["mcp__a"]}}`,
			servers:  []string{"a"},
			collapse: false,
			wantWarn: 1,
		},
		{
			name:    "whole-server deny and ask become globs",
			in:      `{"permissions": {"deny": ["mcp__a"], "ask": ["mcp__b__*"]}}`,
			servers: []string{"a", "b"},
			want:    `{"permissions": {"deny": ["mcp__foldproxy__a__*"], "ask": ["mcp__foldproxy__b__*"]}}`,
		},
		{
			name:    "longest server name wins",
			in:      `{"permissions": {"deny": ["mcp__a__b__t", "mcp__a__c"]}}`,
			servers: []string{"a", "a__b"},
			want:    `{"permissions": {"deny": ["mcp__foldproxy__a__b__t", "mcp__foldproxy__a__c"]}}`,
		},
		{
			name:    "duplicate permissions key: the last one counts",
			in:      `{"permissions": {"deny": ["mcp__a__x"]}, "permissions": {"deny": ["mcp__a__y"]}}`,
			servers: []string{"a"},
			want:    `{"permissions": {"deny": ["mcp__a__x"]}, "permissions": {"deny": ["mcp__foldproxy__a__y"]}}`,
		},
		{
			name:    "escapes and unicode kept around the edit",
			in:      "{\"note\":\"<&>\\u00e9\",\"permissions\":{\"deny\":[\"mcp__a__<t>\"]}}",
			servers: []string{"a"},
			want:    "{\"note\":\"<&>\\u00e9\",\"permissions\":{\"deny\":[\"mcp__foldproxy__a__<t>\"]}}",
		},
		{
			name:    "permissions not an object",
			in:      `{"permissions": []}`,
			servers: []string{"a"},
			wantErr: "permissions: want an object, got an array",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := impRewriteSettings([]byte(tt.in), impRuleMapping{servers: tt.servers, name: "foldproxy", sep: "__", collapse: tt.collapse})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := tt.want
			if want == "" {
				want = tt.in
			}
			if got := string(res.data); got != want {
				t.Errorf("got  %s\nwant %s", got, want)
			}
			if tt.want == "" && len(res.changes) != 0 {
				t.Errorf("changes = %v, want none", res.changes)
			}
			if len(res.warnings) != tt.wantWarn {
				t.Errorf("warnings = %q, want %d", res.warnings, tt.wantWarn)
			}
			if !json.Valid(res.data) {
				t.Errorf("output is not valid JSON: %s", res.data)
			}
		})
	}
}

func TestRunsFoldproxy(t *testing.T) {
	tests := []struct {
		entry      string
		wantOK     bool
		wantConfig string
	}{
		{`{"command": "foldproxy", "args": ["serve", "--config", "/p/f.json"]}`, true, "/p/f.json"},
		{`{"command": "/usr/local/bin/foldproxy", "args": ["serve", "--config=/x.json"]}`, true, "/x.json"},
		{`{"command": "foldproxy", "args": ["serve"]}`, true, ""},
		{`{"command": "foldproxy", "args": ["report"]}`, false, ""},
		{`{"command": "npx", "args": ["foldproxy", "serve"]}`, false, ""},
		{`{"command": "other", "args": ["serve", "--config", "x"]}`, false, ""},
		{`{"command": "foldproxy.exe", "args": ["serve", "-config", "c"]}`, true, "c"},
		{`{"command": "foldproxy", "args": "serve"}`, false, ""},
		{`{"url": "http://localhost/mcp"}`, false, ""},
	}
	for _, tt := range tests {
		cfg, ok := impRunsFoldproxy([]byte(tt.entry))
		if ok != tt.wantOK || cfg != tt.wantConfig {
			t.Errorf("impRunsFoldproxy(%s) = %q, %v; want %q, %v", tt.entry, cfg, ok, tt.wantConfig, tt.wantOK)
		}
	}
}

func TestParseSourceDuplicateKeys(t *testing.T) {
	// JSON.parse semantics: first position, last value.
	in := `{"mcpServers": {"a": {"command": "1"}, "b": {}, "a": {"command": "2"}}}`
	src, err := impParseSource(".mcp.json", []byte(in), nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range src.servers {
		got = append(got, s.name+"="+string(s.raw))
	}
	want := []string{`a={"command": "2"}`, `b={}`}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("servers = %q, want %q", got, want)
	}
}

// FuzzParseSource checks that parsing any bytes as a Claude Code config
// never panics, and that every server it returns is an object copied byte
// for byte from the input.
func FuzzParseSource(f *testing.F) {
	for _, s := range []string{
		importMCPJSON,
		`{"mcpServers": {"a": {"command": "x"}}, "projects": {"/p": {"mcpServers": {"b": {"url": "u"}}}}}`,
		`{"projects": {"/p": {"mcpServers": {"a": 1}}}}`,
		`{"mcpServers": {"a\u0000": {"x": [1, {"y": "\"}"}]}}}`,
		`{"mcpServers": {}}`, `[]`, `{`, `"x"`, ``, ` {"mcpServers" : { "a" : { } } } `,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, name := range []string{".mcp.json", ".claude.json"} {
			src, err := impParseSource(name, data, []string{"/p"})
			if err != nil {
				if !strings.HasPrefix(err.Error(), name+": ") {
					t.Errorf("error %q does not name the file", err)
				}
				continue
			}
			if !json.Valid(data) {
				t.Fatalf("accepted invalid JSON %q", data)
			}
			if len(src.servers) == 0 {
				t.Fatalf("no error and no servers for %q", data)
			}
			for _, s := range src.servers {
				if len(s.raw) == 0 || s.raw[0] != '{' || !json.Valid(s.raw) {
					t.Fatalf("server %q = %q, want a valid object", s.name, s.raw)
				}
				if !bytes.Contains(data, s.raw) {
					t.Fatalf("server %q = %q is not a slice of the input", s.name, s.raw)
				}
			}
		}
	})
}

// FuzzRewriteSettings checks that rewriting any settings file never panics,
// always yields valid JSON, and changes nothing but MCP rules.
func FuzzRewriteSettings(f *testing.F) {
	for _, s := range []string{
		importSettings,
		`{"permissions": {"allow": ["mcp__a", "mcp__b"], "deny": ["mcp__a__x"]}}`,
		`{"permissions": {"allow": ["mcp__foldproxy", "mcp__a", "mcp__b", 1]}}`,
		`{"permissions": {"allow": "x"}}`, `{}`, `[`,
	} {
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, data []byte, collapse bool) {
		res, err := impRewriteSettings(data, impRuleMapping{servers: []string{"a", "b"}, name: "foldproxy", sep: "__", collapse: collapse})
		if err != nil {
			return
		}
		if !json.Valid(res.data) {
			t.Fatalf("rewrite of %q gave invalid JSON %q", data, res.data)
		}
		if len(res.changes) == 0 && !bytes.Equal(res.data, data) {
			t.Fatalf("no changes reported but %q became %q", data, res.data)
		}
		// Everything outside "permissions" is the same.
		var in, out map[string]json.RawMessage
		if json.Unmarshal(data, &in) != nil || json.Unmarshal(res.data, &out) != nil {
			return
		}
		delete(in, "permissions")
		delete(out, "permissions")
		if !reflect.DeepEqual(in, out) {
			t.Fatalf("content outside permissions changed: %q → %q", data, res.data)
		}
	})
}

// TestImportBinaryAndGitignore: .mcp.json runs the absolute path of the
// installed binary; a binary of go run's temporary build, or one that does
// not start, is refused with the command that installs one; foldproxy's
// state and import's backups are added to .gitignore once.
func TestImportBinaryAndGitignore(t *testing.T) {
	e := newImportEnv(t)
	e.write(t, ".mcp.json", importMCPJSON)
	e.write(t, ".gitignore", "node_modules/")
	var stdout, stderr bytes.Buffer
	temp := &importCommand{stdout: &stdout, stderr: &stderr, home: e.home, cwd: e.project,
		exe: filepath.Join(os.TempDir(), "go-build123", "b001", "exe", "foldproxy"), checkStart: func(string) error { return nil }}
	err := temp.Run(context.Background(), []string{"--write"})
	if err == nil || !strings.Contains(err.Error(), "make install") || !strings.Contains(err.Error(), "go install -tags gore2regex ./cmd/foldproxy") {
		t.Errorf("import from a temporary build: %v, want a refusal naming make install", err)
	}
	broken := &importCommand{stdout: &stdout, stderr: &stderr, home: e.home, cwd: e.project,
		exe: "/opt/broken/foldproxy", checkStart: func(string) error { return errors.New("exec format error") }}
	if err := broken.Run(context.Background(), []string{"--write"}); err == nil || !strings.Contains(err.Error(), "does not start (exec format error)") {
		t.Errorf("import with a binary that does not start: %v", err)
	}
	if got := e.read(t, ".mcp.json"); got != importMCPJSON {
		t.Errorf("a refused import changed .mcp.json:\n%s", got)
	}
	for range 2 {
		if out, err := e.run(t, "--write"); err != nil {
			t.Fatalf("import: %v\n%s", err, out)
		}
	}
	if got, want := e.read(t, ".gitignore"), "node_modules/\n# foldproxy: its state, import's backups and private config\n/.foldproxy/\n*.bak-*\n"; got != want {
		t.Errorf(".gitignore = %q, want %q", got, want)
	}
	if !strings.Contains(e.read(t, ".mcp.json"), `"command": "`+importExe+`"`) {
		t.Errorf(".mcp.json does not run %s:\n%s", importExe, e.read(t, ".mcp.json"))
	}
}

// TestImportWiresTheModel: import points Claude Code's model endpoint at
// the project daemon's fixed port; a gateway the project used before
// becomes foldproxy's upstream; a project imported before the model wire
// gets it on the next import; "off" is respected; a fixed port is kept.
func TestImportWiresTheModel(t *testing.T) {
	t.Run("gateway", func(t *testing.T) {
		t.Setenv("GITHUB_TOKEN", "t")
		e := newImportEnv(t)
		e.write(t, ".mcp.json", importMCPJSON)
		e.write(t, ".claude/settings.json", `{"env": {"ANTHROPIC_BASE_URL": "https://gw.example/anthropic/", "FOO": "1"}}`)
		out, err := e.run(t, "--write")
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		var st struct{ Env map[string]string }
		if err := json.Unmarshal([]byte(e.read(t, ".claude/settings.json")), &st); err != nil {
			t.Fatal(err)
		}
		if st.Env["ANTHROPIC_BASE_URL"] != "http://"+importAddr || st.Env["FOO"] != "1" || st.Env["MCP_CONNECTION_NONBLOCKING"] != "false" {
			t.Errorf("settings env = %v", st.Env)
		}
		cfg, err := loadConfig(filepath.Join(e.project, "foldproxy.json"))
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Settings.Model.AnthropicURL != "https://gw.example/anthropic" || cfg.Settings.DaemonListen != importAddr {
			t.Errorf("foldproxy settings: anthropicURL %q daemonListen %q", cfg.Settings.Model.AnthropicURL, cfg.Settings.DaemonListen)
		}
		if !strings.Contains(out, "foldproxy forwards Claude Code's requests there now") {
			t.Errorf("output does not say where requests go now:\n%s", out)
		}
	})
	t.Run("imported before", func(t *testing.T) {
		e := newImportEnv(t)
		e.write(t, "foldproxy.json", `{"mcpServers": {"fs": {"command": "x"}}, "foldproxy": {"readyWait": "1s"}}`)
		e.write(t, ".mcp.json", `{"mcpServers": {"foldproxy": {"command": "/opt/foldproxy/bin/foldproxy", "args": ["serve", "--config", "foldproxy.json"]}}}`)
		out, err := e.run(t, "--write")
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		if got := e.read(t, "foldproxy.json"); got != `{"mcpServers": {"fs": {"command": "x"}}, "foldproxy": {"readyWait": "1s", "daemonListen": "`+importAddr+`"}}` {
			t.Errorf("foldproxy.json = %s", got)
		}
		if got := e.read(t, ".claude/settings.json"); !strings.Contains(got, `"ANTHROPIC_BASE_URL": "http://`+importAddr+`"`) {
			t.Errorf(".claude/settings.json = %s", got)
		}
		// Again: nothing left to do.
		out, err = e.run(t, "--write")
		if err != nil || !strings.Contains(out, "Nothing to change") {
			t.Errorf("a third import: %v\n%s", err, out)
		}
	})
	t.Run("off and fixed", func(t *testing.T) {
		for listen, wantURL := range map[string]string{"off": "", "127.0.0.1:9999": "http://127.0.0.1:9999"} {
			e := newImportEnv(t)
			e.write(t, "foldproxy.json", `{"mcpServers": {}, "foldproxy": {"daemonListen": "`+listen+`"}}`)
			e.write(t, ".mcp.json", importMCPJSON)
			out, err := e.run(t, "--write")
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			settings, _ := os.ReadFile(filepath.Join(e.project, ".claude", "settings.json"))
			if wantURL == "" {
				if strings.Contains(string(settings), "ANTHROPIC_BASE_URL") || !strings.Contains(out, `daemonListen "off"`) {
					t.Errorf("daemonListen off: settings %s\n%s", settings, out)
				}
				continue
			}
			if !strings.Contains(string(settings), `"ANTHROPIC_BASE_URL": "`+wantURL+`"`) || !strings.Contains(e.read(t, "foldproxy.json"), `"daemonListen": "`+listen+`"`) {
				t.Errorf("daemonListen %s: settings %s, config %s", listen, settings, e.read(t, "foldproxy.json"))
			}
		}
	})
}

// FuzzSetMember checks that setting a member of any JSON object, from
// empty or not, never panics (on any input), and on valid JSON yields valid JSON holding the value, and
// keeps every other member.
func FuzzSetMember(f *testing.F) {
	for _, s := range []string{`{}`, "{\n  \"a\": 1\n}\n", `{"env": {"X": "1"}, "b": [1]}`, `{"ANTHROPIC_BASE_URL": 1}`, `[1]`, `{`, `  {  }  `} {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, data []byte, nested bool) {
		val := []byte(`"http://127.0.0.1:1"`)
		if nested {
			val = []byte("{\n  \"k\": \"v\"\n}")
		}
		got, err := impSetMember(data, "ANTHROPIC_BASE_URL", val, nested)
		if err != nil || !json.Valid(data) {
			return // impWireModel checks the file is valid JSON first
		}
		var in, out map[string]any
		if err := json.Unmarshal(got, &out); err != nil {
			t.Fatalf("setting a member of %q gave invalid JSON %q: %v", data, got, err)
		}
		var want any
		_ = json.Unmarshal(val, &want)
		if !reflect.DeepEqual(out["ANTHROPIC_BASE_URL"], want) {
			t.Fatalf("%q: the member is %v, want %v", got, out["ANTHROPIC_BASE_URL"], want)
		}
		if json.Unmarshal(data, &in) != nil {
			return
		}
		delete(in, "ANTHROPIC_BASE_URL")
		delete(out, "ANTHROPIC_BASE_URL")
		if !reflect.DeepEqual(in, out) {
			t.Fatalf("other members changed: %q → %q", data, got)
		}
	})
}

// TestImpPickPort: the daemon's port is a free loopback port, the same for
// the same project while it stays free.
func TestImpPickPort(t *testing.T) {
	a, b := impPickPort("/src/proj"), impPickPort("/src/proj")
	if a != b || !strings.HasPrefix(a, "127.0.0.1:") {
		t.Fatalf("impPickPort: %q then %q", a, b)
	}
	ln, err := net.Listen("tcp", a)
	if err != nil {
		t.Fatalf("the chosen port is not free: %v", err)
	}
	defer ln.Close()
	if c := impPickPort("/src/proj"); c == a {
		t.Errorf("impPickPort chose %s, which is taken", c)
	}
}
