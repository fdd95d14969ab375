package main

import (
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"time"

	"github.com/foldproxy/foldproxy/policy"
	"github.com/foldproxy/foldproxy/proxy"
	"github.com/foldproxy/foldproxy/proxy/modelfront"
	"github.com/foldproxy/foldproxy/proxy/transparent"
)

// startForwardProxy serves transparent mode's forward proxy on addr: the
// local CA under stateDir (made on first use), the intercepted hosts'
// model fronts from newFront, upstream TLS verified against the system
// roots plus the extra roots file. newRemote makes the front of the remote
// MCP servers of ps.MCP (nil when there are none) with that transport.
// stop closes it.
func startForwardProxy(addr, stateDir, configDir, token string, ps policy.Proxy,
	newFront func(modelfront.Options) (*modelfront.Handler, error),
	newRemote func(http.RoundTripper) (*transparent.RemoteFront, error), guard *localUsers, loops *selfListeners, logger *slog.Logger,
) (stop func(), err error) {
	ca, created, err := transparent.LoadOrCreateCA(stateDir)
	if err != nil {
		return nil, err
	}
	if created {
		logger.Info("foldproxy made its local CA: trust it in the agent's environment (foldproxy ca prints the lines)", "cert", ca.CertPath())
	}
	roots, err := upstreamRoots(ps.ExtraRootsFile)
	if err != nil {
		return nil, err
	}
	transport := modelfront.NewTransport(roots)
	transport.DialContext = loops.guard(transport.DialContext, "an intercepted host must not resolve to foldproxy itself")
	var remote *transparent.RemoteFront
	if len(ps.MCP) > 0 {
		if remote, err = newRemote(transport); err != nil {
			return nil, err
		}
	}
	fp, err := transparent.NewForwardProxy(transparent.ForwardOptions{
		Remote:         remote,
		CA:             ca,
		Token:          token,
		Loopback:       proxy.IsLoopback(addr),
		InterceptHosts: ps.InterceptHosts,
		AllowPorts:     ps.AllowPorts,
		// A CONNECT to foldproxy's own proxy port would nest tunnels
		// without end (loop.go).
		Dial: loops.guard((&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			"foldproxy does not tunnel to itself: CONNECT to the real host"),
		Model: func(base string) (http.Handler, error) {
			return newFront(modelfront.Options{AnthropicURL: base, OpenAIURL: base, Transparent: true, Transport: transport})
		},
		Logger: logger,
	})
	if err != nil {
		return nil, err
	}
	closeAll := func() {
		_ = fp.Close()
		if remote != nil {
			remote.Close()
		}
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("--proxy-listen %s: %w", addr, err)
	}
	loops.add(ln.Addr())
	if ta, ok := ln.Addr().(*net.TCPAddr); ok && slices.Contains(ps.AllowPorts, ta.Port) {
		logger.Warn("foldproxy.proxy.allowPorts holds the proxy's own port: a CONNECT to foldproxy itself is refused", "port", ta.Port)
	}
	hs := &http.Server{Handler: fp, ReadHeaderTimeout: 30 * time.Second, IdleTimeout: 5 * time.Minute}
	guard.apply(hs)
	go func() { _ = hs.Serve(ln) }()
	logger.Info("foldproxy serving transparent mode (forward proxy)", "HTTPS_PROXY", "http://"+ln.Addr().String(),
		"NODE_EXTRA_CA_CERTS", ca.CertPath(), "intercept", ps.InterceptHosts, "allowPorts", ps.AllowPorts)
	if remote != nil {
		logger.Info("foldproxy intercepting remote MCP servers", "targets", remote.Targets())
	}
	return func() {
		_ = hs.Close()
		closeAll()
	}, nil
}

// upstreamRoots is the system's root pool plus the certificates of the
// extra roots file (PEM), if any.
func upstreamRoots(extraFile string) (*x509.CertPool, error) {
	roots, err := x509.SystemCertPool()
	if err != nil || roots == nil {
		roots = x509.NewCertPool()
	}
	if extraFile == "" {
		return roots, nil
	}
	data, err := os.ReadFile(extraFile)
	if err != nil {
		return nil, fmt.Errorf("foldproxy.proxy.extraRootsFile: %w", err)
	}
	if !roots.AppendCertsFromPEM(data) {
		return nil, errors.New("foldproxy.proxy.extraRootsFile " + extraFile + ": no PEM certificate in it")
	}
	return roots, nil
}
