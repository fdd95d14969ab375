package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/foldproxy/foldproxy/fold"
	"github.com/foldproxy/foldproxy/intercept"
	"github.com/foldproxy/foldproxy/policy"
	"github.com/foldproxy/foldproxy/proxy"
	"github.com/foldproxy/foldproxy/upstreams"
)

// The tests of serve's setup steps, one by one (see the steps in serve.go).

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

func TestLogLevelOf(t *testing.T) {
	if l, err := logLevelOf("warn"); err != nil || l != slog.LevelWarn {
		t.Errorf("logLevelOf(warn) = %v, %v", l, err)
	}
	if _, err := logLevelOf("loud"); err == nil || err.Error() != `--log-level "loud": want debug, info, warn or error` {
		t.Errorf("logLevelOf(loud) = %v", err)
	}
}

func TestLoadSetup(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "mcp.json")
	if err := os.WriteFile(cfgPath, []byte(`{"mcpServers":{},"foldproxy":{"stateDir":"st"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, state, err := loadSetup(cfgPath, "")
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, "st"); state != want || cfg.Dir != dir {
		t.Errorf("state folder %q (config folder %q), want %q beside the config", state, cfg.Dir, want)
	}
	if fi, err := os.Stat(state); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		t.Errorf("state folder not created 0700: %v %v", fi, err)
	}
	flagDir := filepath.Join(t.TempDir(), "flag")
	if _, state, err = loadSetup(cfgPath, flagDir); err != nil || state != flagDir {
		t.Errorf("--state %s: got %q, %v", flagDir, state, err)
	}

	if _, _, err := loadSetup(filepath.Join(dir, "missing.json"), ""); err == nil || !strings.Contains(err.Error(), "reading config") {
		t.Errorf("missing config: %v, want it named", err)
	}
	file := filepath.Join(dir, "afile")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := loadSetup(cfgPath, filepath.Join(file, "state")); err == nil || !strings.Contains(err.Error(), "state folder "+filepath.Join(file, "state")) {
		t.Errorf("state folder under a file: %v, want it named", err)
	}
}

func TestListenDefaults(t *testing.T) {
	st := policy.Default()
	st.Listen, st.Metrics.Listen, st.ProxyListen = "127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"
	listen, metrics, fwd := "", "127.0.0.1:9", ""
	listenDefaults(st, &listen, &metrics, &fwd)
	if listen != "127.0.0.1:1" || metrics != "127.0.0.1:9" || fwd != "127.0.0.1:3" {
		t.Errorf("got %q %q %q: want the config's where no flag is given, the flag's otherwise", listen, metrics, fwd)
	}
}

func TestAuthTokenAndExposure(t *testing.T) {
	st := policy.Default()
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == "FOLDPROXY_TOKEN" {
				return v
			}
			return ""
		}
	}
	if got := authToken(st, env("from-env")); got != "from-env" {
		t.Errorf("authToken without a configured one = %q, want FOLDPROXY_TOKEN's", got)
	}
	st.AuthToken = "from-config"
	if got := authToken(st, env("from-env")); got != "from-config" {
		t.Errorf("authToken = %q, want the config's first", got)
	}
	tests := []struct {
		listen, proxyListen, token, want string
	}{
		{"127.0.0.1:8080", "localhost:3128", "", ""},
		{"0.0.0.0:8080", "", "t", ""},
		{"0.0.0.0:8080", "", "", "--listen 0.0.0.0:8080 is not a loopback address: set foldproxy.authToken"},
		{"", "10.0.0.1:3128", "", "--proxy-listen 10.0.0.1:3128 is not a loopback address"},
	}
	for _, tt := range tests {
		err := checkExposure(tt.listen, tt.proxyListen, tt.token)
		if (tt.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("checkExposure(%q, %q, token %q) = %v, want %q", tt.listen, tt.proxyListen, tt.token, err, tt.want)
		}
	}
}

func TestResolvePaths(t *testing.T) {
	st := policy.Default()
	st.Proxy.ExtraRootsFile, st.Scrub.GitleaksConfig = "roots.pem", "/abs/.gitleaks.toml"
	if got := resolvePaths(&st, "/cfg", "/state"); got != "/state/audit.jsonl" {
		t.Errorf("default audit path %q", got)
	}
	if st.Proxy.ExtraRootsFile != "/cfg/roots.pem" || st.Scrub.GitleaksConfig != "/abs/.gitleaks.toml" {
		t.Errorf("paths %q %q: want relative ones under the config's folder, absolute ones kept", st.Proxy.ExtraRootsFile, st.Scrub.GitleaksConfig)
	}
	for path, want := range map[string]string{"-": "-", "logs/a.jsonl": "/cfg/logs/a.jsonl", "/var/a.jsonl": "/var/a.jsonl"} {
		st.Audit.Path = path
		if got := resolvePaths(&st, "/cfg", "/state"); got != want {
			t.Errorf("audit path %q resolves to %q, want %q", path, got, want)
		}
	}
}

func TestOpenStore(t *testing.T) {
	dir := t.TempDir()
	store, err := openStore(dir, false, discard())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "badger")); err != nil {
		t.Errorf("no badger folder in the state folder: %v", err)
	}
	store.Close()
	file := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := openStore(file, false, discard()); err == nil || !strings.Contains(err.Error(), "opening the state store in "+file) {
		t.Errorf("openStore under a file: %v, want the folder named", err)
	}
}

func TestServeMetrics(t *testing.T) {
	m := intercept.NewMetrics()
	if _, err := serveMetrics("0.0.0.0:0", m, discard()); err == nil || !strings.Contains(err.Error(), "--metrics 0.0.0.0:0 is not a loopback address") {
		t.Errorf("non-loopback metrics address: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if _, err := serveMetrics(ln.Addr().String(), m, discard()); err == nil || !strings.Contains(err.Error(), "--metrics "+ln.Addr().String()) {
		t.Errorf("metrics address in use: %v, want it named", err)
	}
	addr := freeAddr(t)
	stop, err := serveMetrics(addr, m, discard())
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "foldproxy_") {
		t.Errorf("GET /metrics: %d %.200s", resp.StatusCode, body)
	}
}

// freeAddr returns a loopback address nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestBuildChains: serve's chains come from intercept.NewChain, and a
// missing part stops start-up with an error that names it.
func TestBuildChains(t *testing.T) {
	st := policy.Default()
	counter, err := intercept.NewCounter(st.Tokens)
	if err != nil {
		t.Fatal(err)
	}
	off := st.Scrub
	off.Disabled = true
	scrubber, err := intercept.NewScrubber(off, nil)
	if err != nil {
		t.Fatal(err)
	}
	auditor, err := intercept.NewAuditor(st.Audit, filepath.Join(t.TempDir(), "audit.jsonl"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer auditor.Close()
	mgr, err := fold.NewManager(context.Background(), fold.Options{Settings: st.Fold, Store: fold.NewMemStore(), Scanner: scrubber, Counter: counter, PruneInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer mgr.Close()
	p := intercept.Parts{Scrubber: scrubber, Counter: counter, Brancher: mgr, Thresholds: st.Fold.Thresholds, Auditor: auditor, Metrics: intercept.NewMetrics()}
	forward, control, err := buildChains(p)
	if err != nil || len(forward) != 5 || len(control) != 2 {
		t.Fatalf("buildChains = %d, %d interceptors, %v; want 5 and 2", len(forward), len(control), err)
	}
	p.Auditor = nil
	if _, _, err := buildChains(p); !errors.Is(err, intercept.ErrChain) || !strings.Contains(err.Error(), "no Auditor") {
		t.Errorf("buildChains without an auditor: %v", err)
	}
}

// TestServeHTTP: the HTTP listener serves until its context ends, then
// shuts down (calling onShutdown) and returns nil; a listener that fails
// returns its error.
func TestServeHTTP(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	shut := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- serveHTTP(ctx, ln, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "served") }), func() { close(shut) })
	}()
	resp, err := http.Get("http://" + ln.Addr().String() + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "served" {
		t.Errorf("GET / = %q", body)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("serveHTTP after its context ended: %v, want nil", err)
	}
	<-shut // onShutdown ran
	if _, err := http.Get("http://" + ln.Addr().String() + "/"); err == nil {
		t.Error("the listener still answers after shutdown")
	}

	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed.Close()
	if err := serveHTTP(context.Background(), closed, http.NotFoundHandler(), nil); err == nil || errors.Is(err, http.ErrServerClosed) {
		t.Errorf("serveHTTP on a closed listener: %v, want its error", err)
	}
}

// TestUpstreamOptions: before the MCP front exists an upstream's request
// is refused as "foldproxy is starting"; a stderr line is scrubbed before it
// is logged, and dropped when no scrubber could be built; a state change
// feeds the metrics.
func TestUpstreamOptions(t *testing.T) {
	var logged strings.Builder
	logger := slog.New(slog.NewTextHandler(&logged, nil))
	m := intercept.NewMetrics()
	scrubber, err := intercept.NewScrubber(policy.Default().Scrub, nil)
	if err != nil {
		t.Fatal(err)
	}
	var srvp atomic.Pointer[proxy.Server]
	hooks := upstreamHooks{srv: &srvp, metrics: m, logger: logger, scrubTimeout: 10 * time.Second,
		scrubber: func() *intercept.Scrubber { return scrubber }}
	opts := upstreamOptions(context.Background(), hooks)
	u := upstreams.New(upstreams.Entry{Name: "gh", Type: "stdio", Command: "true"}, opts)

	_, err = opts.OnRequest(context.Background(), u, "sampling/createMessage", json.RawMessage(`{}`))
	var rpcErr *upstreams.RPCError
	if !errors.As(err, &rpcErr) || rpcErr.Code != proxy.CodeInternalError || rpcErr.Message != "foldproxy is starting" {
		t.Errorf("request before the front exists: %v", err)
	}
	opts.OnNotification(u, "notifications/message", json.RawMessage(`{}`)) // no front yet: dropped, no panic

	secret := "ghp_A1b2C3d4E5f6G7h8J9k0L1m2N3p4Q5r6S7t8"
	opts.Stderr(u, "token "+secret)
	if strings.Contains(logged.String(), secret) || !strings.Contains(logged.String(), "[REDACTED:github-pat]") || !strings.Contains(logged.String(), "upstream=gh") {
		t.Errorf("stderr logged as %q: want it scrubbed and attributed", logged.String())
	}
	logged.Reset()
	opts = upstreamOptions(context.Background(), upstreamHooks{srv: &srvp, metrics: m, logger: logger, scrubber: func() *intercept.Scrubber { return nil }})
	opts.Stderr(u, "token "+secret)
	if logged.Len() != 0 {
		t.Errorf("stderr without a scrubber logged %q, want nothing", logged.String())
	}

	opts.OnState(u, upstreams.StateUp)
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if !strings.Contains(rec.Body.String(), `foldproxy_upstream_up{upstream="gh"} 1`) {
		t.Errorf("metrics after the upstream came up lack its state:\n%.2000s", rec.Body.String())
	}
}
