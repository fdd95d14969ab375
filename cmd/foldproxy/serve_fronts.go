package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/foldproxy/foldproxy/intercept"
	"github.com/foldproxy/foldproxy/policy"
	"github.com/foldproxy/foldproxy/proxy"
	"github.com/foldproxy/foldproxy/proxy/attach"
	"github.com/foldproxy/foldproxy/proxy/modelfront"
)

// The fronts serve starts once its core is open: the metrics listener, the
// attach socket, stdio and streamable HTTP (the daemon's listener
// included).

// serveMetrics serves /metrics on addr, which must be a loopback address:
// this listener checks no token, only, where guard is set, that the
// client is the user's own.
func serveMetrics(addr string, m *intercept.Metrics, guard *localUsers, logger *slog.Logger) (stop func(), err error) {
	if !proxy.IsLoopback(addr) {
		return nil, fmt.Errorf("--metrics %s is not a loopback address: the separate metrics listener has no token check; "+
			"scrape /metrics on --listen (same token and Host rules as /mcp), or bind --metrics to 127.0.0.1", addr)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", m.Handler())
	ms := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	guard.apply(ms)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics %s: %w", addr, err)
	}
	logger.Info("metrics", "url", "http://"+ln.Addr().String()+"/metrics")
	go func() { _ = ms.Serve(ln) }()
	return func() { _ = ms.Close() }, nil
}

// attachFront is the state folder's socket, on which the project's stdio
// relays attach to this process (attach.Server).
type attachFront struct {
	srv    *attach.Server
	ln     net.Listener
	logger *slog.Logger
}

// attachOptions are the attach socket's options: the daemon exits idleExit
// after its last session ends; a --listen server never does.
func attachOptions(mode serveMode, idleExit time.Duration, ident string, st policy.Settings, logger *slog.Logger) attach.Options {
	idle := time.Duration(-1)
	if mode == modeDaemon {
		idle = idleExit
	}
	return attach.Options{
		Config: ident, MaxMessageBytes: st.MaxMessageBytes, Logger: logger,
		CheckPeer: checkPeer, IdleExit: idle,
	}
}

// listenAttach listens on the socket of state folder dir (the caller holds
// its lock) for relays to attach to srv.
func listenAttach(dir string, srv *proxy.Server, o attach.Options) (*attachFront, error) {
	ln, sock, err := listenSocket(dir)
	if err != nil {
		return nil, fmt.Errorf("attach socket: %w", err)
	}
	o.Logger.Info("foldproxy attach socket", "socket", sock, "pid", os.Getpid())
	return &attachFront{srv: attach.NewServer(srv, o), ln: ln, logger: o.Logger}, nil
}

// serve serves the relays until ctx ends or, for the daemon, the last
// session has been gone for the idle time; it closes the listener.
func (a *attachFront) serve(ctx context.Context) error { return a.srv.Serve(ctx, a.ln) }

// serveInBackground serves the relays beside another front until stop,
// which ends the attached sessions (they can resume) and closes the
// listener.
func (a *attachFront) serveInBackground(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := a.serve(ctx); err != nil {
			a.logger.Warn("attach socket", "err", err)
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// serveStdio serves one MCP session on stdin and stdout until the agent
// closes stdin (nil) or ctx ends (nil).
func serveStdio(ctx context.Context, srv *proxy.Server, stdin io.Reader, stdout io.Writer, maxMessageBytes int64, logger *slog.Logger) error {
	err := proxy.ServeStdio(ctx, srv, stdin, stdout, proxy.StdioOptions{MaxMessageBytes: maxMessageBytes, Logger: logger})
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// httpHandler is the handler of the HTTP front on listen: MCP on /mcp,
// /metrics and /healthz behind the same token and Host rules, and the model
// front on every other path (the model APIs under /v1/, 404 elsewhere, "/"
// included, which Claude Code probes). closeStreams ends the open sessions
// and event streams, which would otherwise hold a shutdown for its whole
// timeout.
func (c *serveCore) httpHandler(listen, token string) (handler http.Handler, closeStreams func(), err error) {
	h, err := proxy.NewHTTPHandler(c.srv, proxy.HTTPOptions{
		Path:            "/mcp",
		Token:           token,
		Loopback:        proxy.IsLoopback(listen),
		AllowedOrigins:  c.st.AllowedOrigins,
		MaxMessageBytes: c.st.MaxMessageBytes,
		Logger:          c.logger,
		Resume:          c.srv.ResumeSession,
	})
	if err != nil {
		return nil, nil, err // it names the HTTP front
	}
	model, err := c.newModelFront(modelfront.Options{
		AnthropicURL:   c.st.Model.AnthropicURL,
		OpenAIURL:      c.st.Model.OpenAIURL,
		Token:          token,
		Loopback:       proxy.IsLoopback(listen),
		AllowedOrigins: c.st.AllowedOrigins,
	})
	if err != nil {
		return nil, nil, err // it names the model front
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", h)
	guard := h.(*proxy.HTTPHandler).Guard
	mux.Handle("/metrics", guard(c.metrics.Handler()))
	mux.Handle("/healthz", guard(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })))
	ui := newUIHandler(c.auditPath, c.store, guard, c.logger)
	mux.Handle("/ui", ui)
	mux.Handle("/ui/", ui)
	mux.Handle("/", model)
	closeStreams = func() {}
	if cl, ok := h.(interface{ Close() error }); ok {
		closeStreams = func() { _ = cl.Close() }
	}
	return mux, closeStreams, nil
}

// listenHTTP listens on the --listen address.
func listenHTTP(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--listen %s: %w", addr, err)
	}
	return ln, nil
}

// serveHTTP serves handler on ln until ctx ends (nil) or the server fails
// (its error), then shuts the server down, calling onShutdown (when not
// nil) first so that open streams do not hold the shutdown. guard, when
// set, refuses other local users' connections.
func serveHTTP(ctx context.Context, ln net.Listener, handler http.Handler, onShutdown func(), guard *localUsers) error {
	hs := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	guard.apply(hs)
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

// daemonAddrName is the file in the state folder that keeps the address
// the daemon's HTTP listener last had, so that a daemon started again
// (after the last one exited or died) serves the model front where the
// agents of the project already send their requests.
const daemonAddrName = "daemon.addr"

// listenDaemonHTTP listens on the daemon's HTTP address (foldproxy.
// daemonListen, a loopback address; nil for "off"). With port 0 it tries
// the address the previous daemon had first, then any free port; the
// address it got is written to the state folder. A fixed port that is
// taken is an error that says what to change.
func listenDaemonHTTP(dir, addr, configPath string) (net.Listener, error) {
	if addr == policy.DaemonListenOff {
		return nil, nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("foldproxy.daemonListen %q: %w", addr, err)
	}
	path := filepath.Join(dir, daemonAddrName)
	var ln net.Listener
	if port == "0" {
		if b, rerr := os.ReadFile(path); rerr == nil {
			if prev := strings.TrimSpace(string(b)); prevHostMatches(prev, host) {
				ln, _ = net.Listen("tcp", prev)
			}
		}
	}
	if ln == nil {
		if ln, err = net.Listen("tcp", addr); err != nil {
			return nil, fmt.Errorf("the daemon cannot serve HTTP on foldproxy.daemonListen %s: %w (another program may hold the port: set another in %s, and in the agent's model endpoint if a setting names it, e.g. ANTHROPIC_BASE_URL in .claude/settings.json)", addr, err, configPath)
		}
	}
	if err := os.WriteFile(path, []byte(ln.Addr().String()+"\n"), 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("state folder %s: %w", dir, err)
	}
	return ln, nil
}

// prevHostMatches reports whether prev, an address a daemon listened on,
// is on host (the configured one; localhost means the loopback IPs).
func prevHostMatches(prev, host string) bool {
	h, _, err := net.SplitHostPort(prev)
	if err != nil {
		return false
	}
	if host == "localhost" {
		ip := net.ParseIP(h)
		return ip != nil && ip.IsLoopback()
	}
	return h == host || net.ParseIP(h).Equal(net.ParseIP(host))
}

// serveDaemonHTTP serves the daemon's HTTP front on ln (the same handler
// as --listen: /mcp, the model APIs, /metrics, /healthz, /ui) until stop,
// which shuts it down.
func (c *serveCore) serveDaemonHTTP(ctx context.Context, ln net.Listener, token string, guard *localUsers) (stop func(), err error) {
	handler, closeStreams, err := c.httpHandler(ln.Addr().String(), token)
	if err != nil {
		return nil, err
	}
	base := "http://" + ln.Addr().String()
	c.logger.Info("foldproxy daemon serving the model front for the project's sessions", "ANTHROPIC_BASE_URL", base,
		"OPENAI_BASE_URL", base+"/v1", "mcp", base+"/mcp", "anthropic", c.st.Model.AnthropicURL, "openai", c.st.Model.OpenAIURL)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- serveHTTP(ctx, ln, handler, closeStreams, guard) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			c.logger.Warn("the daemon's HTTP front", "err", err)
		}
	}, nil
}
