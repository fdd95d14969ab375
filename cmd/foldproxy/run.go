package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/foldproxy/foldproxy/fold"
	"github.com/foldproxy/foldproxy/proxy/attach"
	"github.com/foldproxy/foldproxy/proxy/modelfront"
)

// runCommand puts foldproxy in front of an agent in one step:
//
//	foldproxy run [--config F] [--state DIR] [--agent KIND] -- <agent> [args...]
//
// It finds the project's daemon (the one every stdio session of the
// project attaches to) or starts it, and waits until it serves: a daemon
// that is slow to start is reported as it waits, and one that cannot start
// is an error before the agent runs, never a model error later. It then
// holds the daemon up for the agent's life (a holding attach connection,
// attach.Hello.Hold, inherited by the agent), points the agent's
// model endpoint at the daemon's model front and its MCP configuration at
// foldproxy, each the way that agent reads them (agentSetup), and replaces
// itself with the agent (exec): the terminal, the signals (SIGINT, SIGTERM
// and the rest) and the exit status are the agent's own, with no process
// in between to forward them.
type runCommand struct {
	stdout, stderr io.Writer
	// cwd, home and env are the process's own unless set (tests).
	cwd, home string
	env       []string
}

// runFlags is run's command line.
type runFlags struct {
	config, state, agent string
	startTimeout         time.Duration
	print                bool
	argv                 []string // the agent's command line
}

func (c *runCommand) parse(args []string) (runFlags, error) {
	var f runFlags
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	fs.StringVar(&f.config, "config", "", "foldproxy's config (default: the one the project's .mcp.json runs foldproxy with, else ./foldproxy.json, else ./.mcp.json)")
	fs.StringVar(&f.state, "state", "", "state folder (default .foldproxy beside the config)")
	fs.StringVar(&f.agent, "agent", "", "how to wire the agent: claude, codex, opencode or other (default: from the command's name)")
	fs.DurationVar(&f.startTimeout, "start-timeout", 2*time.Minute, "how long to wait for the daemon to start")
	fs.BoolVar(&f.print, "print", false, "print the agent's environment changes and command line instead of running it")
	fs.Usage = func() {
		fmt.Fprintln(c.stderr, "usage: foldproxy run [--config FILE] [--state DIR] [--agent KIND] [--print] -- <agent> [args...]")
		fmt.Fprintln(c.stderr, "  e.g. foldproxy run -- claude;  foldproxy run -- codex exec 'fix the tests';  foldproxy run -- opencode")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return f, err
	}
	f.argv = fs.Args()
	if len(f.argv) == 0 {
		fs.Usage()
		return f, errors.New("no agent to run: put its command after --, e.g. foldproxy run -- claude")
	}
	if f.agent != "" && !slices.Contains([]string{agentClaude, agentCodex, agentOpenCode, agentOther}, f.agent) {
		return f, fmt.Errorf("--agent %q: want claude, codex, opencode or other", f.agent)
	}
	return f, nil
}

// Run implements command. It returns only on an error: on success the
// process has become the agent.
func (c *runCommand) Run(ctx context.Context, args []string) error {
	f, err := c.parse(args)
	if err != nil {
		return err
	}
	cwd, home, env := c.cwd, c.home, c.env
	if cwd == "" {
		if cwd, err = os.Getwd(); err != nil {
			return err
		}
	}
	if home == "" {
		home, _ = os.UserHomeDir()
	}
	if env == nil {
		env = os.Environ()
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding foldproxy's own binary for the agent's MCP entry: %w", err)
	}
	if r, err := filepath.EvalSymlinks(exe); err == nil {
		exe = r
	}
	found, err := findRunConfig(cwd, f.config)
	if err != nil {
		return err
	}
	// The configuration is checked, and the state folder made, before
	// anything starts: a bad config is an error here, naming the field.
	cfg, dir, err := loadSetup(found.path, f.state)
	if err != nil {
		return err
	}
	ident, err := configIdentity(found.path)
	if err != nil {
		return err
	}
	conn, welcome, err := c.holdDaemon(ctx, dir, found.path, ident, f.startTimeout)
	if err != nil {
		return err
	}
	defer conn.Close()
	if welcome.HTTP == "" {
		return fmt.Errorf("the foldproxy daemon of %s (pid %d) serves no model front: foldproxy.daemonListen is \"off\" in %s (remove it), or the daemon is of an older foldproxy (stop it: kill %d)",
			dir, welcome.PID, found.path, welcome.PID)
	}
	kind := f.agent
	if kind == "" {
		kind = agentKindOf(f.argv[0])
	}
	setup, err := agentSetup(agentInput{
		kind: kind, argv: f.argv, env: env, base: "http://" + welcome.HTTP, token: authToken(cfg.Settings, envLookup(env)),
		exe: exe, config: found.path, state: dir, mcpReaches: found.mcpRunsFoldproxy || claudePluginEnabled(cwd, home, env),
		strictMCP: found.projectMCP,
	})
	if err != nil {
		return err
	}
	if f.print {
		for _, n := range setup.notes {
			fmt.Fprintln(c.stdout, n)
		}
		fmt.Fprintln(c.stdout, strings.Join(shellWords(setup.argv), " "))
		return nil
	}
	path, err := lookPathIn(setup.argv[0], setup.env)
	if err != nil {
		return fmt.Errorf("the agent %q: %w", setup.argv[0], err)
	}
	fmt.Fprintf(c.stderr, "foldproxy run: %s folds through %s (page %s/ui; daemon pid %d, log %s)\n",
		kind, "http://"+welcome.HTTP, "http://"+welcome.HTTP, welcome.PID, filepath.Join(dir, daemonLogName))
	// The holding connection goes to the agent: the daemon stays up until
	// the agent (and whatever of it still holds the descriptor) is gone.
	return execAgent(path, setup.argv, setup.env, conn)
}

// holdDaemon connects to the project's daemon, starting it when none
// answers, and holds it (attach.Hello.Hold). While the daemon starts
// it says so on stderr every few seconds; past timeout it gives up with
// the daemon's log named.
func (c *runCommand) holdDaemon(ctx context.Context, dir, config, ident string, timeout time.Duration) (net.Conn, attach.Welcome, error) {
	var w attach.Welcome
	if !daemonSupported {
		return nil, w, errors.New("foldproxy run needs the shared daemon, which needs a unix system; run foldproxy serve --listen and point the agent at it by hand")
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	logPath := filepath.Join(dir, daemonLogName)
	type dialed struct {
		conn net.Conn
		err  error
	}
	done := make(chan dialed, 1)
	go func() {
		conn, err := dialDaemon(ctx, dir, config, []string{"--log-level", "info", "--entry-name", "foldproxy"})
		done <- dialed{conn, err}
	}()
	start := time.Now()
	tick := time.NewTicker(3 * time.Second)
	defer tick.Stop()
	var d dialed
wait:
	for {
		select {
		case d = <-done:
			break wait
		case <-tick.C:
			fmt.Fprintf(c.stderr, "foldproxy run: the daemon of %s is still starting (%s; its log: %s)\n", dir, time.Since(start).Round(time.Second), logPath)
		}
	}
	if d.err != nil {
		if errors.Is(d.err, context.DeadlineExceeded) || ctx.Err() != nil {
			return nil, w, fmt.Errorf("the foldproxy daemon of %s did not start within %s (--start-timeout); see %s: %w", dir, timeout, logPath, d.err)
		}
		return nil, w, fmt.Errorf("%w; the agent was not started", d.err)
	}
	conn := d.conn
	hello, _ := json.Marshal(attach.Hello{Version: attach.Version, Config: ident, Hold: true})
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := conn.Write(append(hello, '\n')); err != nil {
		conn.Close()
		return nil, w, fmt.Errorf("talking to the foldproxy daemon of %s: %w", dir, err)
	}
	line, err := bufio.NewReader(io.LimitReader(conn, 64<<10)).ReadBytes('\n')
	if err != nil {
		conn.Close()
		return nil, w, fmt.Errorf("the foldproxy daemon of %s did not answer: %w (see %s)", dir, err, logPath)
	}
	_ = conn.SetDeadline(time.Time{})
	if err := json.Unmarshal(line, &w); err != nil {
		conn.Close()
		return nil, w, fmt.Errorf("the foldproxy daemon of %s answered %.100q: %w", dir, line, err)
	}
	if w.Error != "" {
		conn.Close()
		return nil, w, fmt.Errorf("the foldproxy daemon of %s refused: %s", dir, w.Error)
	}
	return conn, w, nil
}

// runConfig is the configuration run found for the project.
type runConfig struct {
	path string
	// mcpRunsFoldproxy: the project's .mcp.json already runs foldproxy
	// (an imported project), so Claude Code reaches it without help.
	mcpRunsFoldproxy bool
	// projectMCP: the config is the project's own .mcp.json, whose
	// servers Claude Code would otherwise also start directly.
	projectMCP bool
}

// findRunConfig finds foldproxy's configuration: --config; else the one
// the project's .mcp.json runs foldproxy with (foldproxy import wrote it);
// else foldproxy.json; else the project's .mcp.json itself (an mcpServers
// document is a foldproxy config as it is).
func findRunConfig(cwd, flagConfig string) (runConfig, error) {
	abs := func(p string) string {
		if !filepath.IsAbs(p) {
			p = filepath.Join(cwd, p)
		}
		return filepath.Clean(p)
	}
	mcpPath := filepath.Join(cwd, ".mcp.json")
	var rc runConfig
	var entryConfig string
	if data, err := os.ReadFile(mcpPath); err == nil {
		var doc struct {
			MCPServers map[string]json.RawMessage `json:"mcpServers"`
		}
		if json.Unmarshal(data, &doc) == nil {
			for _, raw := range doc.MCPServers {
				if cfg, ok := impRunsFoldproxy(raw); ok {
					rc.mcpRunsFoldproxy = true
					if cfg != "" && entryConfig == "" {
						entryConfig = abs(cfg)
					}
				}
			}
		}
	}
	switch {
	case flagConfig != "":
		rc.path = abs(flagConfig)
	case entryConfig != "":
		rc.path = entryConfig
	default:
		if _, err := os.Stat(filepath.Join(cwd, "foldproxy.json")); err == nil {
			rc.path = filepath.Join(cwd, "foldproxy.json")
		} else if _, err := os.Stat(mcpPath); err == nil && !rc.mcpRunsFoldproxy {
			rc.path = mcpPath
		} else {
			return rc, fmt.Errorf("no foldproxy configuration in %s: pass --config FILE, run \"foldproxy import --write\" to move the project's MCP servers behind foldproxy, or start with none: echo '{\"mcpServers\":{}}' > foldproxy.json", cwd)
		}
	}
	rc.projectMCP = impSamePath(rc.path, mcpPath)
	return rc, nil
}

// The kinds of agent run knows how to wire.
const (
	agentClaude   = "claude"
	agentCodex    = "codex"
	agentOpenCode = "opencode"
	agentOther    = "other"
)

// agentKindOf names the kind of agent a command is, by its name.
func agentKindOf(cmd string) string {
	base := strings.TrimSuffix(strings.ToLower(filepath.Base(cmd)), ".exe")
	switch base {
	case "claude", "claude-code":
		return agentClaude
	case "codex":
		return agentCodex
	case "opencode":
		return agentOpenCode
	}
	return agentOther
}

// agentInput is what agentSetup wires an agent from.
type agentInput struct {
	kind  string
	argv  []string
	env   []string
	base  string // the daemon's HTTP front: http://127.0.0.1:PORT
	token string // foldproxy's token, "" for none
	// exe, config and state make the agent's MCP entry: exe serve
	// --config config --state state (a stdio relay to the same daemon).
	exe, config, state string
	// mcpReaches: the agent's own MCP configuration reaches foldproxy
	// already (Claude Code: an imported .mcp.json, or the plugin).
	mcpReaches bool
	// strictMCP: the config is the project's .mcp.json, so Claude Code is
	// told to use foldproxy's entry only (--strict-mcp-config), or it
	// would also start every server of it directly, unfolded.
	strictMCP bool
}

// agentWiring is the agent's command line and environment, and one line
// per change for --print.
type agentWiring struct {
	argv  []string
	env   []string
	notes []string
}

// foldproxyTools are foldproxy's own MCP tools: the fold, checkpoint and
// memory tools.
var foldproxyTools = []string{
	fold.ToolCreate, fold.ToolReturn, fold.ToolStatus, fold.ToolRecall,
	fold.ToolCheckpointSave, fold.ToolCheckpointList, fold.ToolCheckpointResume,
	fold.ToolMemorySearch, fold.ToolMemoryRecord, fold.ToolRemediationRecord,
}

// claudeSubcommands are Claude Code's subcommands, which take no
// --mcp-config.
var claudeSubcommands = []string{"mcp", "config", "plugin", "plugins", "doctor", "update", "install", "setup-token", "migrate-installer", "auth"}

// agentSetup wires an agent to foldproxy the way that agent reads its
// settings:
//   - Claude Code: ANTHROPIC_BASE_URL, foldproxy's token in
//     ANTHROPIC_CUSTOM_HEADERS, MCP_CONNECTION_NONBLOCKING=false (so that
//     claude -p has its MCP tools before its first request), and unless its
//     configuration reaches foldproxy already, --mcp-config with a stdio
//     entry that runs foldproxy serve on the same config and state;
//   - Codex CLI: -c overrides for a model provider "foldproxy" with
//     wire_api "responses" at the daemon's /v1 (the token in an
//     X-Foldproxy-Token header read from FOLDPROXY_TOKEN) and an MCP
//     server "foldproxy";
//   - OpenCode: OPENCODE_CONFIG_CONTENT (merged into one the user set)
//     with the openai and anthropic providers' baseURL and headers, and a
//     local MCP server "foldproxy";
//   - any other: OPENAI_BASE_URL and ANTHROPIC_BASE_URL (what the OpenAI
//     and Anthropic SDKs read), FOLDPROXY_TOKEN, and FOLDPROXY_MCP_URL for
//     an agent that takes an HTTP MCP server.
//
// Every agent also gets FOLDPROXY_CONFIG and FOLDPROXY_STATE, which the
// Claude Code plugin's MCP entry reads.
func agentSetup(in agentInput) (agentWiring, error) {
	w := agentWiring{argv: slices.Clone(in.argv), env: slices.Clone(in.env)}
	set := func(k, v, note string) {
		w.env = setEnv(w.env, k, v)
		if note == "" {
			note = v
		}
		w.notes = append(w.notes, k+"="+note)
	}
	mcpArgs := []string{"serve", "--config", in.config, "--state", in.state}
	set("FOLDPROXY_CONFIG", in.config, "")
	set("FOLDPROXY_STATE", in.state, "")
	if in.token != "" {
		set("FOLDPROXY_TOKEN", in.token, "<foldproxy's token>")
	}
	insert := func(args ...string) {
		w.argv = slices.Insert(w.argv, 1, args...)
	}
	switch in.kind {
	case agentClaude:
		set("ANTHROPIC_BASE_URL", in.base, "")
		if in.token != "" {
			h := modelTokenHeaderLine(in.token)
			if old, ok := lookupEnv(in.env, "ANTHROPIC_CUSTOM_HEADERS"); ok && strings.TrimSpace(old) != "" {
				h = strings.TrimRight(old, "\n") + "\n" + h
			}
			set("ANTHROPIC_CUSTOM_HEADERS", h, "<its own lines>"+"\\n"+modelfront.TokenHeader+": <foldproxy's token>")
		}
		if _, ok := lookupEnv(in.env, "MCP_CONNECTION_NONBLOCKING"); !ok {
			set("MCP_CONNECTION_NONBLOCKING", "false", "")
		}
		sub := len(in.argv) > 1 && slices.Contains(claudeSubcommands, in.argv[1])
		if !in.mcpReaches && !sub {
			entry, _ := json.Marshal(map[string]any{"mcpServers": map[string]any{
				"foldproxy": map[string]any{"type": "stdio", "command": in.exe, "args": mcpArgs},
			}})
			args := []string{"--mcp-config", string(entry)}
			if in.strictMCP {
				args = append(args, "--strict-mcp-config")
			}
			insert(args...)
		}
	case agentCodex:
		q := func(s string) string { b, _ := json.Marshal(s); return string(b) }
		list := make([]string, len(mcpArgs))
		for i, a := range mcpArgs {
			list[i] = q(a)
		}
		var args []string
		c := func(kv string) { args = append(args, "-c", kv) }
		c(`model_provider="foldproxy"`)
		c(`model_providers.foldproxy.name="foldproxy"`)
		c(`model_providers.foldproxy.base_url=` + q(in.base+"/v1"))
		c(`model_providers.foldproxy.wire_api="responses"`)
		// The Responses WebSocket is refused by the model front (proxy's
		// isWebSocketUpgrade says why): never tried.
		c(`model_providers.foldproxy.supports_websockets=false`)
		if _, ok := lookupEnv(in.env, "OPENAI_API_KEY"); ok {
			c(`model_providers.foldproxy.env_key="OPENAI_API_KEY"`)
		} else {
			c(`model_providers.foldproxy.requires_openai_auth=true`)
		}
		if in.token != "" {
			c(`model_providers.foldproxy.env_http_headers={"` + modelfront.TokenHeader + `"="FOLDPROXY_TOKEN"}`)
		}
		c(`mcp_servers.foldproxy.command=` + q(in.exe))
		c(`mcp_servers.foldproxy.args=[` + strings.Join(list, ",") + `]`)
		// Codex gives an MCP server 10 s to answer initialize and
		// tools/list, then goes on without its tools; a stdio entry that
		// attaches to a daemon still starting (or a loaded machine) can
		// take longer, and a session without the fold tools never folds.
		c(`mcp_servers.foldproxy.startup_timeout_sec=60`)
		// Codex asks before an MCP tool it cannot tell is read-only, and
		// "codex exec" cannot ask: foldproxy's own tools change nothing
		// outside foldproxy, so they are approved; the upstreams' tools
		// keep Codex's own rule.
		for _, tool := range foldproxyTools {
			c(`mcp_servers.foldproxy.tools.` + tool + `.approval_mode="approve"`)
		}
		insert(args...)
	case agentOpenCode:
		cfg := map[string]any{}
		if old, ok := lookupEnv(in.env, "OPENCODE_CONFIG_CONTENT"); ok && strings.TrimSpace(old) != "" {
			if err := json.Unmarshal([]byte(old), &cfg); err != nil {
				return w, fmt.Errorf("OPENCODE_CONFIG_CONTENT is set but is not a JSON object (%v): fix or unset it", err)
			}
		}
		opts := map[string]any{"baseURL": in.base + "/v1"}
		if in.token != "" {
			opts["headers"] = map[string]string{modelfront.TokenHeader: in.token}
		}
		providers := subMap(cfg, "provider")
		for _, p := range []string{"openai", "anthropic"} {
			pm := subMap(providers, p)
			o := subMap(pm, "options")
			for k, v := range opts {
				o[k] = v
			}
		}
		subMap(cfg, "mcp")["foldproxy"] = map[string]any{"type": "local", "enabled": true, "command": append([]string{in.exe}, mcpArgs...)}
		b, err := json.Marshal(cfg)
		if err != nil {
			return w, err
		}
		set("OPENCODE_CONFIG_CONTENT", string(b), "{provider.openai/anthropic.options.baseURL: "+in.base+"/v1, mcp.foldproxy: foldproxy serve}")
	default:
		set("OPENAI_BASE_URL", in.base+"/v1", "")
		set("ANTHROPIC_BASE_URL", in.base, "")
		set("FOLDPROXY_MCP_URL", in.base+"/mcp", "")
	}
	return w, nil
}

// modelTokenHeaderLine is foldproxy's token as one header line of
// ANTHROPIC_CUSTOM_HEADERS.
func modelTokenHeaderLine(token string) string { return modelfront.TokenHeader + ": " + token }

// subMap returns m[k] as a map, making it when absent or not a map.
func subMap(m map[string]any, k string) map[string]any {
	if v, ok := m[k].(map[string]any); ok {
		return v
	}
	v := map[string]any{}
	m[k] = v
	return v
}

// setEnv sets k=v in env, replacing every earlier k.
func setEnv(env []string, k, v string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if name, _, _ := strings.Cut(kv, "="); name != k {
			out = append(out, kv)
		}
	}
	return append(out, k+"="+v)
}

func lookupEnv(env []string, k string) (string, bool) {
	for i := len(env) - 1; i >= 0; i-- {
		if name, v, ok := strings.Cut(env[i], "="); ok && name == k {
			return v, true
		}
	}
	return "", false
}

func envLookup(env []string) func(string) string {
	return func(k string) string { v, _ := lookupEnv(env, k); return v }
}

// lookPathIn finds cmd on the PATH of env.
func lookPathIn(cmd string, env []string) (string, error) {
	if strings.ContainsRune(cmd, filepath.Separator) {
		return exec.LookPath(cmd)
	}
	path, _ := lookupEnv(env, "PATH")
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, cmd)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("not found on PATH")
}

// claudePluginEnabled reports whether Claude Code's settings (the user's,
// the project's, the project's local ones) enable foldproxy's plugin,
// whose MCP entry then connects Claude Code to foldproxy.
func claudePluginEnabled(cwd, home string, env []string) bool {
	dir := filepath.Join(home, ".claude")
	if d, ok := lookupEnv(env, "CLAUDE_CONFIG_DIR"); ok && d != "" {
		dir = d
	}
	for _, p := range []string{
		filepath.Join(dir, "settings.json"),
		filepath.Join(cwd, ".claude", "settings.json"),
		filepath.Join(cwd, ".claude", "settings.local.json"),
	} {
		data, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		var s struct {
			EnabledPlugins map[string]bool `json:"enabledPlugins"`
		}
		if json.Unmarshal(data, &s) != nil {
			continue
		}
		for k, on := range s.EnabledPlugins {
			if on && strings.HasPrefix(k, "foldproxy@") {
				return true
			}
		}
	}
	return false
}

// shellWords quotes each word for a POSIX shell when it needs it.
func shellWords(words []string) []string {
	out := make([]string, len(words))
	for i, w := range words {
		out[i] = impShellQuote(w)
	}
	return out
}
