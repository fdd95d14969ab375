package e2e

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestStateFolderRemoved: a foldproxy whose state folder is removed while
// it serves (a test's temporary folder removed under it, a user's rm -rf)
// exits when its session ends, with an error naming the folder. Before,
// its store's close retried writing into the missing folder once a second,
// forever, and the process never exited.
func TestStateFolderRemoved(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	cfg := foldProxyConfig(t, map[string]any{"replay": replayEntry(t)}, map[string]any{"defaultTimeout": "120s"}, false)
	state := t.TempDir()

	p, k := startKillableProxy(t, "foldproxy stdio (state folder removed)", cfg, state)
	foldWaitTools(ctx, t, p, "replay__emit")
	var br foldCreated
	foldMust(ctx, t, p, "branch_create", map[string]any{"description": "work in a folder about to go", "budget": 6000}, &br)
	if r := foldCall(ctx, t, p, "replay__emit", map[string]any{"bytes": 1500, "kind": "code"}); r.isError {
		t.Fatalf("emit in the branch: %s", r.text())
	}
	if err := os.RemoveAll(state); err != nil {
		t.Fatal(err)
	}
	// Closing the client ends the session (stdin closes) and waits for
	// the process.
	err := p.Close()
	<-k.done
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() == 0 {
		t.Errorf("foldproxy's exit after its state folder was removed: %v; want a failure", err)
	}
	if out := k.stderr.String(); !strings.Contains(out, state) || !strings.Contains(out, "was removed") {
		t.Errorf("foldproxy's stderr does not say its state folder %s was removed:\n%s", state, out)
	}
}
