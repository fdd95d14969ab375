package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/foldproxy/foldproxy/policy"
	"github.com/foldproxy/foldproxy/upstreams"
)

func TestLoadConfigReportsEveryError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.json")
	doc := `{"mcpServers":{"a":{"command":""},"b b":{"command":"x"},"c":{"type":"http"}},` +
		`"foldproxy":{"fold":{"maxDepth":-1,"recallPageTokens":-2}},"extra":1}`
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := loadConfig(path)
	if err == nil {
		t.Fatal("loadConfig accepted a bad config")
	}
	for _, want := range []string{
		"mcpServers.a.command: a stdio server needs a command",
		`mcpServers["b b"]: a server name must match`,
		"mcpServers.c.url: an http server needs a url",
		"foldproxy.fold.maxDepth: -1 must not be negative",
		"foldproxy.fold.recallPageTokens: -2 must not be negative",
		`unknown top-level key "extra"`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if !errors.Is(err, upstreams.ErrConfig) || !errors.Is(err, policy.ErrInvalid) {
		t.Errorf("errors.Is(err, ErrConfig / ErrInvalid) = %v / %v, want both", errors.Is(err, upstreams.ErrConfig), errors.Is(err, policy.ErrInvalid))
	}
}

func TestPrepareStateDirNamesPermission(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root may write anywhere: the permission check cannot fail")
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o500); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Chmod(dir, 0o700) })
	err := prepareStateDir(dir)
	if err == nil || !strings.Contains(err.Error(), "is not writable by this user: permission denied") || strings.Contains(err.Error(), "another foldproxy") {
		t.Errorf("prepareStateDir on a read-only folder: %v, want it to name the permission", err)
	}
	if err := prepareStateDir(filepath.Join(t.TempDir(), "new", "state")); err != nil {
		t.Errorf("prepareStateDir on a new folder: %v", err)
	}
}
