package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/foldproxy/foldproxy/fold"
	"github.com/foldproxy/foldproxy/fold/store"
	"github.com/foldproxy/foldproxy/intercept"
	"github.com/foldproxy/foldproxy/intercept/secrets"
	"github.com/foldproxy/foldproxy/intercept/tokens"
	"github.com/foldproxy/foldproxy/policy"
	"github.com/foldproxy/foldproxy/proxy"
	"github.com/foldproxy/foldproxy/proxy/attach"
	"github.com/foldproxy/foldproxy/proxy/modelfront"
	"github.com/foldproxy/foldproxy/upstreams"
)

// The tests of serve's setup steps, one by one (see serve_steps.go).

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
	if _, err := serveMetrics("0.0.0.0:0", m, nil, discard()); err == nil || !strings.Contains(err.Error(), "--metrics 0.0.0.0:0 is not a loopback address") {
		t.Errorf("non-loopback metrics address: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if _, err := serveMetrics(ln.Addr().String(), m, nil, discard()); err == nil || !strings.Contains(err.Error(), "--metrics "+ln.Addr().String()) {
		t.Errorf("metrics address in use: %v, want it named", err)
	}
	addr := freeAddr(t)
	stop, err := serveMetrics(addr, m, nil, discard())
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
	counter, err := tokens.NewCounter(st.Tokens)
	if err != nil {
		t.Fatal(err)
	}
	off := st.Scrub
	off.Disabled = true
	scrubber, err := secrets.NewScrubber(off, nil)
	if err != nil {
		t.Fatal(err)
	}
	auditor, err := intercept.NewAuditor(st.Audit, filepath.Join(t.TempDir(), "audit.jsonl"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer auditor.Close()
	mgr, err := fold.NewManager(context.Background(), fold.Options{Settings: st.Fold, Store: store.NewMemStore(), Scanner: scrubber, Counter: counter, PruneInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer mgr.Close()
	p := intercept.Parts{Scrubber: scrubber, Counter: counter, Brancher: mgr, Thresholds: st.Fold.Thresholds, Auditor: auditor, Metrics: intercept.NewMetrics()}
	forward, control, err := buildChains(p)
	if err != nil || len(forward) != 6 || len(control) != 3 {
		t.Fatalf("buildChains = %d, %d interceptors, %v; want 6 and 3 (with the trimmer's wake)", len(forward), len(control), err)
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
		done <- serveHTTP(ctx, ln, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "served") }), func() { close(shut) }, nil)
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
	if err := serveHTTP(context.Background(), closed, http.NotFoundHandler(), nil, nil); err == nil || errors.Is(err, http.ErrServerClosed) {
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
	scrubber, err := secrets.NewScrubber(policy.Default().Scrub, nil)
	if err != nil {
		t.Fatal(err)
	}
	var srvp atomic.Pointer[proxy.Server]
	hooks := upstreamHooks{srv: &srvp, metrics: m, logger: logger, scrubTimeout: 10 * time.Second,
		scrubber: func() *secrets.Scrubber { return scrubber }}
	opts := upstreamOptions(context.Background(), hooks)
	u := upstreams.New(upstreams.Entry{Name: "gh", Type: "stdio", Command: "true"}, opts)

	_, err = opts.OnRequest(context.Background(), u, "sampling/createMessage", json.RawMessage(`{}`))
	var rpcErr *proxy.Error
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
	opts = upstreamOptions(context.Background(), upstreamHooks{srv: &srvp, metrics: m, logger: logger, scrubber: func() *secrets.Scrubber { return nil }})
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

func TestParseServeFlags(t *testing.T) {
	var usage strings.Builder
	f, err := parseServeFlags([]string{"--config", "c.json", "--listen", "127.0.0.1:1", "--standalone", "--idle-exit", "2s", "--ready-fd", "3"}, &usage)
	if err != nil {
		t.Fatal(err)
	}
	want := serveFlags{config: "c.json", listen: "127.0.0.1:1", logLevel: "info", entry: "foldproxy", standalone: true, readyFD: 3, idleExit: 2 * time.Second}
	if f != want {
		t.Errorf("parseServeFlags = %+v, want %+v", f, want)
	}
	if _, err := parseServeFlags([]string{"--listen", "127.0.0.1:1"}, &usage); err == nil || err.Error() != "--config is required" {
		t.Errorf("without --config: %v", err)
	}
	if !strings.Contains(usage.String(), "usage: foldproxy serve --config FILE") {
		t.Errorf("no usage on stderr without --config: %q", usage.String())
	}
	if _, err := parseServeFlags([]string{"--config", "c.json", "--lisen", "x"}, io.Discard); err == nil || !strings.Contains(err.Error(), "-lisen") {
		t.Errorf("unknown flag: %v, want it named", err)
	}
}

func TestServeMode(t *testing.T) {
	tests := []struct {
		f    serveFlags
		want serveMode
	}{
		{serveFlags{}, modeRelay},
		{serveFlags{standalone: true}, modeStdio},
		{serveFlags{listen: "127.0.0.1:1"}, modeHTTP},
		{serveFlags{listen: "127.0.0.1:1", standalone: true}, modeHTTP},
		{serveFlags{daemon: true}, modeDaemon},
		{serveFlags{daemon: true, listen: "127.0.0.1:1"}, modeDaemon},
	}
	for _, tt := range tests {
		want := tt.want
		if !daemonSupported && want == modeRelay {
			want = modeStdio
		}
		if got := tt.f.mode(); got != want {
			t.Errorf("%+v: mode %v, want %v", tt.f, got, want)
		}
	}
}

// TestRelayOptions: a relay starts its daemon with the flags the
// configuration does not already give it, passes the daemon's log to its
// stderr, and passes the agent's pipes to the daemon unless told to relay.
func TestRelayOptions(t *testing.T) {
	st := policy.Default()
	st.Metrics.Listen = "127.0.0.1:9090"
	f := serveFlags{config: "c.json", logLevel: "debug", entry: "fp", metrics: "127.0.0.1:9090", proxyListen: "127.0.0.1:3128"}
	want := []string{"--log-level", "debug", "--entry-name", "fp", "--proxy-listen", "127.0.0.1:3128"}
	if got := daemonArgs(f, st); !slices.Equal(got, want) {
		t.Errorf("daemonArgs = %q, want %q (the metrics address is the config's)", got, want)
	}
	var stderr strings.Builder
	st.MaxMessageBytes = 1234
	o := relayOptions(f, st, t.TempDir(), "cfg@abc", &stderr, discard(), func(string) string { return "" })
	if o.Config != "cfg@abc" || o.MaxMessageBytes != 1234 || o.Stderr != &stderr || o.Dial == nil || o.WaitExit == nil || !o.PassFDs {
		t.Errorf("relayOptions = %+v", o)
	}
	env := map[string]string{attachEnv: "relay"}
	if o := relayOptions(f, st, t.TempDir(), "cfg@abc", &stderr, discard(), func(k string) string { return env[k] }); o.PassFDs {
		t.Errorf("with %s=relay, relayOptions passes the descriptors", attachEnv)
	}
}

func TestDaemonLogger(t *testing.T) {
	dir := t.TempDir()
	var fan strings.Builder
	logger, closeLog, err := daemonLogger(dir, slog.LevelInfo, &fan)
	if err != nil {
		t.Fatal(err)
	}
	logger.Debug("not at info")
	logger.Info("hello relays")
	closeLog()
	file, err := os.ReadFile(filepath.Join(dir, daemonLogName))
	if err != nil {
		t.Fatal(err)
	}
	for name, got := range map[string]string{"the log file": string(file), "the relays": fan.String()} {
		if !strings.Contains(got, "hello relays") || strings.Contains(got, "not at info") {
			t.Errorf("%s got %q", name, got)
		}
	}
	if _, _, err := daemonLogger(filepath.Join(dir, daemonLogName), slog.LevelInfo, &fan); err == nil || !strings.HasPrefix(err.Error(), "daemon log: ") {
		t.Errorf("daemon log under a file: %v, want it named", err)
	}
}

// TestLockStateFolder: one process serves a state folder; a second is told
// who holds it, and gets it once the first releases it.
func TestLockStateFolder(t *testing.T) {
	if !daemonSupported {
		t.Skip("no state folder lock on this system")
	}
	dir := t.TempDir()
	release, err := lockStateFolder(context.Background(), dir, modeHTTP)
	if err != nil {
		t.Fatal(err)
	}
	_, err = lockStateFolder(context.Background(), dir, modeStdio)
	if want := fmt.Sprintf("state folder %s is in use by foldproxy (pid %d)", dir, os.Getpid()); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("second lock: %v, want %q", err, want)
	}
	release()
	release2, err := lockStateFolder(context.Background(), dir, modeStdio)
	if err != nil {
		t.Fatalf("lock after release: %v", err)
	}
	release2()
	if _, err := lockStateFolder(context.Background(), filepath.Join(dir, "missing"), modeStdio); err == nil || !strings.Contains(err.Error(), "state folder "+filepath.Join(dir, "missing")) {
		t.Errorf("lock of a missing folder: %v, want it named", err)
	}
}

// testCoreConfig is a core of no upstreams in a new state folder, with
// scrubbing off (compiling gitleaks' rules is slow under -race).
func testCoreConfig(t *testing.T) coreConfig {
	t.Helper()
	dir := t.TempDir()
	st := policy.Default()
	st.Scrub.Disabled = true
	return coreConfig{settings: st, configDir: dir, stateDir: dir, auditPath: filepath.Join(dir, "audit.jsonl"), logger: discard()}
}

// openTestCore opens a core of testCoreConfig, closed at the test's end.
func openTestCore(t *testing.T) *serveCore {
	t.Helper()
	c, err := openCore(context.Background(), testCoreConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestOpenCore: the core opens its parts, and Close closes them: the store
// can be opened again.
func TestOpenCore(t *testing.T) {
	cc := testCoreConfig(t)
	c, err := openCore(context.Background(), cc)
	if err != nil {
		t.Fatal(err)
	}
	if c.store == nil || c.set == nil || c.scrubber == nil || c.counter == nil || c.auditor == nil || c.mem == nil || c.mgr == nil || c.srv == nil || len(c.chain) == 0 {
		t.Errorf("openCore left a part out: %+v", c)
	}
	c.Close()
	c.Close() // again: nothing left to close
	assertStoreFree(t, cc.stateDir)
}

// TestOpenCoreClosesOnFailure: a part that fails after the store opened
// leaves nothing open: the error names the part, and the store can be
// opened again.
func TestOpenCoreClosesOnFailure(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		change func(*coreConfig)
		want   string
	}{
		{"audit log under a file", func(cc *coreConfig) { cc.auditPath = filepath.Join(file, "audit.jsonl") }, "audit log " + filepath.Join(file, "audit.jsonl") + ": "},
		{"unknown tokenizer", func(cc *coreConfig) { cc.settings.Tokens.Encoding = "nope" }, "token counter: "},
		{"bad scrub setting", func(cc *coreConfig) { cc.settings.Scrub.Disabled = false; cc.settings.Scrub.ChunkBytes = -1 }, "secret scanner: scrub.chunkBytes: -1 must not be negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cc := testCoreConfig(t)
			tt.change(&cc)
			c, err := openCore(context.Background(), cc)
			if err == nil || !strings.Contains(err.Error(), tt.want) || c != nil {
				t.Fatalf("openCore = %v, %v; want %q", c, err, tt.want)
			}
			assertStoreFree(t, cc.stateDir)
		})
	}
	cc := testCoreConfig(t)
	cc.stateDir = file
	if _, err := openCore(context.Background(), cc); err == nil || !strings.Contains(err.Error(), "opening the state store in "+file) {
		t.Errorf("openCore in a state folder that is a file: %v", err)
	}
}

// assertStoreFree fails unless the state store in dir can be opened: no
// other Badger instance holds it.
func assertStoreFree(t *testing.T, dir string) {
	t.Helper()
	store, err := openStore(dir, false, discard())
	if err != nil {
		t.Fatalf("the state store is still held: %v", err)
	}
	store.Close()
}

func TestBuildScrubber(t *testing.T) {
	off := policy.Default().Scrub
	off.Disabled = true
	if s, err := buildScrubber(off, nil)(); err != nil || s == nil || !s.Disabled() {
		t.Errorf("buildScrubber(disabled) = %v, %v", s, err)
	}
	bad := policy.Default().Scrub
	bad.GitleaksConfig = filepath.Join(t.TempDir(), "missing.toml")
	if s, err := buildScrubber(bad, nil)(); err == nil || s != nil || !strings.HasPrefix(err.Error(), "secret scanner: ") || !strings.Contains(err.Error(), "missing.toml") {
		t.Errorf("buildScrubber(missing gitleaks config) = %v, %v; want the file named", s, err)
	}
}

func TestNewCounterAndOpenAuditor(t *testing.T) {
	st := policy.Default()
	if c, err := newCounter(st.Tokens); err != nil || c.CountText("hello world") != 2 {
		t.Errorf("newCounter: %v", err)
	}
	st.Tokens.Encoding = "nope"
	if _, err := newCounter(st.Tokens); err == nil || !strings.Contains(err.Error(), `token counter: `) || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("newCounter(nope): %v", err)
	}
	path := filepath.Join(t.TempDir(), "logs", "audit.jsonl")
	a, err := openAuditor(st.Audit, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	a.Close()
	if _, err := os.Stat(path); err != nil {
		t.Errorf("no audit log made: %v", err)
	}
	st.Audit.Fsync = "sometimes"
	if _, err := openAuditor(st.Audit, path, nil); err == nil || !strings.Contains(err.Error(), "audit log "+path+": audit.fsync") {
		t.Errorf("openAuditor(bad fsync): %v", err)
	}
}

// sessionsFail is a store whose sessions cannot be listed.
type sessionsFail struct{ fold.Store }

func (sessionsFail) Sessions(context.Context) ([]*fold.SessionRecord, error) {
	return nil, errors.New("disk on fire")
}

// TestNewFoldManager: after a restart, the sessions that can resume (HTTP,
// attached) keep their record when the mode resumes sessions; a plain
// stdio session's is removed, as is every one in a mode that does not.
func TestNewFoldManager(t *testing.T) {
	ctx := context.Background()
	st := policy.Default()
	counter, err := newCounter(st.Tokens)
	if err != nil {
		t.Fatal(err)
	}
	for _, resumable := range []bool{true, false} {
		store := store.NewMemStore()
		for _, rec := range []fold.SessionRecord{{ID: "s-http", Transport: "http"}, {ID: "s-stdio", Transport: "stdio"}} {
			if err := store.PutSession(ctx, &rec); err != nil {
				t.Fatal(err)
			}
		}
		mgr, err := newFoldManager(ctx, fold.Options{Settings: st.Fold, Store: store, Counter: counter, PruneInterval: -1}, resumable)
		if err != nil {
			t.Fatal(err)
		}
		_, httpErr := store.GetSession(ctx, "s-http")
		_, stdioErr := store.GetSession(ctx, "s-stdio")
		if (httpErr == nil) != resumable || stdioErr == nil {
			t.Errorf("resumable %v: the http session's record %v, the stdio one's %v", resumable, httpErr, stdioErr)
		}
		mgr.Close()
	}
	if _, err := newFoldManager(ctx, fold.Options{Settings: st.Fold, Counter: counter}, false); err == nil || !strings.HasPrefix(err.Error(), "fold manager: ") || !strings.Contains(err.Error(), "Store is nil") {
		t.Errorf("newFoldManager without a store: %v", err)
	}
	if _, err := newFoldManager(ctx, fold.Options{Settings: st.Fold, Store: sessionsFail{store.NewMemStore()}, Counter: counter, PruneInterval: -1}, false); err == nil || !strings.Contains(err.Error(), "recovering branches from the store: ") || !strings.Contains(err.Error(), "disk on fire") {
		t.Errorf("newFoldManager over a failing store: %v", err)
	}
}

// TestNewServer: the MCP front's server is built from the core's parts; a
// part missing stops it with an error naming the part.
func TestNewServer(t *testing.T) {
	c := openTestCore(t)
	srv, err := c.newServer()
	if err != nil {
		t.Fatal(err)
	}
	srv.Close()
	auditor := c.auditor
	c.auditor = nil
	defer func() { c.auditor = auditor }() // for Close
	if _, err := c.newServer(); !errors.Is(err, intercept.ErrChain) || !strings.Contains(err.Error(), "no Auditor") {
		t.Errorf("newServer without an auditor: %v", err)
	}
}

// TestListenAttach: the state folder's socket is private to the user, a
// relay of the same configuration is served on it, one of another is told
// why not, and stop closes it.
func TestListenAttach(t *testing.T) {
	if !daemonSupported {
		t.Skip("no attach socket on this system")
	}
	c := openTestCore(t)
	dir := t.TempDir()
	o := attachOptions(modeHTTP, time.Hour, "cfg@1", c.st, discard())
	if o.IdleExit >= 0 || attachOptions(modeDaemon, time.Hour, "cfg@1", c.st, discard()).IdleExit != time.Hour {
		t.Errorf("idle exit: a --listen server's must be never, the daemon's --idle-exit")
	}
	a, err := listenAttach(dir, c.srv, o)
	if err != nil {
		t.Fatal(err)
	}
	sock, _ := socketPath(dir)
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket %s: %v %v, want mode 0600", sock, fi, err)
	}
	stop := a.serveInBackground(context.Background())
	hello := func(config string) string {
		conn, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		b, _ := json.Marshal(attach.Hello{Version: attach.Version, Config: config})
		if _, err := conn.Write(append(b, '\n')); err != nil {
			t.Fatal(err)
		}
		line, _ := bufio.NewReader(conn).ReadString('\n')
		return line
	}
	if got := hello("cfg@1"); !strings.Contains(got, `"session"`) {
		t.Errorf("welcome of a relay of the same config: %q", got)
	}
	if got := hello("cfg@2"); !strings.Contains(got, "runs another configuration") {
		t.Errorf("welcome of a relay of another config: %q", got)
	}
	stop()
	if conn, err := net.Dial("unix", sock); err == nil {
		conn.Close()
		t.Error("the socket still answers after stop")
	}
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := listenAttach(file, c.srv, o); err == nil || !strings.HasPrefix(err.Error(), "attach socket: ") {
		t.Errorf("listenAttach under a file: %v, want it named", err)
	}
}

// TestServeStdio: a session is served on stdin and stdout until the agent
// closes stdin, which is not an error.
func TestServeStdio(t *testing.T) {
	c := openTestCore(t)
	in := strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}` + "\n")
	var out strings.Builder
	if err := serveStdio(context.Background(), c.srv, in, &out, 0, discard()); err != nil {
		t.Errorf("serveStdio until EOF: %v", err)
	}
	if !strings.Contains(out.String(), `"id":1`) {
		t.Errorf("stdout %q, want the ping's answer", out.String())
	}
	if err := serveStdio(context.Background(), c.srv, in, &out, -1, discard()); err == nil || !strings.Contains(err.Error(), "MaxMessageBytes -1") {
		t.Errorf("serveStdio with a negative bound: %v", err)
	}
}

// TestHTTPHandler: /healthz and /metrics sit behind the token like /mcp;
// other paths are the model front's.
func TestHTTPHandler(t *testing.T) {
	c := openTestCore(t)
	h, closeStreams, err := c.httpHandler("127.0.0.1:8080", "sekrit")
	if err != nil {
		t.Fatal(err)
	}
	defer closeStreams()
	get := func(path, token string) (int, string) {
		req := httptest.NewRequest("GET", path, nil)
		req.Host = "127.0.0.1:8080"
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
			req.Header.Set(modelfront.TokenHeader, token)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code, rec.Body.String()
	}
	if code, body := get("/healthz", "sekrit"); code != 200 || body != "ok\n" {
		t.Errorf("/healthz with the token: %d %q", code, body)
	}
	for _, path := range []string{"/healthz", "/metrics", "/mcp"} {
		if code, _ := get(path, ""); code != http.StatusUnauthorized {
			t.Errorf("%s without the token: %d, want 401", path, code)
		}
	}
	if code, body := get("/metrics", "sekrit"); code != 200 || !strings.Contains(body, "foldproxy_") {
		t.Errorf("/metrics with the token: %d %.100q", code, body)
	}
	if code, _ := get("/", "sekrit"); code != http.StatusNotFound {
		t.Errorf("/: %d, want the model front's 404", code)
	}
	c.st.Model.AnthropicURL = "::not a url"
	if _, _, err := c.httpHandler("127.0.0.1:8080", "sekrit"); err == nil || !strings.HasPrefix(err.Error(), "model front: ") {
		t.Errorf("httpHandler with a bad model URL: %v", err)
	}
}

func TestListenHTTP(t *testing.T) {
	ln, err := listenHTTP("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if _, err := listenHTTP(ln.Addr().String()); err == nil || !strings.HasPrefix(err.Error(), "--listen "+ln.Addr().String()+": ") {
		t.Errorf("listenHTTP on a port in use: %v, want it named", err)
	}
}
