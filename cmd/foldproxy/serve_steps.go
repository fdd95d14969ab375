package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/foldproxy/foldproxy/fold"
	"github.com/foldproxy/foldproxy/fold/memory"
	"github.com/foldproxy/foldproxy/fold/modelwire"
	foldstore "github.com/foldproxy/foldproxy/fold/store"
	"github.com/foldproxy/foldproxy/intercept"
	"github.com/foldproxy/foldproxy/intercept/secrets"
	"github.com/foldproxy/foldproxy/intercept/tokens"
	"github.com/foldproxy/foldproxy/policy"
	"github.com/foldproxy/foldproxy/proxy"
	"github.com/foldproxy/foldproxy/proxy/attach"
	"github.com/foldproxy/foldproxy/proxy/modelfront"
	"github.com/foldproxy/foldproxy/proxy/transparent"
	"github.com/foldproxy/foldproxy/upstreams"
)

// The steps of serve's setup, in the order Run takes them; each is tested
// on its own (serve_steps_test.go).

// serveFlags is serve's command line.
type serveFlags struct {
	config, listen, state, proxyListen, metrics, logLevel, entry string
	standalone, daemon                                           bool
	readyFD                                                      int
	idleExit                                                     time.Duration
}

// parseServeFlags parses serve's command line; the usage and flag errors go
// to stderr.
func parseServeFlags(args []string, stderr io.Writer) (serveFlags, error) {
	var f serveFlags
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.config, "config", "", "configuration file: a Claude Code mcpServers document (required)")
	fs.StringVar(&f.listen, "listen", "", "serve streamable HTTP on this address (path /mcp) instead of stdio")
	fs.StringVar(&f.state, "state", "", "state folder (Badger store, audit log); default .foldproxy beside the config")
	fs.StringVar(&f.proxyListen, "proxy-listen", "", "serve a forward proxy (HTTPS_PROXY, transparent mode) on this address")
	fs.StringVar(&f.metrics, "metrics", "", "serve Prometheus /metrics on this address (also on --listen)")
	fs.StringVar(&f.logLevel, "log-level", "info", "log level on stderr: debug, info, warn, error")
	fs.StringVar(&f.entry, "entry-name", "foldproxy", "foldproxy's own name in the agent's MCP config, for the tool name length check")
	fs.BoolVar(&f.standalone, "standalone", false, "serve this stdio session in this process, without the project's shared daemon (one process per state folder at a time)")
	fs.BoolVar(&f.daemon, "daemon", false, "run as the shared daemon of the state folder (started by foldproxy itself)")
	fs.IntVar(&f.readyFD, "ready-fd", 0, "with --daemon: file descriptor on which to say \"ready\" or why not (set by foldproxy)")
	fs.DurationVar(&f.idleExit, "idle-exit", 0, "with --daemon: how long the daemon stays up after its last session ends")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: foldproxy serve --config FILE [--listen ADDR] [--proxy-listen ADDR] [--state DIR] [--metrics ADDR]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return f, err
	}
	if f.config == "" {
		fs.Usage()
		return f, errors.New("--config is required")
	}
	if f.daemon && !daemonSupported {
		return f, errors.New("--daemon needs a unix system; use --standalone")
	}
	return f, nil
}

// serveMode is how a serve process serves.
type serveMode int

const (
	// modeRelay relays this stdio session to the project's shared daemon
	// (started when none answers): the default over stdio.
	modeRelay serveMode = iota
	// modeStdio serves this stdio session in this process (--standalone,
	// or a system without the daemon).
	modeStdio
	// modeHTTP serves streamable HTTP (--listen), and the project's stdio
	// relays on the state folder's socket.
	modeHTTP
	// modeDaemon is the shared daemon: it serves the relays attached to
	// the state folder's socket.
	modeDaemon
)

func (m serveMode) String() string {
	return [...]string{"relay", "stdio", "http", "daemon"}[m]
}

// mode is how this process serves, once listenDefaults has filled the
// addresses the flags leave to the configuration.
func (f serveFlags) mode() serveMode {
	switch {
	case f.daemon:
		return modeDaemon
	case f.listen != "":
		return modeHTTP
	case f.standalone || !daemonSupported:
		return modeStdio
	}
	return modeRelay
}

// logLevelOf parses --log-level.
func logLevelOf(s string) (slog.Level, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(s)); err != nil {
		return level, fmt.Errorf("--log-level %q: want debug, info, warn or error", s)
	}
	return level, nil
}

// loadSetup loads the configuration file and prepares the state folder
// (--state, else the config's stateDir, else .foldproxy beside the
// config), returning its absolute path.
func loadSetup(configPath, stateFlag string) (*fileConfig, string, error) {
	cfg, err := loadConfig(configPath)
	if err != nil {
		return nil, "", err
	}
	dir := stateDirOf(cfg, stateFlag)
	if err := prepareStateDir(dir); err != nil {
		return nil, "", err
	}
	if dir, err = filepath.Abs(dir); err != nil {
		return nil, "", err
	}
	return cfg, dir, nil
}

// listenDefaults fills the listen addresses not given as flags from the
// configuration.
func listenDefaults(st policy.Settings, listen, metricsAddr, proxyListen *string) {
	if *listen == "" {
		*listen = st.Listen
	}
	if *metricsAddr == "" {
		*metricsAddr = st.Metrics.Listen
	}
	if *proxyListen == "" {
		*proxyListen = st.ProxyListen
	}
}

// daemonArgs are the flags a relay passes on to the daemon it starts,
// besides the config and state folder: the log level, the entry name, and
// the addresses given as flags that the configuration does not set (the
// daemon reads those from the configuration itself).
func daemonArgs(f serveFlags, st policy.Settings) []string {
	args := []string{"--log-level", f.logLevel, "--entry-name", f.entry}
	if f.metrics != "" && f.metrics != st.Metrics.Listen {
		args = append(args, "--metrics", f.metrics)
	}
	if f.proxyListen != "" && f.proxyListen != st.ProxyListen {
		args = append(args, "--proxy-listen", f.proxyListen)
	}
	return args
}

// attachEnv names the environment variable that chooses how a stdio
// process attaches to the project's daemon: "relay" relays every line
// through this process; anything else (the default) passes the agent's
// stdin and stdout to the daemon where the system allows it, this process
// only waiting, to take the session to the next daemon if the daemon
// dies (attach.RelayOptions.PassFDs). The tests run both.
const attachEnv = "FOLDPROXY_ATTACH"

// relayOptions are the options of a stdio relay to the daemon of state
// folder dir, which it starts with daemonArgs when none answers; ident
// names the configuration (configIdentity), so that a daemon of another
// one does not serve it. The daemon's log records go to stderr. getenv
// reads attachEnv.
func relayOptions(f serveFlags, st policy.Settings, dir, ident string, stderr io.Writer, logger *slog.Logger, getenv func(string) string) attach.RelayOptions {
	extra := daemonArgs(f, st)
	return attach.RelayOptions{
		Dial:            func(ctx context.Context) (net.Conn, error) { return dialDaemon(ctx, dir, f.config, extra) },
		WaitExit:        func(ctx context.Context) error { return waitDaemonExit(ctx, dir) },
		Config:          ident,
		MaxMessageBytes: st.MaxMessageBytes,
		Stderr:          stderr,
		Logger:          logger,
		PassFDs:         getenv(attachEnv) != "relay",
	}
}

// daemonLogger is the daemon's logger: its records go to the log file in
// the state folder dir and to fan (the relays attached, once the attach
// socket serves). closeLog closes the file.
func daemonLogger(dir string, level slog.Level, fan io.Writer) (logger *slog.Logger, closeLog func(), err error) {
	f, err := openDaemonLog(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("daemon log: %w", err)
	}
	logger = slog.New(slog.NewTextHandler(io.MultiWriter(f, fan), &slog.HandlerOptions{Level: level}))
	return logger, func() { f.Close() }, nil
}

// lockStateFolder makes this process the one that serves state folder dir
// (lockDaemon): the daemon waits up to 30 seconds for one that is exiting,
// a foreground --listen or --standalone server a tenth of a second.
func lockStateFolder(ctx context.Context, dir string, mode serveMode) (release func(), err error) {
	wait := 100 * time.Millisecond
	if mode == modeDaemon {
		wait = 30 * time.Second
	}
	return lockDaemon(ctx, dir, wait)
}

// authToken is the token HTTP clients must present: foldproxy.authToken,
// else FOLDPROXY_TOKEN.
func authToken(st policy.Settings, getenv func(string) string) string {
	if st.AuthToken != "" {
		return st.AuthToken
	}
	return getenv("FOLDPROXY_TOKEN")
}

// checkExposure refuses to listen beyond loopback without a token.
func checkExposure(listen, proxyListen, token string) error {
	if listen != "" && !proxy.IsLoopback(listen) && token == "" {
		return fmt.Errorf("--listen %s is not a loopback address: set foldproxy.authToken in the config or FOLDPROXY_TOKEN", listen)
	}
	if proxyListen != "" && !proxy.IsLoopback(proxyListen) && token == "" {
		return fmt.Errorf("--proxy-listen %s is not a loopback address: set foldproxy.authToken in the config or FOLDPROXY_TOKEN (clients send it as Proxy-Authorization)", proxyListen)
	}
	return nil
}

// resolvePaths makes the settings' relative paths relative to the config's
// folder, and returns the audit log's path (audit.jsonl in the state
// folder by default, "-" for none).
func resolvePaths(st *policy.Settings, configDir, stateDir string) (auditPath string) {
	if st.Proxy.ExtraRootsFile != "" && !filepath.IsAbs(st.Proxy.ExtraRootsFile) {
		st.Proxy.ExtraRootsFile = filepath.Join(configDir, st.Proxy.ExtraRootsFile)
	}
	if st.Scrub.GitleaksConfig != "" && !filepath.IsAbs(st.Scrub.GitleaksConfig) {
		st.Scrub.GitleaksConfig = filepath.Join(configDir, st.Scrub.GitleaksConfig)
	}
	auditPath = st.Audit.Path
	switch {
	case auditPath == "":
		auditPath = filepath.Join(stateDir, "audit.jsonl")
	case auditPath != "-" && !filepath.IsAbs(auditPath):
		auditPath = filepath.Join(configDir, auditPath)
	}
	return auditPath
}

// coreConfig is what serveCore is opened from.
type coreConfig struct {
	servers   []upstreams.Entry
	settings  policy.Settings // with its paths resolved (resolvePaths)
	configDir string
	stateDir  string
	auditPath string
	// resumable: sessions can come back after a restart (HTTP ones with
	// their session id, attached ones through their relay), so their open
	// branches are kept; a plain stdio session's are closed as failed.
	resumable bool
	logger    *slog.Logger
	// loops are foldproxy's own listeners, which the model front's
	// connections must not reach (loop.go); nil: none checked.
	loops *selfListeners
}

// serveCore is what every front serves from: the state store, the
// upstreams, the secret scanner, the token counter, the audit log, the
// memories, the fold manager and the MCP front's server over them.
type serveCore struct {
	st             policy.Settings
	logger         *slog.Logger
	auditPath      string // the audit log ("-": none), which the page reads
	metrics        *intercept.Metrics
	store          fold.Store
	set            *upstreams.Set
	scrubber       *secrets.Scrubber
	counter        *tokens.Counter
	auditor        *intercept.Auditor
	mem            *memory.Service // nil: memories are off
	mgr            *fold.Manager
	chain, control []intercept.Interceptor
	srv            *proxy.Server
	closers        []func() // what is open, in the order it was opened
	closeErr       error    // what closing the store reported
	loops          *selfListeners
	served         *proxy.ServedTools // the tools the MCP front served, for the model front
}

// openCore opens the core's parts in dependency order. When a part fails,
// the parts already open are closed before it returns the error.
func openCore(ctx context.Context, cc coreConfig) (_ *serveCore, err error) {
	st, logger := cc.settings, cc.logger
	c := &serveCore{st: st, logger: logger, metrics: intercept.NewMetrics(), auditPath: cc.auditPath, loops: cc.loops, served: proxy.NewServedTools()}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	scrubber := buildScrubber(st.Scrub, logger)
	if c.store, err = openStore(cc.stateDir, st.Fold.Fsync, logger); err != nil {
		return nil, err
	}
	c.onClose(func() {
		// A store that cannot be closed (its folder removed, its disk
		// failing) is an error of the process, which exits with it.
		if err := c.store.Close(); err != nil {
			c.closeErr = fmt.Errorf("closing the state store in %s: %w", cc.stateDir, err)
		}
	})
	var srvp atomic.Pointer[proxy.Server]
	c.set = startUpstreams(ctx, cc.servers, upstreamHooks{
		srv: &srvp, metrics: c.metrics, logger: logger, scrubTimeout: st.Scrub.Timeout.D(),
		scrubber: func() *secrets.Scrubber { s, _ := scrubber(); return s },
	})
	c.onClose(func() { c.set.Close() })
	// The tokenizer loads while the upstreams start and the rules compile.
	if c.counter, err = newCounter(st.Tokens); err != nil {
		return nil, err
	}
	if c.scrubber, err = scrubber(); err != nil {
		return nil, err
	}
	if c.auditor, err = openAuditor(st.Audit, cc.auditPath, logger); err != nil {
		return nil, err
	}
	c.onClose(func() { c.auditor.Close() })
	memSet := memoryDefaults(st.Memory, cc.configDir)
	if c.mem, err = openMemory(ctx, memSet, memoryDeps{
		store: c.store, scrub: scrubFunc(c.scrubber, st.Scrub.Timeout.D()), count: c.counter.CountText, logger: logger,
	}); err != nil {
		return nil, err
	}
	if c.mem != nil {
		c.onClose(func() { c.mem.Store().Close() })
		c.onClose(ageInBackground(ctx, c.mem, logger))
	}
	if c.mgr, err = newFoldManager(ctx, fold.Options{
		Settings: st.Fold, Store: c.store, Scanner: c.scrubber, Counter: c.counter,
		Events: sinks{c.auditor, c.metrics}, Logger: logger, Memory: c.mem, Principal: memSet.Principal,
	}, cc.resumable); err != nil {
		return nil, err
	}
	c.onClose(func() { c.mgr.Close() })
	if c.srv, err = c.newServer(); err != nil {
		return nil, err
	}
	c.onClose(func() { c.srv.Close() })
	srvp.Store(c.srv)
	return c, nil
}

// onClose adds what Close calls, after what was added after it.
func (c *serveCore) onClose(f func()) { c.closers = append(c.closers, f) }

// Close closes what is open, in reverse order, and returns the store's
// error closing. It may be called again.
func (c *serveCore) Close() error {
	for i := len(c.closers) - 1; i >= 0; i-- {
		c.closers[i]()
	}
	c.closers = nil
	return c.closeErr
}

// buildScrubber builds the secret scanner in the background: compiling
// gitleaks' rules is the slowest step of start-up (about half a second), so
// it runs while the state store opens, the upstreams start and the
// tokenizer loads. wait returns the scanner (nil if it failed) and the
// error.
func buildScrubber(s policy.Scrub, logger *slog.Logger) (wait func() (*secrets.Scrubber, error)) {
	var scrubber *secrets.Scrubber
	var err error
	done := make(chan struct{})
	go func() {
		defer close(done)
		if scrubber, err = secrets.NewScrubber(s, logger); err != nil {
			err = fmt.Errorf("secret scanner: %w", err)
		}
		// Building the rules leaves tens of MB of garbage: give it back
		// to the OS now rather than keep it resident while idle.
		debug.FreeOSMemory()
	}()
	return func() (*secrets.Scrubber, error) {
		<-done
		return scrubber, err
	}
}

// openStore opens the Badger store in the state folder. A full disk is not
// fatal: foldproxy starts with a store that answers every write with the
// reason, so the agent keeps its catalogue.
func openStore(dir string, fsync bool, logger *slog.Logger) (fold.Store, error) {
	store, err := foldstore.OpenBadgerWith(filepath.Join(dir, "badger"), logger, foldstore.BadgerOptions{
		Fsync: fsync,
		// Only in the binary the e2e tests build (testhooks_e2e.go):
		// false in the one that ships.
		HoldCommits: holdStoreCommits(),
	})
	switch {
	case errors.Is(err, fold.ErrStoreFull):
		logger.Error("foldproxy cannot write its state store: serving without it until restarted; calls that need the store will fail with this reason", "state", dir, "err", err)
		return foldstore.NewUnwritableStore(err), nil
	case err != nil:
		return nil, fmt.Errorf("opening the state store in %s: %w", dir, err)
	}
	return store, nil
}

// startUpstreams starts the configured upstreams (each connects in the
// background) with serve's callbacks (upstreamOptions).
func startUpstreams(ctx context.Context, servers []upstreams.Entry, h upstreamHooks) *upstreams.Set {
	set := upstreams.NewSet(servers, upstreamOptions(ctx, h))
	set.Start(ctx)
	return set
}

// upstreamHooks are what the upstreams' callbacks reach: the MCP front
// (set once it exists), the metrics, the log, and the scrubber (which may
// still be building: scrubber waits for it, and returns nil if it failed).
type upstreamHooks struct {
	srv          *atomic.Pointer[proxy.Server]
	metrics      *intercept.Metrics
	logger       *slog.Logger
	scrubber     func() *secrets.Scrubber
	scrubTimeout time.Duration
}

// upstreamOptions are the options of serve's upstream set: notifications
// and server-to-client requests go to the MCP front (a request before it
// exists is refused as "foldproxy is starting"), every stderr line is
// scrubbed before it is logged (withheld when it cannot be scanned), and
// states and restarts feed the metrics.
func upstreamOptions(ctx context.Context, h upstreamHooks) upstreams.Options {
	srvp, metrics, logger := h.srv, h.metrics, h.logger
	// restartsSeen is each upstream's restart count already added to
	// foldproxy_upstream_restarts_total: OnState reports states, not
	// restarts, so the counter follows Upstream.Restarts.
	var restartsMu sync.Mutex
	restartsSeen := map[string]int{}
	return upstreams.Options{
		Logger:     logger,
		ClientInfo: json.RawMessage(fmt.Sprintf(`{"name":"foldproxy","version":%q}`, version)),
		// None at first: each agent's own are added as it initializes
		// (advertiseClientCaps).
		Capabilities: json.RawMessage(`{}`),
		OnNotification: func(u *upstreams.Upstream, method string, params json.RawMessage) {
			if srv := srvp.Load(); srv != nil {
				srv.UpstreamNotification(u.Name(), method, params)
			}
		},
		OnRequest: func(ctx context.Context, u *upstreams.Upstream, method string, params json.RawMessage) (json.RawMessage, error) {
			srv := srvp.Load()
			if srv == nil {
				return nil, &proxy.Error{Code: proxy.CodeInternalError, Message: "foldproxy is starting"}
			}
			return srv.UpstreamRequest(ctx, u.Name(), method, params)
		},
		// A server's stderr may print secrets: it is scrubbed like
		// everything else before it reaches foldproxy's log.
		Stderr: func(u *upstreams.Upstream, line string) {
			scrubber := h.scrubber()
			if scrubber == nil {
				return
			}
			sctx, cancel := context.WithTimeout(ctx, h.scrubTimeout)
			clean, _, err := scrubber.ScrubText(sctx, line)
			cancel()
			if err != nil {
				logger.Info("upstream stderr withheld: it could not be scanned for secrets", "upstream", u.Name())
				return
			}
			logger.Info("upstream stderr", "upstream", u.Name(), "line", clean)
		},
		OnState: func(u *upstreams.Upstream, s upstreams.State) {
			metrics.UpstreamState(u.Name(), s == upstreams.StateUp)
			restartsMu.Lock()
			for n := u.Restarts(); restartsSeen[u.Name()] < n; restartsSeen[u.Name()]++ {
				metrics.UpstreamRestart(u.Name())
			}
			restartsMu.Unlock()
			if srv := srvp.Load(); srv != nil {
				srv.UpstreamChanged(u.Name())
			}
		},
	}
}

// newCounter loads the tokenizer.
func newCounter(t policy.Tokens) (*tokens.Counter, error) {
	counter, err := tokens.NewCounter(t)
	if err != nil {
		return nil, fmt.Errorf("token counter: %w", err)
	}
	return counter, nil
}

// openAuditor opens the audit log at path ("-" for none).
func openAuditor(a policy.Audit, path string, logger *slog.Logger) (*intercept.Auditor, error) {
	auditor, err := intercept.NewAuditor(a, path, logger)
	if err != nil {
		return nil, fmt.Errorf("audit log %s: %w", path, err)
	}
	return auditor, nil
}

// ageInBackground forgets aged-out memories now and hourly (ageMemories)
// until stop, which waits for it.
func ageInBackground(ctx context.Context, mem *memory.Service, logger *slog.Logger) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		ageMemories(ctx, mem, logger)
	}()
	return func() {
		cancel()
		<-done
	}
}

// newFoldManager builds the fold manager over the store and recovers what
// the last process left open: the branches of sessions that can come back
// (resumable, and a session of a transport that resumes) stay open; those
// of the others are closed as failed.
func newFoldManager(ctx context.Context, o fold.Options, resumable bool) (*fold.Manager, error) {
	mgr, err := fold.NewManager(ctx, o)
	if err != nil {
		return nil, fmt.Errorf("fold manager: %w", err)
	}
	canResume := func(string) bool { return false }
	if resumable {
		canResume = func(id string) bool {
			rec, err := mgr.ResumeSession(ctx, id)
			return err == nil && proxy.Resumable(rec.Transport)
		}
	}
	if err := mgr.Recover(ctx, canResume); err != nil {
		mgr.Close()
		return nil, fmt.Errorf("recovering branches from the store: %w", err)
	}
	return mgr, nil
}

// buildChains returns the interceptors of forwarded calls and of
// foldproxy's own control tools, as intercept.NewChain and NewControlChain
// build them, with the heap trimmer woken after each call (trim.go): a
// part that is missing fails here, at start-up, not per call.
func buildChains(p intercept.Parts) (forward, control []intercept.Interceptor, err error) {
	p.AfterCall = trimActivity
	if forward, err = intercept.NewChain(p); err != nil {
		return nil, nil, err
	}
	if control, err = intercept.NewControlChain(p); err != nil {
		return nil, nil, err
	}
	return forward, control, nil
}

// newServer builds the server of the MCP front over the core's parts, with
// the chains of forwarded calls and of foldproxy's own tools (which the
// remote MCP servers of transparent mode share).
func (c *serveCore) newServer() (*proxy.Server, error) {
	var err error
	if c.chain, c.control, err = buildChains(intercept.Parts{
		Scrubber: c.scrubber, Counter: c.counter, Brancher: c.mgr, Thresholds: c.st.Fold.Thresholds,
		Auditor: c.auditor, Metrics: c.metrics,
	}); err != nil {
		return nil, err
	}
	all := c.set.All()
	ups := make([]proxy.Upstream, 0, len(all))
	for _, u := range all {
		ups = append(ups, u)
	}
	readyWait := c.st.ReadyWait.D()
	srv, err := proxy.New(proxy.Options{
		Served:              c.served,
		Settings:            c.st,
		Upstreams:           ups,
		Fold:                c.mgr,
		Interceptors:        c.chain,
		ControlInterceptors: c.control,
		Scrubber:            c.scrubber,
		Observer:            c.observer(),
		Logger:              c.logger,
		Version:             version,
		ReadyWait:           readyWait,
		ClientCapabilities:  proxy.AdvertiseClientCaps(all, readyWait, max(readyWait, 5*time.Second), c.logger),
	})
	if err != nil {
		return nil, fmt.Errorf("MCP front: %w", err)
	}
	return srv, nil
}

func (c *serveCore) observer() observer {
	parts := intercept.Parts{Auditor: c.auditor, Metrics: c.metrics}
	return observer{Observer: parts.Observer(c.logger), auditor: c.auditor, metrics: c.metrics, logger: c.logger, prices: c.st.Model.Prices}
}

// warnLongNames waits (at most 30 seconds) for every upstream to have been
// up once, then warns of the tool names that would be too long under
// foldproxy's entry name in the agent's config.
func (c *serveCore) warnLongNames(ctx context.Context, entry string) {
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, u := range c.set.All() {
		wg.Go(func() { _ = u.WaitReady(wctx) })
	}
	wg.Wait()
	c.srv.WarnLongNames(entry)
}

// waitUpstreams waits until every upstream has been up once, at most
// readyWait (what a session's first tools/list waits too): "foldproxy
// run" starts its agent after it, so that an agent that lists the tools
// once and never again (codex exec) has them all.
func (c *serveCore) waitUpstreams(ctx context.Context) {
	wctx, cancel := context.WithTimeout(ctx, c.st.ReadyWait.D())
	defer cancel()
	var wg sync.WaitGroup
	for _, u := range c.set.All() {
		wg.Go(func() { _ = u.WaitReady(wctx) })
	}
	wg.Wait()
}

// newModelFront makes a model front with the shared fold core: the
// manager's model state, the scrubber, the token counter, the audit log and
// the metrics. The HTTP front has one; the forward proxy one per
// intercepted host.
func (c *serveCore) newModelFront(o modelfront.Options) (*modelfront.Handler, error) {
	if o.Transport == nil {
		// The HTTP front's: to model.anthropicURL and model.openaiURL,
		// never back to foldproxy (loop.go).
		t := modelfront.NewTransport(nil)
		t.DialContext = c.loops.guard(t.DialContext, "set model.anthropicURL and model.openaiURL to the model APIs, not to foldproxy")
		o.Transport = t
	}
	o.MaxRequestBytes = c.st.Model.MaxRequestBytes
	o.State = c.mgr.ModelState()
	o.Wire = modelwire.Options{
		Scrub: func(ctx context.Context, text string) (string, error) {
			sctx, cancel := context.WithTimeout(ctx, c.st.Scrub.Timeout.D())
			defer cancel()
			clean, _, err := c.scrubber.ScrubText(sctx, text)
			return clean, err
		},
		ScrubAcross: func(ctx context.Context, texts []string) ([]string, error) {
			sctx, cancel := context.WithTimeout(ctx, c.st.Scrub.Timeout.D())
			defer cancel()
			out, _, err := c.scrubber.ScrubAcross(sctx, texts)
			return out, err
		},
		Count:        c.counter.CountText,
		ChargedOnMCP: c.served.Served,
		Guidance:     wireGuidance(c.st.Model.Guidance),
		AutoFold:     wireAutoFold(c.st.Model),
	}
	o.CacheRead, o.CacheWrite = c.st.Model.Prices.CacheRead, c.st.Model.Prices.CacheWrite
	o.Observer = c.observer()
	o.Logger = c.logger
	return modelfront.NewHandler(o)
}

// wireGuidance is foldproxy.model.guidance as the context manager takes it.
func wireGuidance(g policy.ModelGuidance) modelwire.Guidance {
	return modelwire.Guidance{Off: !g.On(), AfterTokens: g.Tokens(), NoRepeats: !g.OnRepeats()}
}

// wireAutoFold is foldproxy.model.autofold (and the cache prices it weighs
// its batches by) as the context manager takes it.
func wireAutoFold(m policy.Model) modelwire.AutoFold {
	a := m.AutoFold
	return modelwire.AutoFold{
		Mode: a.EffectiveMode(), KeepRecent: a.KeepRecent, Trigger: a.Trigger, MinTokens: a.MinTokens,
		MinBatch: a.MinBatch, Oversize: a.Oversize, KeepHead: a.KeepHead, KeepTail: a.KeepTail,
		NoSuperseded: !a.OnSuperseded(), NoRepeats: !a.OnRepeats(), Exclude: a.Exclude,
		ReadPrice: m.Prices.CacheRead, WritePrice: m.Prices.CacheWrite, MinRequests: a.MinRequests,
	}
}

// newRemoteFront makes the front of the remote MCP servers intercepted in
// transparent mode, over transport tr: a transport of the core (c.srv
// holds its fold sessions and answers its fold tools), whose calls take
// the MCP front's chain (one Budget, one Audit: the same state).
func (c *serveCore) newRemoteFront(tr http.RoundTripper) (*transparent.RemoteFront, error) {
	if c.srv == nil {
		return nil, errors.New("remote MCP front: the core is not built yet")
	}
	return transparent.NewRemoteFront(transparent.RemoteOptions{
		Servers: c.st.Proxy.MCP, Settings: c.st, Core: c.srv, Scrubber: c.scrubber, Transport: tr, Logger: c.logger,
		Observer: c.observer(), Interceptors: c.chain,
	})
}
