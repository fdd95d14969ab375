package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/foldproxy/foldproxy/fold"
	"github.com/foldproxy/foldproxy/fold/modelwire"
	"github.com/foldproxy/foldproxy/intercept"
	"github.com/foldproxy/foldproxy/policy"
	"github.com/foldproxy/foldproxy/proxy"
	"github.com/foldproxy/foldproxy/upstreams"
)

// serveCommand runs the proxy: MCP over stdio by default (a relay to the
// project's shared daemon, see daemon_unix.go), streamable HTTP with
// --listen.
type serveCommand struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	ready          *os.File // --daemon: the pipe to say "ready" on
}

// swapWriter writes to the writer set last, or nowhere.
type swapWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *swapWriter) set(w io.Writer) {
	s.mu.Lock()
	s.w = w
	s.mu.Unlock()
}

func (s *swapWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	w := s.w
	s.mu.Unlock()
	if w == nil {
		return len(p), nil
	}
	return w.Write(p)
}

// fileConfig is the configuration file: a Claude Code mcpServers document
// with foldproxy's own settings beside it.
type fileConfig struct {
	Servers  []upstreams.Entry
	Settings policy.Settings
	Dir      string // the folder of the file, for relative paths
}

// loadConfig reads and validates the configuration file. Errors name the
// file and the entry or field at fault.
func loadConfig(path string) (*fileConfig, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading config: %w", err)
	}
	var top map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&top); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			line, col := position(data, se.Offset)
			return nil, fmt.Errorf("config %s: malformed JSON at line %d, column %d: %v", path, line, col, err)
		}
		return nil, fmt.Errorf("config %s: %v (want an object with \"mcpServers\")", path, err)
	}
	servers, ok := top["mcpServers"]
	if !ok {
		return nil, fmt.Errorf("config %s: no \"mcpServers\" object (a Claude Code .mcp.json has one)", path)
	}
	// Every error of the file at once: the servers, foldproxy's settings
	// and the top-level keys are checked independently.
	var errs []error
	entries, err := upstreams.ParseServers(servers, os.LookupEnv)
	if err != nil {
		errs = append(errs, err)
	}
	settings, err := policy.Parse(top[policy.Key])
	if err != nil {
		errs = append(errs, err)
	}
	keys := make([]string, 0, len(top))
	for k := range top {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if k != "mcpServers" && k != policy.Key {
			errs = append(errs, fmt.Errorf("unknown top-level key %q (want \"mcpServers\" and optionally %q)", k, policy.Key))
		}
	}
	if err := errors.Join(errs...); err != nil {
		if len(errs) == 1 && !strings.Contains(err.Error(), "\n") {
			return nil, fmt.Errorf("config %s: %w", path, err)
		}
		return nil, fmt.Errorf("config %s:\n%w", path, indentErrors(err))
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	return &fileConfig{Servers: entries, Settings: settings, Dir: filepath.Dir(abs)}, nil
}

// stateDirOf is the state folder: the --state flag, else the config's
// stateDir (relative to the config file), else .foldproxy beside the config.
func stateDirOf(cfg *fileConfig, flagDir string) string {
	dir := flagDir
	if dir == "" {
		dir = cfg.Settings.StateDir
	}
	if dir == "" {
		return filepath.Join(cfg.Dir, ".foldproxy")
	}
	if !filepath.IsAbs(dir) && flagDir == "" {
		return filepath.Join(cfg.Dir, dir)
	}
	return dir
}

// prepareStateDir creates the state folder (0700) and checks that foldproxy
// can write in it, so that a folder it may not use is reported as what it
// is, not as a store that cannot be locked.
func prepareStateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("state folder %s: %w (choose another with --state or foldproxy.stateDir)", dir, err)
	}
	f, err := os.CreateTemp(dir, ".writable-*")
	if err != nil {
		if errors.Is(err, os.ErrPermission) {
			return fmt.Errorf("state folder %s is not writable by this user: permission denied (fix its owner or mode, or choose another with --state or foldproxy.stateDir)", dir)
		}
		return fmt.Errorf("state folder %s: %w", dir, err)
	}
	name := f.Name()
	f.Close()
	return os.Remove(name)
}

// indentErrors lists a joined error's lines, each indented, keeping the
// errors wrapped for errors.Is.
func indentErrors(err error) error {
	lines := strings.Split(err.Error(), "\n")
	for i, l := range lines {
		lines[i] = "  " + l
	}
	return &listedError{text: strings.Join(lines, "\n"), err: err}
}

type listedError struct {
	text string
	err  error
}

func (e *listedError) Error() string { return e.text }
func (e *listedError) Unwrap() error { return e.err }

func position(data []byte, off int64) (line, col int) {
	line, col = 1, 1
	for i := int64(0); i < off && i < int64(len(data)); i++ {
		if data[i] == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
	}
	return line, col
}

// Run implements command.
func (c *serveCommand) Run(ctx context.Context, args []string) (err error) {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	configPath := fs.String("config", "", "configuration file: a Claude Code mcpServers document (required)")
	listen := fs.String("listen", "", "serve streamable HTTP on this address (path /mcp) instead of stdio")
	stateDir := fs.String("state", "", "state folder (Badger store, audit log); default .foldproxy beside the config")
	proxyListen := fs.String("proxy-listen", "", "serve a forward proxy (HTTPS_PROXY, transparent mode) on this address")
	metricsAddr := fs.String("metrics", "", "serve Prometheus /metrics on this address (also on --listen)")
	logLevel := fs.String("log-level", "info", "log level on stderr: debug, info, warn, error")
	entry := fs.String("entry-name", "foldproxy", "foldproxy's own name in the agent's MCP config, for the tool name length check")
	standalone := fs.Bool("standalone", false, "serve this stdio session in this process, without the project's shared daemon (one process per state folder at a time)")
	daemon := fs.Bool("daemon", false, "run as the shared daemon of the state folder (started by foldproxy itself)")
	readyFD := fs.Int("ready-fd", 0, "with --daemon: file descriptor on which to say \"ready\" or why not (set by foldproxy)")
	idleExit := fs.Duration("idle-exit", 0, "with --daemon: how long the daemon stays up after its last session ends")
	fs.Usage = func() {
		fmt.Fprintln(c.stderr, "usage: foldproxy serve --config FILE [--listen ADDR] [--proxy-listen ADDR] [--state DIR] [--metrics ADDR]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *configPath == "" {
		fs.Usage()
		return errors.New("--config is required")
	}
	if *daemon && !daemonSupported {
		return errors.New("--daemon needs a unix system; use --standalone")
	}
	// A daemon tells the relay that started it whether it is ready, or
	// why it could not start.
	if ready := readyPipe(*readyFD); *daemon && ready != nil {
		defer func() {
			if err != nil {
				fmt.Fprintln(ready, err)
			}
			ready.Close()
		}()
		c.ready = ready
	}
	level, err := logLevelOf(*logLevel)
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(c.stderr, &slog.HandlerOptions{Level: level}))

	cfg, dir, err := loadSetup(*configPath, *stateDir)
	if err != nil {
		return err
	}
	st := cfg.Settings
	listenDefaults(st, listen, metricsAddr, proxyListen)
	ident, err := configIdentity(*configPath)
	if err != nil {
		return err
	}
	if *listen == "" && !*daemon && !*standalone && daemonSupported {
		extra := []string{"--log-level", *logLevel, "--entry-name", *entry}
		if *metricsAddr != "" && *metricsAddr != st.Metrics.Listen {
			extra = append(extra, "--metrics", *metricsAddr)
		}
		if *proxyListen != "" && *proxyListen != st.ProxyListen {
			extra = append(extra, "--proxy-listen", *proxyListen)
		}
		if *metricsAddr != "" {
			// The daemon serves the metrics and logs its address to its
			// own log, before this relay is attached: say it here too, on
			// the stderr the agent keeps (stdout is JSON-RPC only).
			logger.Info("metrics", "url", "http://"+*metricsAddr+"/metrics", "served_by", "the daemon of "+dir, "log", filepath.Join(dir, daemonLogName))
		}
		return proxy.Relay(ctx, c.stdin, c.stdout, proxy.RelayOptions{
			Dial:            func(ctx context.Context) (net.Conn, error) { return dialDaemon(ctx, dir, *configPath, extra) },
			WaitExit:        func(ctx context.Context) error { return waitDaemonExit(ctx, dir) },
			Config:          ident,
			MaxMessageBytes: st.MaxMessageBytes,
			Stderr:          c.stderr,
			Logger:          logger,
		})
	}
	// The daemon logs to its file, and copies every record to the relays
	// attached to it (their stderr, which the agent shows or keeps).
	fan := &swapWriter{}
	if *daemon {
		f, err := openDaemonLog(dir)
		if err != nil {
			return fmt.Errorf("daemon log: %w", err)
		}
		defer f.Close()
		logger = slog.New(slog.NewTextHandler(io.MultiWriter(f, fan), &slog.HandlerOptions{Level: level}))
	}
	// One process owns a state folder: the daemon (which waits for one
	// that is exiting), or a foreground --listen / --standalone server.
	lockWait := 100 * time.Millisecond
	if *daemon {
		lockWait = 30 * time.Second
	}
	release, err := lockDaemon(ctx, dir, lockWait)
	if err != nil {
		return err
	}
	defer release()
	token := authToken(st, os.Getenv)
	if err := checkExposure(*listen, *proxyListen, token); err != nil {
		return err
	}
	auditPath := resolvePaths(&st, cfg.Dir, dir)

	// Compiling gitleaks' rules is the slowest step of start-up (about half
	// a second): it runs while the state store opens, the tokenizer loads
	// and the upstreams start. scrubReady is closed once scrubber is set
	// (nil if it failed).
	var scrubber *intercept.Scrubber
	scrubReady := make(chan struct{})
	var scrubErr error
	go func() {
		defer close(scrubReady)
		scrubber, scrubErr = intercept.NewScrubber(st.Scrub, logger)
		// Building the rules leaves tens of MB of garbage: give it back
		// to the OS now rather than keep it resident while idle.
		debug.FreeOSMemory()
	}()

	// The parts, in dependency order; each is closed in reverse on exit.
	store, err := openStore(dir, st.Fold.Fsync, logger)
	if err != nil {
		return err
	}
	defer store.Close()
	metrics := intercept.NewMetrics()
	var srvp atomic.Pointer[proxy.Server]
	set := upstreams.NewSet(cfg.Servers, upstreamOptions(ctx, upstreamHooks{
		srv: &srvp, metrics: metrics, logger: logger, scrubTimeout: st.Scrub.Timeout.D(),
		scrubber: func() *intercept.Scrubber { <-scrubReady; return scrubber },
	}))
	defer set.Close()
	set.Start(ctx)
	// The tokenizer loads while the upstreams start.
	counter, err := intercept.NewCounter(st.Tokens)
	if err != nil {
		return err
	}
	<-scrubReady
	if scrubErr != nil {
		return scrubErr
	}
	auditor, err := intercept.NewAuditor(st.Audit, auditPath, logger)
	if err != nil {
		return err
	}
	defer auditor.Close()
	mem, err := openMemory(ctx, memoryDefaults(st.Memory, cfg.Dir), memoryDeps{
		store: store, scrub: scrubFunc(scrubber, st.Scrub.Timeout.D()), count: counter.CountText, logger: logger,
	})
	if err != nil {
		return err
	}
	if mem != nil {
		defer mem.Store().Close()
		go ageMemories(ctx, mem, logger)
	}
	mgr, err := fold.NewManager(ctx, fold.Options{
		Settings: st.Fold, Store: store, Scanner: scrubber, Counter: counter,
		Events: sinks{auditor, metrics}, Logger: logger, Memory: mem,
	})
	if err != nil {
		return err
	}
	defer mgr.Close()
	// HTTP sessions can come back after a restart with their session id,
	// attached stdio sessions through their relay; plain stdio sessions
	// cannot: their orphaned branches are closed as failed.
	resumable := func(string) bool { return false }
	if *listen != "" || *daemon {
		resumable = func(id string) bool {
			rec, err := mgr.ResumeSession(ctx, id)
			return err == nil && proxy.Resumable(rec.Transport)
		}
	}
	if err := mgr.Recover(ctx, resumable); err != nil {
		return fmt.Errorf("recovering branches from the store: %w", err)
	}

	ups := make([]proxy.Upstream, 0, len(cfg.Servers))
	for _, u := range set.All() {
		ups = append(ups, u)
	}
	// The chains of the MCP front, which the remote MCP servers of
	// transparent mode share.
	chain, control, err := buildChains(intercept.Parts{
		Scrubber: scrubber, Counter: counter, Brancher: mgr, Thresholds: st.Fold.Thresholds,
		Auditor: auditor, Metrics: metrics,
	})
	if err != nil {
		return err
	}
	srv, err := proxy.New(proxy.Options{
		Settings:            st,
		Upstreams:           ups,
		Fold:                mgr,
		Interceptors:        chain,
		ControlInterceptors: control,
		Scrubber:            scrubber,
		Observer:            observer{auditor: auditor, metrics: metrics, logger: logger},
		Logger:              logger,
		Version:             version,
		ReadyWait:           st.ReadyWait.D(),
		ClientCapabilities: func(ctx context.Context, caps json.RawMessage) {
			advertiseClientCaps(ctx, set.All(), caps, st.ReadyWait.D(), max(st.ReadyWait.D(), 5*time.Second), logger)
		},
	})
	if err != nil {
		return err
	}
	srvp.Store(srv)
	defer srv.Close()
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		var wg sync.WaitGroup
		for _, u := range set.All() {
			wg.Add(1)
			go func() { defer wg.Done(); _ = u.WaitReady(wctx) }()
		}
		wg.Wait()
		srv.WarnLongNames(*entry)
	}()

	if *metricsAddr != "" {
		stop, err := serveMetrics(*metricsAddr, metrics, logger)
		if err != nil {
			return err
		}
		defer stop()
	}

	// newModelFront makes a model front with the shared fold core: the
	// manager's model state, the scrubber, the token counter, the audit log
	// and the metrics. The HTTP front has one; the forward proxy one per
	// intercepted host.
	newModelFront := func(o proxy.ModelOptions) (*proxy.ModelHandler, error) {
		o.MaxRequestBytes = st.Model.MaxRequestBytes
		o.State = mgr.ModelState()
		o.Wire = modelwire.Options{
			Scrub: func(ctx context.Context, text string) (string, error) {
				sctx, cancel := context.WithTimeout(ctx, st.Scrub.Timeout.D())
				defer cancel()
				clean, _, err := scrubber.ScrubText(sctx, text)
				return clean, err
			},
			Count: counter.CountText,
		}
		o.Observer = observer{auditor: auditor, metrics: metrics, logger: logger}
		o.Logger = logger
		return proxy.NewModelHandler(o)
	}

	if *proxyListen != "" {
		// Remote MCP servers intercepted in transparent mode take the MCP
		// front's chains (one Budget, one Audit: the same state).
		newRemote := func(tr http.RoundTripper) (*proxy.RemoteFront, error) {
			return proxy.NewRemoteFront(proxy.RemoteOptions{
				Servers: st.Proxy.MCP, Settings: st, Fold: mgr, Scrubber: scrubber, Transport: tr, Logger: logger,
				Observer:     observer{auditor: auditor, metrics: metrics, logger: logger},
				Interceptors: chain, ControlInterceptors: control,
			})
		}
		stop, err := startForwardProxy(*proxyListen, dir, cfg.Dir, token, st.Proxy, newModelFront, newRemote, logger)
		if err != nil {
			return err
		}
		defer stop()
	}

	// Stdio processes of the same project attach to the daemon, or to a
	// foreground --listen server, over the state folder's socket.
	var attach *proxy.AttachServer
	var attachLn net.Listener
	if (*daemon || *listen != "") && daemonSupported {
		idle := time.Duration(-1)
		if *daemon {
			idle = *idleExit
		}
		attach = proxy.NewAttachServer(srv, proxy.AttachOptions{
			Config: ident, MaxMessageBytes: st.MaxMessageBytes, Logger: logger,
			CheckPeer: checkPeer, IdleExit: idle,
		})
		var sock string
		attachLn, sock, err = listenSocket(dir)
		if err != nil {
			return err
		}
		fan.set(attach)
		defer fan.set(nil)
		logger.Info("foldproxy attach socket", "socket", sock, "pid", os.Getpid())
	}
	if *daemon {
		logger.Info("foldproxy daemon serving the project's stdio sessions", "upstreams", len(cfg.Servers), "state", dir, "config", *configPath)
		if c.ready != nil {
			fmt.Fprintln(c.ready, "ready")
			c.ready.Close()
			c.ready = nil
		}
		return attach.Serve(ctx, attachLn)
	}
	if attach != nil {
		go func() {
			if err := attach.Serve(ctx, attachLn); err != nil {
				logger.Warn("attach socket", "err", err)
			}
		}()
	}

	if *listen == "" {
		logger.Info("foldproxy serving MCP on stdio", "upstreams", len(cfg.Servers), "state", dir)
		err := proxy.ServeStdio(ctx, srv, c.stdin, c.stdout, proxy.StdioOptions{MaxMessageBytes: st.MaxMessageBytes, Logger: logger})
		if err != nil && !errors.Is(err, context.Canceled) {
			return err
		}
		return nil
	}

	h, err := proxy.NewHTTPHandler(srv, proxy.HTTPOptions{
		Path:            "/mcp",
		Token:           token,
		Loopback:        proxy.IsLoopback(*listen),
		AllowedOrigins:  st.AllowedOrigins,
		MaxMessageBytes: st.MaxMessageBytes,
		Logger:          logger,
		Resume:          srv.ResumeSession,
	})
	if err != nil {
		return err
	}
	// The model front answers every other path: the model APIs under /v1/
	// and 404 elsewhere ("/" included, which Claude Code probes).
	model, err := newModelFront(proxy.ModelOptions{
		AnthropicURL:   st.Model.AnthropicURL,
		OpenAIURL:      st.Model.OpenAIURL,
		Token:          token,
		Loopback:       proxy.IsLoopback(*listen),
		AllowedOrigins: st.AllowedOrigins,
	})
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", h)
	guard := h.(*proxy.HTTPHandler).Guard
	mux.Handle("/metrics", guard(metrics.Handler()))
	mux.Handle("/healthz", guard(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })))
	mux.Handle("/", model)
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("--listen %s: %w", *listen, err)
	}
	url := "http://" + ln.Addr().String() + "/mcp"
	logger.Info("foldproxy serving MCP over streamable HTTP", "url", url, "upstreams", len(cfg.Servers), "state", dir)
	logger.Info("foldproxy serving the model APIs", "ANTHROPIC_BASE_URL", "http://"+ln.Addr().String(),
		"anthropic", st.Model.AnthropicURL, "openai", st.Model.OpenAIURL)
	// Open event streams would hold Shutdown for its whole timeout: the
	// handler's Close ends every session and stream first.
	var closeStreams func()
	if c, ok := h.(interface{ Close() error }); ok {
		closeStreams = func() { _ = c.Close() }
	}
	return serveHTTP(ctx, ln, mux, closeStreams)
}

// serveHTTP serves handler on ln until ctx ends (nil) or the server fails
// (its error), then shuts the server down, calling onShutdown (when not
// nil) first so that open streams do not hold the shutdown.
func serveHTTP(ctx context.Context, ln net.Listener, handler http.Handler, onShutdown func()) error {
	hs := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	if onShutdown != nil {
		hs.RegisterOnShutdown(onShutdown)
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		if !errors.Is(err, http.ErrServerClosed) {
			return err
		}
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = hs.Shutdown(sctx)
	return nil
}

// The steps of serve's setup, in the order Run takes them; each is tested
// on its own (serve_test.go).

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

// openStore opens the Badger store in the state folder. A full disk is not
// fatal: foldproxy starts with a store that answers every write with the
// reason, so the agent keeps its catalogue.
func openStore(dir string, fsync bool, logger *slog.Logger) (fold.Store, error) {
	store, err := fold.OpenBadgerFsync(filepath.Join(dir, "badger"), logger, fsync)
	switch {
	case errors.Is(err, fold.ErrStoreFull):
		logger.Error("foldproxy cannot write its state store: serving without it until restarted; calls that need the store will fail with this reason", "state", dir, "err", err)
		return fold.NewUnwritableStore(err), nil
	case err != nil:
		return nil, fmt.Errorf("opening the state store in %s: %w", dir, err)
	}
	return store, nil
}

// serveMetrics serves /metrics on addr, which must be a loopback address:
// this listener checks no token.
func serveMetrics(addr string, m *intercept.Metrics, logger *slog.Logger) (stop func(), err error) {
	if !proxy.IsLoopback(addr) {
		return nil, fmt.Errorf("--metrics %s is not a loopback address: the separate metrics listener has no token check; "+
			"scrape /metrics on --listen (same token and Host rules as /mcp), or bind --metrics to 127.0.0.1", addr)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", m.Handler())
	ms := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics %s: %w", addr, err)
	}
	logger.Info("metrics", "url", "http://"+ln.Addr().String()+"/metrics")
	go func() { _ = ms.Serve(ln) }()
	return func() { _ = ms.Close() }, nil
}

// upstreamHooks are what the upstreams' callbacks reach: the MCP front
// (set once it exists), the metrics, the log, and the scrubber (which may
// still be building: scrubber waits for it, and returns nil if it failed).
type upstreamHooks struct {
	srv          *atomic.Pointer[proxy.Server]
	metrics      *intercept.Metrics
	logger       *slog.Logger
	scrubber     func() *intercept.Scrubber
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
				return nil, &upstreams.RPCError{Code: proxy.CodeInternalError, Message: "foldproxy is starting"}
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

// buildChains returns the interceptors of forwarded calls and of
// foldproxy's own control tools, as intercept.NewChain and NewControlChain
// build them: a part that is missing fails here, at start-up, not per call.
func buildChains(p intercept.Parts) (forward, control []intercept.Interceptor, err error) {
	if forward, err = intercept.NewChain(p); err != nil {
		return nil, nil, err
	}
	if control, err = intercept.NewControlChain(p); err != nil {
		return nil, nil, err
	}
	return forward, control, nil
}

// observer feeds what the proxy core sees outside the intercept chain to
// the metrics and the audit log.
type observer struct {
	auditor *intercept.Auditor
	metrics *intercept.Metrics
	logger  *slog.Logger
}

func (o observer) SessionOpened() { o.metrics.SessionOpened() }
func (o observer) SessionClosed() { o.metrics.SessionClosed() }

func (o observer) Relayed(upstream, method string, redactions map[string]int) {
	o.metrics.Redacted(redactions)
	rec := intercept.Record{Time: time.Now(), Kind: "relay", Upstream: upstream, Method: method, Redactions: redactions, Outcome: intercept.OutcomeOK}
	if err := o.auditor.Write(rec); err != nil {
		o.logger.Warn("audit record of a relayed message", "err", err)
	}
}

// ModelRequest records a request of the model front in the metrics and
// the audit log (kind "model": dialect as method, the conversation's
// tokens as received and as forwarded).
// The audit record is written first, so that a request seen in the
// metrics is in the log.
func (o observer) ModelRequest(ev proxy.ModelEvent) {
	rec := intercept.Record{Time: time.Now(), Kind: intercept.KindModel, Method: ev.Dialect, Outcome: ev.Outcome,
		ResultTokens: ev.TokensBefore, DeliveredTokens: ev.TokensAfter, Tokens: ev.Folded,
		LatencyMS: float64(ev.Duration) / float64(time.Millisecond)}
	if err := o.auditor.Write(rec); err != nil {
		o.logger.Warn("audit record of a model request", "err", err)
	}
	o.metrics.ModelRequest(ev.Dialect, ev.Outcome, ev.TokensBefore, ev.TokensAfter, ev.Folded, ev.Guidance, ev.Duration)
}

// sinks fans branch events out to several sinks.
type sinks []fold.EventSink

func (s sinks) BranchEvent(ctx context.Context, ev fold.Event) {
	for _, x := range s {
		x.BranchEvent(ctx, ev)
	}
}

// relayedCaps are the client capabilities foldproxy relays to an agent,
// with what it advertises upstream for each.
var relayedCaps = map[string]json.RawMessage{
	"roots":       json.RawMessage(`{"listChanged":true}`),
	"sampling":    json.RawMessage(`{}`),
	"elicitation": json.RawMessage(`{}`),
}

// advertiseClientCaps is foldproxy's rule for the client capabilities
// upstreams are told about: upstreams start advertising none, and each
// of roots, sampling and elicitation is added (to every upstream, which
// sessions share) once an agent that declares it initializes. An upstream
// must be initialized again to learn a capability, so one connected
// without it reconnects; the agent's initialize waits for that: at most
// wait for an upstream that was up, and for one still starting only as the
// catalogue's readiness rule says (proxy.Options.ReadyWait), so that a slow
// upstream does not hold the agent's initialize (it joins later with
// list_changed). It never waits for an upstream whose attempts fail. The
// set only grows: a capability some agent declared stays advertised, and a
// request for it from an upstream goes to a session that declared it or is
// refused (proxy.UpstreamRequest).
func advertiseClientCaps(ctx context.Context, ups []*upstreams.Upstream, declared json.RawMessage, readyWait, wait time.Duration, logger *slog.Logger) {
	var d map[string]json.RawMessage
	if err := json.Unmarshal(declared, &d); err != nil {
		return
	}
	add := map[string]json.RawMessage{}
	for k, v := range relayedCaps {
		if _, ok := d[k]; ok {
			add[k] = v
		}
	}
	if len(add) == 0 {
		return
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	var wg sync.WaitGroup
	for _, u := range ups {
		// An upstream that is up reconnects for the new capabilities and
		// is waited for (at most wait): a tools/list right after
		// initialize must list what the upstream offers an agent with
		// those capabilities (server-everything adds tools for roots,
		// sampling and elicitation), and the catalogue of the old
		// connection would not. One on its first attempt is waited for as
		// a catalogue request waits; one that is down gets them with its
		// next initialize and is never waited for.
		wasUp := u.State() == upstreams.StateUp
		if !u.Advertise(add) {
			continue
		}
		wg.Go(func() {
			ctx := wctx
			if !wasUp {
				// Within readyWait of its start or of now, whichever
				// came first; one whose attempts fail is never waited
				// for.
				from := time.Now()
				if t := u.StartedAt(); !t.IsZero() && t.Before(from) {
					from = t
				}
				sctx, cancel := context.WithDeadline(wctx, from.Add(readyWait))
				defer cancel()
				ctx = sctx
				if u.WaitAttempted(ctx) != nil {
					return
				}
				if st, _ := u.Status(); st != upstreams.StateUp {
					return
				}
			}
			if err := u.WaitAdvertised(ctx); err != nil {
				logger.Debug("upstream not yet reconnected with the agent's capabilities", "upstream", u.Name(), "err", err)
			}
		})
	}
	wg.Wait()
}
