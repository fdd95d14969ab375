package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/foldproxy/foldproxy/fold"
	"github.com/foldproxy/foldproxy/intercept"
	"github.com/foldproxy/foldproxy/policy"
	"github.com/foldproxy/foldproxy/policy/statedir"
	"github.com/foldproxy/foldproxy/proxy/attach"
	"github.com/foldproxy/foldproxy/proxy/modelfront"
	"github.com/foldproxy/foldproxy/proxy/transparent"
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

// prepareStateDir creates the state folder (0700) or checks the one there
// is the user's own, nobody else's to write (statedir.Prepare), as are the
// folders in it that Badger and the CA open by path, and checks that
// foldproxy can write in it, so that a folder it may not use is reported
// as what it is, not as a store that cannot be locked. Badger opens the
// files of its folder itself: the folder is checked, not each file.
func prepareStateDir(dir string) error {
	if err := statedir.Prepare(dir); err != nil {
		return err
	}
	for _, sub := range []struct{ name, what string }{{"badger", "the store's folder"}, {transparent.CADirName, "the CA's folder"}} {
		if err := statedir.Check(filepath.Join(dir, sub.name), sub.what); err != nil {
			return err
		}
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

// Run implements command. Each step is a function of serve_steps.go with
// its own test (serve_steps_test.go); what a step opens is closed, in
// reverse order, when Run returns, and by the step itself when it fails
// half-way.
func (c *serveCommand) Run(ctx context.Context, args []string) (err error) {
	f, err := parseServeFlags(args, c.stderr)
	if err != nil {
		return err
	}
	// A daemon tells the relay that started it whether it is ready, or
	// why it could not start.
	if ready := readyPipe(f.readyFD); f.daemon && ready != nil {
		defer func() {
			if err != nil {
				fmt.Fprintln(ready, err)
			}
			ready.Close()
		}()
		c.ready = ready
	}
	level, err := logLevelOf(f.logLevel)
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(c.stderr, &slog.HandlerOptions{Level: level}))
	cfg, dir, err := loadSetup(f.config, f.state)
	if err != nil {
		return err
	}
	// No credential of the configuration is logged or reported: neither
	// in a log record nor in the error serve ends with.
	red := configRedactor(cfg, authToken(cfg.Settings, os.Getenv))
	logger = slog.New(red.Handler(logger.Handler()))
	defer func() { err = red.Error(err) }()
	st := cfg.Settings
	listenDefaults(st, &f.listen, &f.metrics, &f.proxyListen)
	ident, err := configIdentity(f.config)
	if err != nil {
		return err
	}
	mode := f.mode()
	if mode == modeRelay {
		return c.relay(ctx, f, st, dir, ident, logger)
	}
	// The daemon logs to its file, and copies every record to the relays
	// attached to it (their stderr, which the agent shows or keeps).
	fan := &swapWriter{}
	if mode == modeDaemon {
		var closeLog func()
		if logger, closeLog, err = daemonLogger(dir, level, fan); err != nil {
			return err
		}
		defer closeLog()
		logger = slog.New(red.Handler(logger.Handler()))
	}
	return c.serve(ctx, serveRun{f: f, cfg: cfg, st: st, dir: dir, ident: ident, mode: mode, logger: logger, fan: fan})
}

// serveRun is what Run has settled before it serves: the flags, the
// configuration, the state folder and the logger.
type serveRun struct {
	f          serveFlags
	cfg        *fileConfig
	st         policy.Settings
	dir, ident string
	mode       serveMode
	logger     *slog.Logger
	fan        *swapWriter // the daemon's log, copied to its relays
}

// serve locks the state folder, checks who may reach the listeners, opens
// the core and serves its fronts until ctx ends or a front fails.
func (c *serveCommand) serve(ctx context.Context, r serveRun) (err error) {
	f, logger := r.f, r.logger
	release, err := lockStateFolder(ctx, r.dir, r.mode)
	if err != nil {
		return err
	}
	defer release()
	token := authToken(r.st, os.Getenv)
	if err := checkExposure(f.listen, f.proxyListen, token); err != nil {
		return err
	}
	// Other local users are kept off the loopback listeners (localuser.go).
	access, err := localAccessOf(r.dir, token, f.listen, f.proxyListen, f.metrics, logger)
	if err != nil {
		return err
	}
	// A model or upstream URL set to foldproxy's own address is refused
	// now; other loops when a connection reaches one of its listeners.
	if err := checkLoops(f.listen, r.st, r.cfg.Servers); err != nil {
		return err
	}
	loops := &selfListeners{}
	auditPath := resolvePaths(&r.st, r.cfg.Dir, r.dir)
	// Garbage left by a burst of calls is returned once the process goes
	// quiet (trim.go).
	go trimWhenIdle(ctx, logger)
	core, err := openCore(ctx, coreConfig{
		servers: r.cfg.Servers, settings: r.st, configDir: r.cfg.Dir, stateDir: r.dir, auditPath: auditPath,
		resumable: r.mode == modeHTTP || r.mode == modeDaemon, logger: logger, loops: loops,
	})
	if err != nil {
		return err
	}
	defer func() {
		if cerr := core.Close(); cerr != nil {
			logger.Error("foldproxy could not close its state store", "state", r.dir, "err", cerr)
			if err == nil {
				err = cerr
			}
		}
	}()
	go core.warnLongNames(ctx, f.entry)
	return c.serveFronts(ctx, r, core, access, loops)
}

// serveFronts starts the metrics, the forward proxy and the attach socket
// as the flags ask, then serves the mode's own front: the daemon's, stdio
// or streamable HTTP.
func (c *serveCommand) serveFronts(ctx context.Context, r serveRun, core *serveCore, access localAccess, loops *selfListeners) (err error) {
	f, st, logger, token := r.f, r.st, r.logger, access.token
	if f.metrics != "" {
		stop, err := serveMetrics(f.metrics, core.metrics, access.guard, logger)
		if err != nil {
			return err
		}
		defer stop()
	}
	if f.proxyListen != "" {
		stop, err := startForwardProxy(f.proxyListen, r.dir, r.cfg.Dir, token, st.Proxy, core.newModelFront, core.newRemoteFront, access.guard, loops, logger)
		if err != nil {
			return err
		}
		defer stop()
	}
	// The daemon serves HTTP on daemonListen, so that the project's stdio
	// sessions have a model front; it listens before it says it is ready.
	var daemonLn net.Listener
	if r.mode == modeDaemon {
		if daemonLn, err = listenDaemonHTTP(r.dir, st.DaemonListen, f.config); err != nil {
			return err
		}
		defer daemonLn.Close() // serveHTTP closes it too; this is for an earlier return
	}
	// The HTTP address told to the processes that attach (foldproxy run
	// points its agent's model endpoint there), once there is one.
	var httpAddr atomic.Pointer[string]
	if daemonLn != nil {
		a := daemonLn.Addr().String()
		httpAddr.Store(&a)
	}
	// Stdio processes of the same project attach to the daemon, or to a
	// foreground --listen server, over the state folder's socket.
	var attach *attachFront
	if r.mode != modeStdio && daemonSupported {
		ao := attachOptions(r.mode, f.idleExit, r.ident, st, logger)
		ao.HTTP = func() string {
			if p := httpAddr.Load(); p != nil {
				return *p
			}
			return ""
		}
		ao.HoldReady = core.waitUpstreams
		if attach, err = listenAttach(r.dir, core.srv, ao); err != nil {
			return err
		}
		r.fan.set(attach.srv)
		defer r.fan.set(nil)
	}
	switch r.mode {
	case modeDaemon:
		logger.Info("foldproxy daemon serving the project's stdio sessions", "upstreams", len(r.cfg.Servers), "state", r.dir, "config", f.config)
		if daemonLn != nil {
			// The daemon's listener keeps other local users off as
			// --listen does (localuser.go).
			guard := access.guard
			if guard == nil && token == "" && tcpPeerSupported {
				guard = &localUsers{uid: os.Getuid(), lookup: tcpPeerUID, logger: logger}
			}
			stop, err := core.serveDaemonHTTP(ctx, daemonLn, token, guard)
			if err != nil {
				return err
			}
			defer stop()
		}
		c.sayReady()
		return attach.serve(ctx)
	case modeStdio:
		logger.Info("foldproxy serving MCP on stdio", "upstreams", len(r.cfg.Servers), "state", r.dir)
		return serveStdio(ctx, core.srv, c.stdin, c.stdout, st.MaxMessageBytes, logger)
	}
	if attach != nil {
		defer attach.serveInBackground(ctx)()
	}
	return serveListen(ctx, r, core, access, loops, &httpAddr)
}

// serveListen serves MCP over streamable HTTP, and the model APIs, on
// --listen.
func serveListen(ctx context.Context, r serveRun, core *serveCore, access localAccess, loops *selfListeners, httpAddr *atomic.Pointer[string]) error {
	f, st, logger := r.f, r.st, r.logger
	handler, closeStreams, err := core.httpHandler(f.listen, access.token)
	if err != nil {
		return err
	}
	ln, err := listenHTTP(f.listen)
	if err != nil {
		return err
	}
	defer ln.Close()
	loops.add(ln.Addr())
	if err := checkLoops(ln.Addr().String(), st, r.cfg.Servers); err != nil {
		return err
	}
	a := ln.Addr().String()
	httpAddr.Store(&a)
	logger.Info("foldproxy serving MCP over streamable HTTP", "url", "http://"+ln.Addr().String()+"/mcp", "upstreams", len(r.cfg.Servers), "state", r.dir)
	logger.Info("foldproxy serving the model APIs", "ANTHROPIC_BASE_URL", "http://"+ln.Addr().String(),
		"anthropic", st.Model.AnthropicURL, "openai", st.Model.OpenAIURL)
	return serveHTTP(ctx, ln, handler, closeStreams, access.guard)
}

// relay serves this stdio session through the project's daemon, starting
// one when none answers (attach.Relay).
func (c *serveCommand) relay(ctx context.Context, f serveFlags, st policy.Settings, dir, ident string, logger *slog.Logger) error {
	if f.metrics != "" {
		// The daemon serves the metrics and logs its address to its own
		// log, before this relay is attached: say it here too, on the
		// stderr the agent keeps (stdout is JSON-RPC only).
		logger.Info("metrics", "url", "http://"+f.metrics+"/metrics", "served_by", "the daemon of "+dir, "log", filepath.Join(dir, daemonLogName))
	}
	// The relay's own memory is small; what counts is the pages of the
	// executable start-up read (trim.go).
	go trimWhenIdle(ctx, logger)
	// The relay copies lines and does little else: one P is all it needs,
	// and with one there is no idle P for a goroutine made runnable to
	// wake a spinning thread for, once per message, on a machine whose
	// cores the daemon, the upstreams and the agent share. Its stdin,
	// stdout and socket are read and written through the runtime's poller
	// (proxy/rawio_unix.go): waiting for either side is one epoll_wait.
	runtime.GOMAXPROCS(1)
	return attach.Relay(ctx, c.stdin, c.stdout, relayOptions(f, st, dir, ident, c.stderr, logger, os.Getenv))
}

// sayReady tells the relay that started this daemon that it serves.
func (c *serveCommand) sayReady() {
	if c.ready != nil {
		fmt.Fprintln(c.ready, "ready")
		c.ready.Close()
		c.ready = nil
	}
}

// observer feeds what the proxy core sees outside the intercept chain to
// the metrics and the audit log: intercept's Observer (sessions, relayed
// messages), and the model front's requests.
type observer struct {
	*intercept.Observer
	auditor *intercept.Auditor
	metrics *intercept.Metrics
	logger  *slog.Logger
	prices  policy.ModelPrices // to bill the usage model APIs report
}

// ModelRequest records a request of the model front in the metrics and
// the audit log (kind "model": dialect as method, the conversation's
// tokens as received and as forwarded).
// The audit record is written first, so that a request seen in the
// metrics is in the log.
func (o observer) ModelRequest(ev modelfront.Event) {
	rec := intercept.Record{Time: time.Now(), Kind: intercept.KindModel, Session: ev.Session, Method: ev.Dialect, Outcome: ev.Outcome,
		ResultTokens: ev.TokensBefore, DeliveredTokens: ev.TokensAfter, Tokens: ev.Folded,
		LatencyMS: float64(ev.Duration) / float64(time.Millisecond), Model: modelFigures(ev, o.prices)}
	if err := o.auditor.Write(rec); err != nil {
		o.logger.Warn("audit record of a model request", "err", err)
	}
	o.metrics.ModelRequest(ev.Dialect, ev.Outcome, ev.TokensBefore, ev.TokensAfter, ev.Folded, ev.Guidance, ev.Duration)
	o.metrics.ModelFigures(ev.Dialect, rec.Model)
}

// modelFigures are a model request's figures for its audit record; nil
// for a request relayed without the context manager.
func modelFigures(ev modelfront.Event, prices policy.ModelPrices) *intercept.ModelFigures {
	if ev.Session == "" {
		return nil
	}
	f := &intercept.ModelFigures{Session: ev.Session, Recalls: ev.AutoFold.Recalls,
		PrefixHeld: int(ev.Bill.Held), ModelledBilled: ev.Bill.Billed, ModelledWithout: ev.Bill.Without}
	notes := make([]intercept.FoldNote, len(ev.AutoFold.New))
	for i, r := range ev.AutoFold.New {
		notes[i] = intercept.FoldNote{Handle: r.Handle, Kind: r.Kind, Tool: r.Tool, Brief: r.Brief, Tokens: r.Tokens}
	}
	if ev.AutoFold.Observe {
		f.WouldFolds, f.WouldFold, f.WouldSave = notes, ev.AutoFold.Folded, ev.AutoFold.Saved
	} else {
		f.Folds, f.Folded, f.FoldSaved = notes, ev.AutoFold.Folded, ev.AutoFold.Saved
	}
	if u := ev.Usage; u.Known {
		f.Usage = &intercept.Usage{Input: u.Input, CacheRead: u.CacheRead, CacheWrite: u.CacheWrite, Output: u.Output,
			Billed: u.Billed(prices.CacheRead, prices.CacheWrite)}
	}
	return f
}

// sinks fans branch events out to several sinks.
type sinks []fold.EventSink

func (s sinks) BranchEvent(ctx context.Context, ev fold.Event) {
	for _, x := range s {
		x.BranchEvent(ctx, ev)
	}
}
