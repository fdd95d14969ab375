package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Another local user (issue 27): the tests run the intruder helper under
// another uid, which needs root (or CAP_SETUID); elsewhere they are
// skipped. No such user has to exist: a uid is enough.

// otherUID is the uid the intruder runs as.
const otherUID = 4242

// intruder is the intruder helper running as another local user, and the
// lines it prints.
type intruder struct {
	cmd   *exec.Cmd
	lines chan string // closed when its output ends
}

// intruderCmd is the intruder helper with args as uid otherUID, or skips
// the test where a process cannot be started as another user.
func intruderCmd(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("running a program as another local user needs root")
	}
	// The binaries are in a folder only this user can enter: the other
	// user gets a copy in one it can.
	dir := enterableDir(t)
	b, err := os.ReadFile(helperBin(t, "intruder"))
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "intruder")
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: otherUID, Gid: otherUID}}
	return cmd
}

// runIntruder runs the intruder helper with args as uid otherUID to its
// end and returns what it printed.
func runIntruder(ctx context.Context, t *testing.T, args ...string) string {
	t.Helper()
	cmd := intruderCmd(t, args...)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Start(); err != nil {
		if errors.Is(err, syscall.EPERM) {
			t.Skipf("cannot start a process as uid %d here: %v", otherUID, err)
		}
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("intruder %v: %v\n%s", args, err, stderr.String())
		}
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		t.Fatalf("intruder %v did not end: %v", args, ctx.Err())
	}
	return out.String()
}

// startIntruder starts the intruder helper with args as uid otherUID, or
// skips the test where a process cannot be started as another user.
func startIntruder(t *testing.T, args ...string) *intruder {
	t.Helper()
	cmd := intruderCmd(t, args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	dumpOnFailure(t, "intruder stderr", stderr)
	if err := cmd.Start(); err != nil {
		if errors.Is(err, syscall.EPERM) {
			t.Skipf("cannot start a process as uid %d here: %v", otherUID, err)
		}
		t.Fatal(err)
	}
	in := &intruder{cmd: cmd, lines: make(chan string, 100)}
	go func() {
		defer close(in.lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			in.lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return in
}

// enterableDir is a new folder that other users can enter (mode 0755),
// under the system's temporary folder (t.TempDir's are private).
func enterableDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "foldproxy-localuser-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// next returns the intruder's next line, or fails the test when its
// output ends or ctx does.
func (in *intruder) next(ctx context.Context, t *testing.T) string {
	t.Helper()
	select {
	case l, ok := <-in.lines:
		if !ok {
			t.Fatal("the intruder's output ended")
		}
		return l
	case <-ctx.Done():
		t.Fatalf("waiting for the intruder: %v", ctx.Err())
	}
	return ""
}

// TestRelayRefusesPlantedSocket: another user plants foldproxy.sock in a
// state folder while it is writable by others; the folder is made private
// again (so foldproxy starts on it), the socket stays. A relay of the
// project finds it, checks who serves it, and sends it nothing: not the
// attach hello, not the agent's initialize. It says why and what to do.
func TestRelayRefusesPlantedSocket(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	state := filepath.Join(enterableDir(t), "state")
	if err := os.Mkdir(state, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(state, 0o777); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(state, "foldproxy.sock")
	in := startIntruder(t, "listen-unix", sock)
	if l := in.next(ctx, t); l != "listening" {
		t.Fatalf("the intruder says %q", l)
	}
	if err := os.Chmod(state, 0o700); err != nil {
		t.Fatal(err)
	}

	relay := exec.CommandContext(ctx, proxyBin(t), "serve", "--config", writeConfig(t, nil, nil), "--state", state)
	relay.Stdin = strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"victim","version":"1"}}}` + "\n")
	var stdout, stderr bytes.Buffer
	relay.Stdout, relay.Stderr = &stdout, &stderr
	ownProcessGroup(relay)
	relay.Cancel = func() error { return killGroup(relay) }
	done := make(chan error, 1)
	go func() { done <- relay.Run() }()

	// Every connection the relay made is closed by the time it exits;
	// the intruder reports what it read on each before it reports it
	// closed. A relay that talks to it (today's) is stopped at its first
	// byte.
	open, exited := 0, false
	for !exited || open > 0 {
		select {
		case err := <-done:
			exited = true
			if err == nil {
				t.Errorf("the relay served over the planted socket; stdout %q", stdout.String())
			}
			done = nil
		case l, ok := <-in.lines:
			switch {
			case !ok:
				t.Fatal("the intruder's output ended")
			case l == "accepted":
				open++
			case l == "closed":
				open--
			case strings.HasPrefix(l, "data "):
				_ = killGroup(relay)
				t.Fatalf("the relay sent the planted socket %s", l)
			}
		case <-ctx.Done():
			t.Fatalf("the relay did not exit: %v", ctx.Err())
		}
	}
	for _, want := range []string{sock, "is served by another user", "uid 4242", "foldproxy sent it nothing"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("the relay's error does not say %q:\n%s", want, stderr.String())
		}
	}
	if stdout.Len() != 0 {
		t.Errorf("the relay answered the agent: %q", stdout.String())
	}
}

// TestLoopbackRefusesOtherLocalUser: without a token, every loopback
// listener of foldproxy (--listen: MCP, the model front, /metrics;
// --metrics; --proxy-listen) answers another local user 403 saying why,
// while its own user is served as before.
func TestLoopbackRefusesOtherLocalUser(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	listen := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	proxyAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	metrics := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	cfg := writeConfig(t, map[string]any{}, map[string]any{"scrub": map[string]any{"disabled": true}})
	p := startProcess(t, "foldproxy", exec.Command(proxyBin(t), "serve", "--config", cfg, "--state", t.TempDir(),
		"--listen", listen, "--proxy-listen", proxyAddr, "--metrics", metrics))
	for _, a := range []string{listen, proxyAddr, metrics} {
		waitListening(ctx, t, p, a)
	}
	initialize := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`
	requests := []struct {
		name string
		args []string
	}{
		{"MCP", []string{"http", "POST", "http://" + listen + "/mcp", initialize}},
		{"model front", []string{"http", "POST", "http://" + listen + "/v1/messages", `{"model":"m","max_tokens":1,"messages":[]}`}},
		{"/metrics", []string{"http", "GET", "http://" + listen + "/metrics"}},
		{"/healthz", []string{"http", "GET", "http://" + listen + "/healthz"}},
		{"--metrics", []string{"http", "GET", "http://" + metrics + "/metrics"}},
		{"--proxy-listen", []string{"connect", proxyAddr, "api.anthropic.com:443"}},
	}
	for _, r := range requests {
		got := runIntruder(ctx, t, r.args...)
		if !strings.HasPrefix(got, "status 403\n") || !strings.Contains(got, "this connection is uid 4242's") ||
			!strings.Contains(got, "foldproxy.authToken") {
			t.Errorf("%s, another local user: %q; want 403 naming its uid and the token", r.name, truncate(got, 300))
		}
	}
	// The user's own clients: served.
	resp, err := http.Post("http://"+listen+"/mcp", "application/json", strings.NewReader(initialize))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("MCP, the user's own: HTTP %d", resp.StatusCode)
	}
	for _, u := range []string{"http://" + listen + "/metrics", "http://" + metrics + "/metrics"} {
		resp, err := http.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("%s, the user's own: HTTP %d", u, resp.StatusCode)
		}
	}
	c, err := net.Dial("tcp", proxyAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "CONNECT api.anthropic.com:443 HTTP/1.1\r\nHost: api.anthropic.com:443\r\n\r\n")
	line, _ := bufio.NewReader(c).ReadString('\n')
	if !strings.HasPrefix(line, "HTTP/1.1 200") {
		t.Errorf("CONNECT, the user's own: %q", line)
	}
}
