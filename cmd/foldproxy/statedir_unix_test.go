//go:build unix

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The state folder is the user's own (issue 27): a folder others can read
// is made private, files in it are never opened through links.

// TestServeMakesStateFolderPrivate: a state folder that exists with mode
// 0755 is 0700 once serve has started on it.
func TestServeMakesStateFolderPrivate(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(state, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(state, 0o755); err != nil {
		t.Fatal(err)
	}
	if stderr, err := runServe(t, "--config", writeServeConfig(t, nil, nil), "--state", state, "--standalone"); err != nil {
		t.Fatalf("serve: %v\n%s", err, stderr)
	}
	if fi, err := os.Stat(state); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("the state folder after serve: %v %v, want mode 0700", fi.Mode(), err)
	}
}

// TestServeRefusesStateFolderOthersCanWrite: a folder others can write is
// refused before anything is opened in it, with the fix named.
func TestServeRefusesStateFolderOthersCanWrite(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(state, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(state, 0o777); err != nil {
		t.Fatal(err)
	}
	stderr, err := runServe(t, "--config", writeServeConfig(t, nil, nil), "--state", state, "--standalone")
	if err == nil || !strings.Contains(err.Error(), "writable by other users") || !strings.Contains(err.Error(), "chmod 700 "+state) {
		t.Fatalf("serve on a folder others can write: %v, want a refusal naming the fix\n%s", err, stderr)
	}
	if ents, _ := os.ReadDir(state); len(ents) != 0 {
		t.Errorf("serve wrote in a folder it refused: %v", ents)
	}
}

// plantLink makes name in state a link to a file that must not change.
func plantLink(t *testing.T, state, name string) (victim string) {
	t.Helper()
	victim = filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("precious\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, filepath.Join(state, name)); err != nil {
		t.Fatal(err)
	}
	return victim
}

// TestServeRefusesLinkedLock: a daemon.lock that is a link (to another
// file of the user's) is refused, and the file it points to is left whole
// (lockDaemon truncated it before).
func TestServeRefusesLinkedLock(t *testing.T) {
	state := t.TempDir()
	victim := plantLink(t, state, daemonLockName)
	_, err := runServe(t, "--config", writeServeConfig(t, nil, nil), "--state", state, "--standalone")
	if err == nil || !strings.Contains(err.Error(), filepath.Join(state, daemonLockName)+" is a symbolic link") {
		t.Errorf("serve with daemon.lock a link: %v", err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "precious\n" {
		t.Errorf("the file daemon.lock points to became %q", b)
	}
}

// TestServeRefusesLinkedAuditLog: an audit.jsonl that is a link is
// refused: no audit record goes into the file it points to.
func TestServeRefusesLinkedAuditLog(t *testing.T) {
	state := t.TempDir()
	victim := plantLink(t, state, "audit.jsonl")
	_, err := runServe(t, "--config", writeServeConfig(t, nil, nil), "--state", state, "--standalone")
	if err == nil || !strings.Contains(err.Error(), filepath.Join(state, "audit.jsonl")+" is a symbolic link") {
		t.Errorf("serve with audit.jsonl a link: %v", err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "precious\n" {
		t.Errorf("the file audit.jsonl points to became %q", b)
	}
}

// TestServeRefusesLinkedStore: the store's folder as a link elsewhere is
// refused (Badger opens its files itself: foldproxy checks the folder).
func TestServeRefusesLinkedStore(t *testing.T) {
	state := t.TempDir()
	other := t.TempDir()
	if err := os.Symlink(other, filepath.Join(state, "badger")); err != nil {
		t.Fatal(err)
	}
	_, err := runServe(t, "--config", writeServeConfig(t, nil, nil), "--state", state, "--standalone")
	if err == nil || !strings.Contains(err.Error(), "the store's folder "+filepath.Join(state, "badger")+" is a symbolic link") {
		t.Errorf("serve with the store's folder a link: %v", err)
	}
	if ents, _ := os.ReadDir(other); len(ents) != 0 {
		t.Errorf("the store was opened through the link: %v", ents)
	}
}
