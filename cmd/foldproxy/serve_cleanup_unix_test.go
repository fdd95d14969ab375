//go:build unix

package main

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// The tests of Run's cleanup: a step that fails after earlier steps opened
// the state folder's lock, the store, the attach socket and the upstream
// processes leaves none of them open.

// runServe runs "foldproxy serve" with args in this process and returns
// its stderr and error.
func runServe(t *testing.T, args ...string) (stderrText string, err error) {
	t.Helper()
	t.Setenv("FOLDPROXY_TOKEN", "")
	var stdout, stderr strings.Builder
	c := &serveCommand{stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr}
	err = c.Run(context.Background(), args)
	if stdout.Len() != 0 {
		t.Errorf("serve wrote to stdout: %q", stdout.String())
	}
	return stderr.String(), err
}

// writeServeConfig writes a configuration of servers with scrubbing off
// (compiling gitleaks' rules is slow under -race) and the settings given.
func writeServeConfig(t *testing.T, servers map[string]any, settings map[string]any) string {
	t.Helper()
	fp := map[string]any{"scrub": map[string]any{"disabled": true}}
	for k, v := range settings {
		fp[k] = v
	}
	b, err := json.Marshal(map[string]any{"mcpServers": servers, "foldproxy": fp})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "mcp.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// assertStateFolderFree fails unless a second foldproxy could serve state
// folder dir: its lock can be taken and its store opened.
func assertStateFolderFree(t *testing.T, dir string) {
	t.Helper()
	release, err := lockStateFolder(context.Background(), dir, modeStdio)
	if err != nil {
		t.Fatalf("the state folder's lock is still held: %v", err)
	}
	defer release()
	assertStoreFree(t, dir)
}

// TestRunClosesOnListenFailure: --listen on a port in use fails after the
// lock, the store and the attach socket were opened: the error names the
// address, and all three are closed, so that a second attempt can open
// them.
func TestRunClosesOnListenFailure(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	state := t.TempDir()
	stderr, err := runServe(t, "--config", writeServeConfig(t, nil, nil), "--state", state, "--listen", busy.Addr().String())
	if err == nil || !strings.HasPrefix(err.Error(), "--listen "+busy.Addr().String()+": ") || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("serve on a port in use: %v, want the address named; stderr:\n%s", err, stderr)
	}
	if !strings.Contains(stderr, "foldproxy attach socket") {
		t.Errorf("the attach socket was not opened before the failure, so its cleanup is not tested; stderr:\n%s", stderr)
	}
	assertStateFolderFree(t, state)
	sock, err := socketPath(state)
	if err != nil {
		t.Fatal(err)
	}
	if conn, err := net.Dial("unix", sock); err == nil {
		conn.Close()
		t.Error("the attach socket still answers after serve failed")
	}
}

// TestRunClosesUpstreamsOnFailure: a step that fails once an upstream
// process runs ends that process. The upstream itself unblocks the failing
// step: it writes the forward proxy's extra roots file (a named pipe that
// the step reads) with something that is not PEM, so that serve fails
// after the upstream started, whatever the timing.
func TestRunClosesUpstreamsOnFailure(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "roots.pem")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	pidFile := filepath.Join(dir, "upstream.pid")
	script := filepath.Join(dir, "upstream.sh")
	body := "#!/bin/sh\necho $$ > '" + pidFile + "'\necho not-pem > '" + fifo + "'\nexec cat >/dev/null\n"
	if err := os.WriteFile(script, []byte(body), 0o700); err != nil {
		t.Fatal(err)
	}
	cfg := writeServeConfig(t, map[string]any{"up": map[string]any{"command": script}},
		map[string]any{"proxy": map[string]any{"extraRootsFile": fifo}})
	state := t.TempDir()
	stderr, err := runServe(t, "--config", cfg, "--state", state, "--standalone", "--proxy-listen", "127.0.0.1:0")
	if err == nil || !strings.Contains(err.Error(), "extraRootsFile "+fifo+": no PEM certificate") {
		t.Fatalf("serve with roots that are not PEM: %v; stderr:\n%s", err, stderr)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatalf("the upstream wrote no pid: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("the upstream process %d is still there after serve failed (kill -0: %v)", pid, err)
	}
	assertStateFolderFree(t, state)
}
