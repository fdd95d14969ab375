package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// No credential of an upstream reaches the agent or a log (issue 27): an
// HTTP upstream whose URL carries a password and an api_key, with a bearer
// header, and a stdio upstream with a token in its environment that it
// prints on its stderr, both down and retried.
var upstreamSecrets = []string{"pa55wordZ", "KEYVALUE123", "HEADERTOKEN42", "ENVSECRET99"}

func credentialConfig(t *testing.T) string {
	t.Helper()
	port := freePort(t) // closed: the upstream is down and retried
	return writeConfig(t, map[string]any{
		"web": map[string]any{
			"type":    "http",
			"url":     fmt.Sprintf("http://alice:pa55wordZ@127.0.0.1:%d/mcp?api_key=KEYVALUE123&x=1", port),
			"headers": map[string]any{"Authorization": "Bearer HEADERTOKEN42"},
		},
		"tool": map[string]any{
			"command": "sh",
			"args":    []any{"-c", "echo my token is $SERVICE_TOKEN >&2; exit 3"},
			"env":     map[string]any{"SERVICE_TOKEN": "ENVSECRET99"},
		},
	}, map[string]any{"scrub": map[string]any{"disabled": true}})
}

// lineWaiter collects a process's stderr lines and wakes who waits for one.
type lineWaiter struct {
	lines chan string
	all   strings.Builder
}

func watchLines(r io.Reader) *lineWaiter {
	w := &lineWaiter{lines: make(chan string, 1000)}
	go func() {
		defer close(w.lines)
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			w.lines <- sc.Text()
		}
	}()
	return w
}

// waitFor reads lines until each of wants has been seen n times.
func (w *lineWaiter) waitFor(ctx context.Context, t *testing.T, n int, wants ...string) {
	t.Helper()
	seen := map[string]int{}
	done := func() bool {
		for _, x := range wants {
			if seen[x] < n {
				return false
			}
		}
		return true
	}
	for !done() {
		select {
		case l, ok := <-w.lines:
			if !ok {
				t.Fatalf("the output ended before %q was seen %d times:\n%s", wants, n, w.all.String())
			}
			w.all.WriteString(l + "\n")
			for _, x := range wants {
				if strings.Contains(l, x) {
					seen[x]++
				}
			}
		case <-ctx.Done():
			t.Fatalf("waiting for %q: %v\n%s", wants, ctx.Err(), w.all.String())
		}
	}
}

// rest reads the remaining lines (the output has ended).
func (w *lineWaiter) rest() string {
	for l := range w.lines {
		w.all.WriteString(l + "\n")
	}
	return w.all.String()
}

func assertNoSecret(t *testing.T, where, text string) {
	t.Helper()
	for _, s := range upstreamSecrets {
		if strings.Contains(text, s) {
			i := strings.Index(text, s)
			t.Errorf("%s holds the upstream credential %q: ...%s...", where, s, text[max(0, i-150):min(len(text), i+50)])
		}
	}
}

// TestUpstreamCredentialsNeverWritten: the instructions, branch_status,
// the retry log lines and the upstream's stderr on foldproxy's stderr, the
// audit log (standalone), and the daemon's foldproxy.log and what the
// relay copies of it (default mode) hold none of the credentials.
func TestUpstreamCredentialsNeverWritten(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	cfg := credentialConfig(t)

	t.Run("standalone", func(t *testing.T) {
		state := t.TempDir()
		cmd := exec.CommandContext(ctx, proxyBin(t), "serve", "--config", cfg, "--state", state, "--standalone")
		stdin, _ := cmd.StdinPipe()
		stdout, _ := cmd.StdoutPipe()
		stderr, _ := cmd.StderrPipe()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		errs := watchLines(stderr)
		// Two failed attempts each: the first and a retry.
		errs.waitFor(ctx, t, 2, `failed to start" upstream=web`, `failed to start" upstream=tool`)
		errs.waitFor(ctx, t, 1, "my token is")
		out := bufio.NewReader(stdout)
		send := func(msg string) {
			t.Helper()
			if _, err := io.WriteString(stdin, msg+"\n"); err != nil {
				t.Fatal(err)
			}
		}
		read := func() string {
			t.Helper()
			l, err := out.ReadString('\n')
			if err != nil {
				t.Fatalf("reading an answer: %v", err)
			}
			return l
		}
		send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
		initAnswer := read()
		send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
		send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"branch_status","arguments":{}}}`)
		status := read()
		stdin.Close()
		rest := errs.rest()
		_ = cmd.Wait()
		// web is retried with backoff: the initialize may meet it between
		// two attempts ("down: why") or in one ("starting: why"); either
		// way the instructions say why, redacted.
		why := strings.Contains(initAnswer, "web (down: ") || strings.Contains(initAnswer, "web (starting: ")
		if !why || !strings.Contains(initAnswer, "[REDACTED:credential]") {
			t.Errorf("the instructions do not say why web is down, redacted: %s", initAnswer)
		}
		assertNoSecret(t, "the instructions", initAnswer)
		assertNoSecret(t, "branch_status", status)
		assertNoSecret(t, "stderr", rest)
		audit, err := os.ReadFile(filepath.Join(state, "audit.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		assertNoSecret(t, "audit.jsonl", string(audit))
	})

	t.Run("daemon", func(t *testing.T) {
		state := t.TempDir()
		cmd := exec.CommandContext(ctx, proxyBin(t), "serve", "--config", cfg, "--state", state)
		ownProcessGroup(cmd)
		cmd.Cancel = func() error { return killGroup(cmd) }
		stdin, _ := cmd.StdinPipe()
		stderr, _ := cmd.StderrPipe()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = killGroup(cmd); _ = cmd.Wait() })
		errs := watchLines(stderr)
		// The daemon's records reach the relay once it is attached: wait
		// for a retry of each upstream there.
		errs.waitFor(ctx, t, 1, `failed to start" upstream=web`, `failed to start" upstream=tool`)
		stdin.Close()
		rest := errs.rest()
		_ = cmd.Wait()
		assertNoSecret(t, "the relay's stderr", rest)
		log, err := os.ReadFile(filepath.Join(state, "foldproxy.log"))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(log), "upstream failed to start") {
			t.Errorf("foldproxy.log has no retry line to check:\n%s", log)
		}
		assertNoSecret(t, "foldproxy.log", string(log))
	})
}
