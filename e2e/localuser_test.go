package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
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

// startIntruder starts the intruder helper with args as uid otherUID, or
// skips the test where a process cannot be started as another user.
func startIntruder(t *testing.T, args ...string) *intruder {
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
