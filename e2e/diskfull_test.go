//go:build linux

package e2e

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// smallDisk mounts a tmpfs of size bytes for the test, or skips it where
// mounting is not permitted.
func smallDisk(t *testing.T, size int64) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "small")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d,mode=0700", size)); err != nil {
		t.Skipf("the full-disk test mounts a small tmpfs, which is not permitted here (%v): run it as root on Linux", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}

// fillDisk writes a filler file until about leave bytes are free on dir's
// file system.
func fillDisk(t *testing.T, dir string, leave int64) {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	free := int64(st.Bavail) * st.Bsize
	f, err := os.Create(filepath.Join(dir, fmt.Sprintf("filler-%d", leave)))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := bytes.Repeat([]byte{0x5A}, 1<<20)
	for n := free - leave; n > 0; n -= int64(len(chunk)) {
		if _, err := f.Write(chunk[:min(int64(len(chunk)), n)]); err != nil {
			t.Fatalf("filling %s: %v", dir, err)
		}
	}
}

// The real binary on a state folder whose disk fills up: it keeps running,
// every call that needs the store answers with a tool error that says the
// disk is full and what to do, and the catalogue is still served; a proxy
// started on the full disk starts and says the same. (Before, Badger's
// mapped files took the process down with SIGBUS.)
func TestFullDiskStateFolder(t *testing.T) {
	disk := smallDisk(t, 160<<20)
	cfg := writeConfig(t, map[string]any{"everything": everythingStdioEntry(t)}, nil)
	start := func(name, state string) *peer {
		return connect(t, name, stdioTransport(t, name, proxyBin(t), "serve", "--config", cfg, "--state", state), nil)
	}
	ctx := testContext(t, 60*time.Second)
	p := start("foldproxy on a small disk", filepath.Join(disk, "a"))
	if text, res := p.callText(ctx, t, "everything__echo", map[string]any{"message": "before"}); res.IsError || !strings.Contains(text, "before") {
		t.Fatalf("echo before the disk filled: %q", text)
	}
	fillDisk(t, disk, 32<<20) // under the 64 MiB foldproxy keeps free
	text, res := p.callText(ctx, t, "everything__echo", map[string]any{"message": "after"})
	if !res.IsError || !strings.Contains(text, "ErrStoreFull") || !strings.Contains(text, "free some space") || !strings.Contains(text, disk) {
		t.Fatalf("echo on a full disk: isError=%v %q; want a tool error saying the disk is full and where", res.IsError, text)
	}
	t.Logf("the agent sees: %s", text)
	if tools, err := p.rawList(ctx, "tools/list", "tools"); err != nil || len(tools) == 0 {
		t.Fatalf("tools/list on a full disk: %d tools, %v", len(tools), err)
	}
	if text, res := p.callText(ctx, t, "branch_create", map[string]any{"description": "on a full disk"}); !res.IsError || !strings.Contains(text, "ErrStoreFull") {
		t.Fatalf("branch_create on a full disk: isError=%v %q", res.IsError, text)
	}

	// A second proxy starts on the full disk and says why it cannot write.
	q := start("foldproxy started on a full disk", filepath.Join(disk, "b"))
	text, res = q.callText(ctx, t, "everything__echo", map[string]any{"message": "started full"})
	if !res.IsError || !strings.Contains(text, "ErrStoreFull") || !strings.Contains(text, "cannot be written") {
		t.Fatalf("echo through a proxy started on a full disk: isError=%v %q", res.IsError, text)
	}
	// The first one is still alive.
	if _, err := p.raw(ctx, "ping", nil); err != nil {
		t.Fatalf("the first proxy after the second started: %v", err)
	}
}
