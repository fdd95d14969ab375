package e2e

// foldproxy run: the agent runs in foldproxy's place with the daemon up,
// its exit status and the signals sent to it are its own, and a daemon
// that cannot start is reported before the agent runs.

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// runProject is a project folder with a foldproxy.json of no upstreams
// and the given settings.
func runProject(t *testing.T, settings string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "foldproxy.json"), []byte(`{"mcpServers":{},"foldproxy":`+settings+`}`), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { waitNoDaemon(testContext(t, 60*time.Second), t, filepath.Join(dir, ".foldproxy")) })
	return dir
}

// foldproxyRun is "foldproxy run -- bash -c script" in dir, its stdout a
// pipe, started in its own process group.
func foldproxyRun(t *testing.T, dir, script string) (*exec.Cmd, *bufio.Reader, *syncBuffer) {
	t.Helper()
	cmd := exec.Command(proxyBin(t), "run", "--", "bash", "-c", script)
	cmd.Dir = dir
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	ownProcessGroup(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = killGroup(cmd); _ = cmd.Wait() })
	return cmd, bufio.NewReader(stdout), stderr
}

// TestRunPassesTheExitStatus: the agent's exit status is foldproxy run's;
// it ran with the daemon's model front in OPENAI_BASE_URL, reachable.
func TestRunPassesTheExitStatus(t *testing.T) {
	dir := runProject(t, `{}`)
	// The agent checks the daemon answers on the base URL it was given
	// (bash's /dev/tcp: no curl needed), then exits 7.
	cmd, out, stderr := foldproxyRun(t, dir,
		`echo "$OPENAI_BASE_URL"; hp=${ANTHROPIC_BASE_URL#http://}; exec 3<>/dev/tcp/${hp%:*}/${hp#*:} && printf 'GET /healthz HTTP/1.0\r\nHost: %s\r\n\r\n' "$hp" >&3 && cat <&3; exit 7`)
	all, _ := io.ReadAll(out)
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 7 {
		t.Fatalf("foldproxy run: %v, want exit status 7\nstdout:\n%s\nstderr:\n%s", err, all, stderr.String())
	}
	lines := strings.SplitN(string(all), "\n", 2)
	if !strings.HasPrefix(lines[0], "http://127.0.0.1:") || !strings.HasSuffix(lines[0], "/v1") {
		t.Errorf("OPENAI_BASE_URL = %q, want the daemon's loopback front", lines[0])
	}
	if len(lines) < 2 || !strings.Contains(lines[1], "200 OK") || !strings.HasSuffix(lines[1], "ok\n") {
		t.Errorf("the daemon's /healthz from the agent: %q", all)
	}
}

// TestRunForwardsSignals: SIGINT and SIGTERM sent to foldproxy run reach
// the agent (which is what runs in its place), and the exit status its
// handler chose comes back.
func TestRunForwardsSignals(t *testing.T) {
	for _, tc := range []struct {
		sig  syscall.Signal
		name string
		code int
	}{{syscall.SIGINT, "INT", 130}, {syscall.SIGTERM, "TERM", 143}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := runProject(t, `{}`)
			cmd, out, stderr := foldproxyRun(t, dir,
				`trap 'echo got-INT; exit 130' INT; trap 'echo got-TERM; exit 143' TERM; echo ready; while :; do sleep 0.05; done`)
			line, err := out.ReadString('\n')
			if err != nil || line != "ready\n" {
				t.Fatalf("the agent did not start: %q, %v\nstderr:\n%s", line, err, stderr.String())
			}
			if err := cmd.Process.Signal(tc.sig); err != nil {
				t.Fatal(err)
			}
			rest, _ := io.ReadAll(out)
			err = cmd.Wait()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != tc.code || string(rest) != "got-"+tc.name+"\n" {
				t.Errorf("after SIG%s: %v, output %q; want the agent's handler to run and exit %d", tc.name, err, rest, tc.code)
			}
		})
	}
}

// TestRunDaemonCannotStart: a daemon that cannot start (its fixed
// daemonListen port is taken) is reported before the agent runs, and the
// agent never runs.
func TestRunDaemonCannotStart(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	dir := runProject(t, `{"daemonListen":"`+taken.Addr().String()+`"}`)
	cmd, out, stderr := foldproxyRun(t, dir, `touch agent-ran; echo ran`)
	all, _ := io.ReadAll(out)
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("foldproxy run: %v, want exit status 1\nstdout: %s\nstderr: %s", err, all, stderr.String())
	}
	msg := stderr.String()
	for _, want := range []string{"daemon did not start", "daemonListen " + taken.Addr().String(), "address already in use", "the agent was not started"} {
		if !strings.Contains(msg, want) {
			t.Errorf("stderr does not say %q:\n%s", want, msg)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "agent-ran")); !errors.Is(err, os.ErrNotExist) || len(all) != 0 {
		t.Errorf("the agent ran (%v, stdout %q)", err, all)
	}
}
