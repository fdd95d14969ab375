package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The official MCP conformance suite (@modelcontextprotocol/conformance,
// pinned in package.json; it needs Node 22) runs against mcp-go's reference
// conformance server once directly and once through foldproxy's HTTP front.
// A scenario that passes directly must pass through the proxy.
//
// Result format (as mcp-go's scripts/check_conformance.py reads it): each
// scenario writes <output-dir>/server-<scenario>-<timestamp>/checks.json, a
// list of checks; a scenario passes when there is at least one check and
// every check's status is SUCCESS or INFO.

// conformanceRetries is how many times a known-flaky scenario that failed
// is run again on its own (--scenario) before it counts as failed.
const conformanceRetries = 10

// knownFlakyFallback is mcp-go's conformance/server/expected-failures.yml
// at v1.2.1, used if the file cannot be read from the module cache.
var knownFlakyFallback = []string{"tools-call-with-logging", "tools-call-with-progress"}

var resultDir = regexp.MustCompile(`^server-(.+)-\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}(?:-\d{3})?Z$`)

var activeCount = regexp.MustCompile(`Running active suite \((\d+) scenarios?\)`)

// suiteResult is one run of the conformance CLI.
type suiteResult struct {
	passed map[string]bool // scenario → passed
	want   int             // scenarios the CLI said it would run; -1 if unknown
}

// runConformance runs the suite (or one scenario) against url.
func runConformance(ctx context.Context, t *testing.T, url, scenario string) suiteResult {
	t.Helper()
	out := t.TempDir()
	args := []string{npmScript(t, "@modelcontextprotocol/conformance", "dist/index.js"), "server", "--url", url, "--output-dir", out}
	if scenario != "" {
		args = append(args, "--scenario", scenario)
	}
	runCtx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(runCtx, nodeBin(t), args...)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "CI=true", "NO_COLOR=1")
	ownProcessGroup(cmd)
	cmd.Cancel = func() error { return killGroup(cmd) }
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	err := cmd.Run() // a non-zero status only says some check failed
	if runCtx.Err() != nil {
		t.Fatalf("conformance CLI against %s did not finish: %v\n%s", url, runCtx.Err(), truncate(buf.String(), 4000))
	}
	res := suiteResult{passed: map[string]bool{}, want: -1}
	if m := activeCount.FindStringSubmatch(buf.String()); m != nil {
		res.want, _ = strconv.Atoi(m[1])
	}
	entries, rerr := os.ReadDir(out)
	if rerr != nil {
		t.Fatalf("reading conformance results in %s: %v", out, rerr)
	}
	for _, e := range entries {
		m := resultDir.FindStringSubmatch(e.Name())
		if m == nil {
			continue
		}
		b, rerr := os.ReadFile(filepath.Join(out, e.Name(), "checks.json"))
		if rerr != nil {
			t.Fatalf("scenario %s: %v", m[1], rerr)
		}
		var checks []struct {
			Status string `json:"status"`
		}
		if err := json.Unmarshal(b, &checks); err != nil {
			t.Fatalf("scenario %s: checks.json: %v", m[1], err)
		}
		ok := len(checks) > 0
		for _, c := range checks {
			ok = ok && (c.Status == "SUCCESS" || c.Status == "INFO")
		}
		res.passed[m[1]] = ok
	}
	if len(res.passed) == 0 {
		t.Fatalf("the conformance CLI against %s produced no results (exit %v):\n%s", url, err, truncate(buf.String(), 4000))
	}
	return res
}

// runConformanceWithRetries runs the whole suite, then reruns each failed
// scenario that retry allows, up to conformanceRetries times.
func runConformanceWithRetries(ctx context.Context, t *testing.T, url string, retry func(scenario string) bool) (map[string]bool, map[string]int) {
	t.Helper()
	res := runConformance(ctx, t, url, "")
	if res.want >= 0 && len(res.passed) != res.want {
		t.Errorf("the suite announced %d scenarios against %s but wrote %d results", res.want, url, len(res.passed))
	}
	tries := map[string]int{}
	for name, ok := range res.passed {
		tries[name] = 1
		if ok || !retry(name) {
			continue
		}
		for !res.passed[name] && tries[name] <= conformanceRetries {
			tries[name]++
			one := runConformance(ctx, t, url, name)
			res.passed[name] = one.passed[name]
		}
	}
	return res.passed, tries
}

// knownFlaky reads mcp-go's list of intermittent server scenarios.
func knownFlaky(t *testing.T) []string {
	t.Helper()
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/mark3labs/mcp-go")
	cmd.Dir = repoDir
	out, err := cmd.Output()
	if err != nil {
		t.Logf("locating mcp-go (%v): using the built-in list of flaky scenarios", err)
		return knownFlakyFallback
	}
	b, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(out)), "conformance", "server", "expected-failures.yml"))
	if err != nil {
		t.Logf("reading mcp-go's expected failures (%v): using the built-in list", err)
		return knownFlakyFallback
	}
	var names []string
	inServer := false
	for _, line := range strings.Split(string(b), "\n") {
		if line != "" && line[0] != ' ' && line[0] != '\t' {
			inServer = strings.TrimSpace(line) == "server:"
		} else if s := strings.TrimSpace(line); inServer && strings.HasPrefix(s, "- ") {
			names = append(names, strings.TrimSpace(s[2:]))
		}
	}
	if len(names) == 0 {
		return knownFlakyFallback
	}
	return names
}

// startConformanceServer builds mcp-go's reference conformance server from
// the module cache and serves it on a free loopback port; it returns the
// MCP URL.
func startConformanceServer(ctx context.Context, t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "conformance-server")
	if err := goBuild(ctx, bin, "github.com/mark3labs/mcp-go/examples/conformance"); err != nil {
		t.Fatalf("building mcp-go's conformance server: %v", err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "CONFORMANCE_ADDR="+addr)
	p := startProcess(t, "mcp-go conformance server", cmd)
	waitListening(ctx, t, p, addr)
	return "http://" + addr + "/mcp"
}

// buildGoSDKConformanceServer builds the official Go SDK's conformance
// server (go.mod's tool line pins it) and returns the binary. Run bare, it
// serves stdio; with -http ADDR -stateless=false, stateful streamable HTTP.
func buildGoSDKConformanceServer(ctx context.Context, t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "everything-server")
	if err := goBuild(ctx, bin, "github.com/modelcontextprotocol/go-sdk/conformance/everything-server"); err != nil {
		t.Fatalf("building the Go SDK's conformance server: %v", err)
	}
	return bin
}

// startGoSDKConformanceServer serves bin over stateful streamable HTTP on
// a free loopback port and returns the MCP URL.
func startGoSDKConformanceServer(ctx context.Context, t *testing.T, bin string) string {
	t.Helper()
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	p := startProcess(t, "go-sdk conformance server", exec.Command(bin, "-http", addr, "-stateless=false"))
	waitListening(ctx, t, p, addr)
	return "http://" + addr + "/mcp"
}

// The suite runs against two reference servers no one here wrote.
//
// mcp-go's drops a tool's last notification now and then (its
// expected-failures.yml: the notification forwarder takes it off the
// session's channel after the response has been written and has nowhere
// to put it). Those scenarios are retried, and one that still fails
// through foldproxy is reported but is no regression by itself: under load
// the drop happens on nearly every run, directly too.
//
// The Go SDK's server drops nothing (its baseline lists no server
// failures), so every scenario that passes directly must pass through
// foldproxy, with the server as an HTTP upstream and as a stdio upstream;
// this is where logging and progress notifications are held to it.
func TestConformance(t *testing.T) {
	ctx := testContext(t, 12*time.Minute)

	t.Run("mcp-go", func(t *testing.T) {
		url := startConformanceServer(ctx, t)
		flaky := knownFlaky(t)
		retry := func(name string) bool { return slices.Contains(flaky, name) }
		direct := conformanceDirect(ctx, t, url, retry)
		cfg := writeConfig(t, map[string]any{"conformance": urlEntry("http", url)},
			map[string]any{"upstreams": map[string]any{"conformance": map[string]any{"prefix": ""}}})
		conformanceProxied(ctx, t, "an HTTP upstream", cfg, direct, retry, func(name string) bool {
			if slices.Contains(flaky, name) {
				t.Logf("%s failed through foldproxy in %d runs: mcp-go's server drops notifications in it (the go-sdk subtest holds foldproxy to it)", name, conformanceRetries+1)
				return false
			}
			return true
		})
	})

	t.Run("go-sdk", func(t *testing.T) {
		bin := buildGoSDKConformanceServer(ctx, t)
		url := startGoSDKConformanceServer(ctx, t, bin)
		// Nothing is known to be flaky here; a failure is run again a few
		// times only so that a machine's hiccup is told from a regression,
		// and the retries are logged.
		retry := func(string) bool { return true }
		direct := conformanceDirect(ctx, t, url, retry)
		settings := map[string]any{"upstreams": map[string]any{"conformance": map[string]any{"prefix": ""}}}
		always := func(string) bool { return true }
		cfg := writeConfig(t, map[string]any{"conformance": urlEntry("http", url)}, settings)
		conformanceProxied(ctx, t, "an HTTP upstream", cfg, direct, retry, always)
		cfg = writeConfig(t, map[string]any{"conformance": stdioEntry(bin)}, settings)
		conformanceProxied(ctx, t, "a stdio upstream", cfg, direct, retry, always)
	})
}

// conformanceDirect runs the suite against url and returns which scenarios
// pass. A scenario that fails and that retry does not excuse is an error.
func conformanceDirect(ctx context.Context, t *testing.T, url string, retry func(string) bool) map[string]bool {
	t.Helper()
	start := time.Now()
	passed, tries := runConformanceWithRetries(ctx, t, url, retry)
	n := 0
	for name, ok := range passed {
		if ok {
			n++
		} else if !retry(name) {
			t.Errorf("scenario %s fails against the reference server directly", name)
		}
	}
	t.Logf("direct: %d of %d scenarios pass against %s (%s, retries: %v)", n, len(passed), url, time.Since(start).Round(time.Millisecond), retried(tries))
	if n == 0 {
		t.Fatalf("no scenario passes directly against %s", url)
	}
	return passed
}

// conformanceProxied serves cfg with foldproxy's HTTP front, runs the suite
// through it and compares with direct: a scenario that passes directly and
// fails through foldproxy is an error when regression says so.
func conformanceProxied(ctx context.Context, t *testing.T, name, cfg string, direct map[string]bool, retry, regression func(string) bool) {
	t.Helper()
	purl, _ := startProxyHTTPProcess(t, cfg)
	start := time.Now()
	proxied, tries := runConformanceWithRetries(ctx, t, purl, retry)
	var names []string
	for name := range direct {
		names = append(names, name)
	}
	for name := range proxied {
		if _, ok := direct[name]; !ok {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	var table strings.Builder
	fmt.Fprintf(&table, "%-36s %-8s %-8s\n", "scenario", "direct", "proxied")
	mark := func(m map[string]bool, name string) string {
		ok, present := m[name]
		switch {
		case !present:
			return "-"
		case ok:
			return "pass"
		default:
			return "FAIL"
		}
	}
	var regressions []string
	for _, name := range names {
		fmt.Fprintf(&table, "%-36s %-8s %-8s\n", name, mark(direct, name), mark(proxied, name))
		if direct[name] && !proxied[name] && regression(name) {
			regressions = append(regressions, name)
		}
	}
	t.Logf("conformance, direct vs through foldproxy with %s (%s, retries: %v):\n%s", name, time.Since(start).Round(time.Millisecond), retried(tries), table.String())
	if len(regressions) > 0 {
		t.Errorf("with %s, %d scenarios pass directly but fail through foldproxy: %s", name, len(regressions), strings.Join(regressions, ", "))
	}
}

// retried lists the scenarios that needed more than one run.
func retried(tries map[string]int) map[string]int {
	out := map[string]int{}
	for name, n := range tries {
		if n > 1 {
			out[name] = n
		}
	}
	return out
}
