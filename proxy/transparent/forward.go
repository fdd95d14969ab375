package transparent

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/elazarl/goproxy"
	"github.com/foldproxy/foldproxy/policy"
	"github.com/foldproxy/foldproxy/proxy/guard"
)

// ForwardOptions configures the forward proxy of transparent mode.
type ForwardOptions struct {
	// CA signs the certificates of intercepted hosts. Required.
	CA *CA
	// Token, when set, must come with every proxy request in
	// Proxy-Authorization: "Bearer <token>", or Basic with the token as the
	// password (what HTTPS_PROXY=http://foldproxy:<token>@host:port makes
	// Node, curl and Python send). Required when Loopback is false.
	Token    string
	Loopback bool
	// InterceptHosts are host patterns (policy.ParseHostPattern) whose TLS
	// is terminated and whose requests go to the model front. Every other
	// host is tunnelled untouched.
	InterceptHosts []string
	// AllowPorts are the ports CONNECT may reach. Required (non-empty).
	AllowPorts []int
	// Model makes the model front of an intercepted host, given its base
	// URL ("https://api.anthropic.com", "https://localhost:8443"). Called
	// once per host and port. Required.
	Model func(baseURL string) (http.Handler, error)
	// Remote, when set, is the front of the remote MCP servers of
	// foldproxy.proxy.mcp: their hosts are intercepted too, their MCP
	// requests served by it and their other paths relayed untouched.
	Remote *RemoteFront
	// Dial connects tunnels; nil: a net.Dialer with a 30 s timeout. Never
	// a proxy from the environment: foldproxy would be its own proxy.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Logger receives diagnostics, never a header or a body. nil discards.
	Logger *slog.Logger
}

// discardIfNil returns l, or a logger that discards everything when l is
// nil.
func discardIfNil(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.New(slog.DiscardHandler)
	}
	return l
}

// ForwardProxy is an HTTP forward proxy, built on goproxy, that serves
// CONNECT only: intercepted hosts are answered with a certificate from the
// local CA and their requests served by the model front (one fold core,
// two entries); every other allowed host is tunnelled byte for byte and
// never decrypted. Plain-HTTP proxy requests are refused: foldproxy is
// not an open relay.
type ForwardProxy struct {
	log    *slog.Logger
	ca     *CA
	token  guard.Token
	hosts  []hostPattern
	ports  []int
	model  func(string) (http.Handler, error)
	remote *RemoteFront
	gp     *goproxy.ProxyHttpServer

	mu      sync.Mutex
	fronts  map[string]http.Handler // by host:port
	mitm    *http.Server
	ln      *connListener
	started bool
}

var _ http.Handler = (*ForwardProxy)(nil)

type hostPattern struct {
	host string // lower case; "*.x.y" for subdomains of x.y
	port int    // 0: any allowed port
}

// NewForwardProxy validates opts and returns the forward proxy.
func NewForwardProxy(opts ForwardOptions) (*ForwardProxy, error) {
	if opts.CA == nil || opts.Model == nil {
		return nil, errors.New("forward proxy: CA and Model are required")
	}
	if len(opts.AllowPorts) == 0 {
		return nil, errors.New("forward proxy: AllowPorts is empty: no CONNECT could be served")
	}
	p := &ForwardProxy{
		log:    discardIfNil(opts.Logger),
		ca:     opts.CA,
		ports:  slices.Clone(opts.AllowPorts),
		model:  opts.Model,
		remote: opts.Remote,
		fronts: map[string]http.Handler{},
		ln:     newConnListener(),
	}
	var err error
	switch p.token, err = guard.NewToken(opts.Token, opts.Loopback); {
	case errors.Is(err, guard.ErrTokenRequired):
		return nil, errors.New("forward proxy: a token is required when the proxy listens on a non-loopback address (foldproxy.authToken or FOLDPROXY_TOKEN)")
	case err != nil:
		return nil, fmt.Errorf("forward proxy: %w", err)
	}
	for _, h := range opts.InterceptHosts {
		host, port, err := policy.ParseHostPattern(h)
		if err != nil {
			return nil, fmt.Errorf("forward proxy: intercept host %q %v", h, err)
		}
		p.hosts = append(p.hosts, hostPattern{host, port})
	}
	dial := opts.Dial
	if dial == nil {
		dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	}

	gp := goproxy.NewProxyHttpServer()
	gp.Logger = slog.NewLogLogger(p.log.Handler(), slog.LevelDebug)
	// Not the environment's proxy (goproxy's default): foldproxy started
	// from a shell with HTTPS_PROXY set to itself would loop.
	gp.ConnectDial = nil
	gp.ConnectDialWithReq = func(req *http.Request, network, addr string) (net.Conn, error) {
		return dial(req.Context(), network, addr)
	}
	gp.Tr = &http.Transport{Proxy: nil, DialContext: dial}
	gp.OnRequest().HandleConnectFunc(func(host string, ctx *goproxy.ProxyCtx) (*goproxy.ConnectAction, string) {
		if p.Intercepted(host) {
			return &goproxy.ConnectAction{Action: goproxy.ConnectHijack, Hijack: p.intercept}, host
		}
		p.log.Debug("forward proxy: tunnel", "host", host)
		return goproxy.OkConnect, host
	})
	p.gp = gp

	p.mitm = &http.Server{
		Handler:           http.HandlerFunc(p.serveIntercepted),
		ReadHeaderTimeout: 30 * time.Second,
		// An intercepted connection left idle by the agent is closed; a
		// streamed answer in progress is not idle.
		IdleTimeout: 5 * time.Minute,
		ErrorLog:    slog.NewLogLogger(p.log.Handler(), slog.LevelDebug),
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			if mc, ok := c.(*mitmConn); ok {
				ctx = context.WithValue(ctx, mitmConnKey{}, mc)
				return context.WithValue(ctx, mitmTargetKey{}, mc.target)
			}
			return ctx
		},
		ConnState: func(c net.Conn, st http.ConnState) {
			if p.remote != nil && (st == http.StateClosed || st == http.StateHijacked) {
				p.remote.connClosed(c)
			}
		},
	}
	return p, nil
}

// Intercepted reports whether CONNECT to hostport ("host:port") is
// intercepted rather than tunnelled.
func (p *ForwardProxy) Intercepted(hostport string) bool {
	return p.modelHost(hostport) || (p.remote != nil && p.remote.handlesTarget(hostport))
}

// modelHost reports whether hostport is one of InterceptHosts.
func (p *ForwardProxy) modelHost(hostport string) bool {
	host, portStr, err := net.SplitHostPort(hostport)
	if err != nil {
		return false
	}
	port, _ := strconv.Atoi(portStr)
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	for _, hp := range p.hosts {
		if hp.port != 0 && hp.port != port {
			continue
		}
		if base, ok := strings.CutPrefix(hp.host, "*."); ok {
			if strings.HasSuffix(host, "."+base) {
				return true
			}
		} else if host == hp.host {
			return true
		}
	}
	return false
}

// ServeHTTP implements http.Handler: the refusals, then goproxy.
func (p *ForwardProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !p.token.Proxy(r) {
		w.Header().Set("Proxy-Authenticate", `Basic realm="foldproxy"`)
		w.Header().Add("Proxy-Authenticate", `Bearer realm="foldproxy"`)
		proxyRefusal(w, http.StatusProxyAuthRequired,
			"foldproxy requires its token: Proxy-Authorization: Bearer <token>, or HTTPS_PROXY=http://foldproxy:<token>@host:port")
		return
	}
	if r.Method != http.MethodConnect {
		if r.URL.IsAbs() {
			proxyRefusal(w, http.StatusForbidden,
				"foldproxy relays HTTPS only (CONNECT): plain-HTTP proxy requests are refused, foldproxy is not an open relay")
			return
		}
		proxyRefusal(w, http.StatusNotFound,
			"this is foldproxy's forward proxy: use it as HTTPS_PROXY (its MCP and model fronts are on --listen)")
		return
	}
	host, portStr, err := net.SplitHostPort(r.Host)
	port, perr := strconv.Atoi(portStr)
	if err != nil || host == "" || perr != nil || port < 1 || port > 65535 {
		proxyRefusal(w, http.StatusBadRequest, fmt.Sprintf("CONNECT %q: want host:port", r.Host))
		return
	}
	if !slices.Contains(p.ports, port) {
		p.log.Info("forward proxy: CONNECT refused: port not allowed", "host", host, "port", port)
		proxyRefusal(w, http.StatusForbidden, fmt.Sprintf(
			"foldproxy refused CONNECT to %s: port %d is not allowed (allowed: %s; foldproxy.proxy.allowPorts)",
			r.Host, port, portList(p.ports)))
		return
	}
	// goproxy reads the target from the URL; a CONNECT's is its authority.
	r.URL.Host = r.Host
	p.gp.ServeHTTP(w, r)
}

func portList(ports []int) string {
	s := make([]string, len(ports))
	for i, p := range ports {
		s[i] = strconv.Itoa(p)
	}
	return strings.Join(s, ", ")
}

func proxyRefusal(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Foldproxy-Error", "1")
	w.Header().Set("Connection", "close")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, msg+"\n")
}

// intercept is goproxy's hijack of an intercepted CONNECT: it answers 200,
// terminates TLS with the host's certificate from the CA and hands the
// connection to the server of intercepted requests.
func (p *ForwardProxy) intercept(req *http.Request, client net.Conn, _ *goproxy.ProxyCtx) {
	target := req.URL.Host
	hostname, _, _ := net.SplitHostPort(target)
	if _, err := io.WriteString(client, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		client.Close()
		return
	}
	leaf, err := p.ca.Leaf(hostname)
	if err != nil {
		p.log.Error("forward proxy: no certificate for an intercepted host", "host", hostname, "err", err)
		client.Close()
		return
	}
	tc := tls.Server(client, &tls.Config{
		Certificates: []tls.Certificate{*leaf},
		NextProtos:   []string{"http/1.1"},
		MinVersion:   tls.VersionTLS12,
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	err = tc.HandshakeContext(ctx)
	cancel()
	if err != nil {
		p.log.Warn("forward proxy: TLS handshake with the client failed; does it trust foldproxy's CA? (foldproxy ca prints the lines to set, e.g. NODE_EXTRA_CA_CERTS)",
			"host", target, "err", err)
		tc.Close()
		return
	}
	if !p.startMITM() || !p.ln.push(&mitmConn{Conn: tc, target: target}) {
		tc.Close()
	}
}

// startMITM starts the server of intercepted connections on first use;
// false once the proxy is closed.
func (p *ForwardProxy) startMITM() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln.isClosed() {
		return false
	}
	if !p.started {
		p.started = true
		go func() { _ = p.mitm.Serve(p.ln) }()
	}
	return true
}

type (
	mitmTargetKey struct{}
	mitmConnKey   struct{}
)

// serveIntercepted serves one request on an intercepted connection by its
// CONNECT target (whatever its Host header says): a remote MCP server's
// MCP requests by the remote front, its other paths relayed untouched
// unless the host is also a model host; a model host's by its model front.
func (p *ForwardProxy) serveIntercepted(w http.ResponseWriter, r *http.Request) {
	target, _ := r.Context().Value(mitmTargetKey{}).(string)
	if p.remote != nil && p.remote.handlesTarget(target) {
		conn, _ := r.Context().Value(mitmConnKey{}).(*mitmConn)
		if p.remote.serve(w, r, target, conn) {
			return
		}
		if !p.modelHost(target) {
			p.remote.relay.ServeHTTP(w, r)
			return
		}
	}
	h, err := p.front(target)
	if err != nil {
		p.log.Error("forward proxy: model front", "host", target, "err", err)
		proxyRefusal(w, http.StatusInternalServerError, "foldproxy: "+err.Error())
		return
	}
	h.ServeHTTP(w, r)
}

func (p *ForwardProxy) front(target string) (http.Handler, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if h, ok := p.fronts[target]; ok {
		return h, nil
	}
	base := "https://" + target
	if host, port, _ := net.SplitHostPort(target); port == "443" {
		base = "https://" + host
		if strings.Contains(host, ":") {
			base = "https://[" + host + "]"
		}
	}
	h, err := p.model(base)
	if err != nil {
		return nil, err
	}
	p.fronts[target] = h
	return h, nil
}

// Close ends every intercepted connection. Tunnels end with their
// listener's server (they belong to the connections it hijacked).
func (p *ForwardProxy) Close() error {
	p.mu.Lock()
	p.ln.Close()
	p.mu.Unlock()
	return p.mitm.Close()
}

// mitmConn is an intercepted connection and its CONNECT target.
type mitmConn struct {
	net.Conn
	target string
}

// connListener hands connections pushed to it to an http.Server.
type connListener struct {
	ch     chan net.Conn
	done   chan struct{}
	once   sync.Once
	closed bool
	mu     sync.Mutex
}

func newConnListener() *connListener {
	return &connListener{ch: make(chan net.Conn), done: make(chan struct{})}
}

func (l *connListener) push(c net.Conn) bool {
	select {
	case l.ch <- c:
		return true
	case <-l.done:
		return false
	}
}

func (l *connListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *connListener) isClosed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}

func (l *connListener) Close() error {
	l.once.Do(func() {
		l.mu.Lock()
		l.closed = true
		l.mu.Unlock()
		close(l.done)
	})
	return nil
}

func (l *connListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }
