package main

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/foldproxy/foldproxy/policy"
	"github.com/foldproxy/foldproxy/policy/jsonscan"
)

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
