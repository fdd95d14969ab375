//go:build unix

package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/foldproxy/foldproxy/policy/statedir"
)

// Many sessions, one project. Every agent session starts its own
// "foldproxy serve" over stdio, and all of them share the project's state
// folder. The first one starts a daemon ("foldproxy serve --daemon", in its
// own session so that the agent ending one session does not take it down)
// that owns the state store and the upstream processes; every stdio process
// is a thin relay that attaches to the daemon's unix socket and is served as
// its own session (attach.Relay, attach.Server). The files, all in the
// state folder:
//
//	daemon.lock    held (flock) by the daemon for its whole life, with its pid
//	spawn.lock     held by a relay while it starts a daemon, so that one starts
//	foldproxy.sock the daemon's socket, mode 0600, in a 0700 folder
//	foldproxy.log  the daemon's log (also copied to every relay's stderr)
//
// The folder is the user's own (statedir.Prepare, at start), every file in
// it is opened without following links (statedir.OpenFile), and a relay
// talks to the socket only once the peer's credentials say it runs as the
// relay's own user (checkPeer): a socket someone else left there gets
// nothing.
//
// A socket left by a daemon that died is stale: the next daemon holds the
// lock, so it removes it and listens anew. When the daemon dies while
// relays are attached, each relay starts or finds the next daemon and
// resumes its session there; the daemon exits when its last session ends.
const daemonSupported = true

const (
	daemonLockName = "daemon.lock"
	spawnLockName  = "spawn.lock"
	socketName     = "foldproxy.sock"
	daemonLogName  = "foldproxy.log"
)

// socketPath returns where the daemon of state folder dir listens: in the
// folder, or, when that path is too long for a unix socket (about 104
// bytes), in a private folder of the user's under the temporary folder.
func socketPath(dir string) (string, error) {
	p := filepath.Join(dir, socketName)
	if len(p) < 100 {
		return p, nil
	}
	sum := sha256.Sum256([]byte(dir))
	base := filepath.Join(os.TempDir(), "foldproxy-"+strconv.Itoa(os.Getuid()))
	if err := os.MkdirAll(base, 0o700); err != nil {
		return "", fmt.Errorf("socket folder: %w", err)
	}
	fi, err := os.Lstat(base)
	if err != nil {
		return "", fmt.Errorf("socket folder: %w", err)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !ok || !fi.IsDir() || int(st.Uid) != os.Getuid() || fi.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("socket folder %s is not a private folder of this user's: remove it, or use a shorter --state path", base)
	}
	return filepath.Join(base, hex.EncodeToString(sum[:8])+".sock"), nil
}

// configIdentity names a configuration: its absolute path and a digest of
// its bytes, so that a relay of an edited config is not served by a daemon
// of the old one.
func configIdentity(path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	data, err := os.ReadFile(abs)
	if err != nil {
		return "", fmt.Errorf("reading config: %w", err)
	}
	sum := sha256.Sum256(data)
	return abs + "@" + hex.EncodeToString(sum[:6]), nil
}

// flockWait takes a lock on f (how: syscall.LOCK_EX or LOCK_SH), trying
// until ctx ends.
func flockWait(ctx context.Context, f *os.File, how int) error {
	for {
		err := syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB)
		if err == nil {
			return nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// lockDaemon takes the daemon lock of dir, waiting up to wait for a daemon
// that is exiting, and writes this process's pid in it. The lock is held
// until release or the process's end.
func lockDaemon(ctx context.Context, dir string, wait time.Duration) (release func(), err error) {
	path := filepath.Join(dir, daemonLockName)
	f, err := statedir.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("state folder %s: %w", dir, err)
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if err := flockWait(wctx, f, syscall.LOCK_EX); err != nil {
		f.Close()
		holder := "another foldproxy"
		if b, rerr := statedir.ReadFile(path); rerr == nil && len(strings.TrimSpace(string(b))) > 0 {
			holder = "foldproxy (pid " + strings.TrimSpace(string(b)) + ")"
		}
		if errors.Is(err, context.DeadlineExceeded) {
			return nil, fmt.Errorf("state folder %s is in use by %s: stop it, or give this one another --state", dir, holder)
		}
		return nil, fmt.Errorf("locking state folder %s: %w", dir, err)
	}
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return func() {
		_ = f.Truncate(0)
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}

// waitDaemonExit waits until no daemon holds dir's lock (bounded).
func waitDaemonExit(ctx context.Context, dir string) error {
	f, err := statedir.OpenFile(filepath.Join(dir, daemonLockName), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := flockWait(wctx, f, syscall.LOCK_SH); err != nil {
		return fmt.Errorf("waiting for the foldproxy daemon of %s to exit: %w", dir, err)
	}
	return syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
}

// listenSocket listens on the daemon's socket; the caller holds the daemon
// lock, so a socket file already there is stale.
func listenSocket(dir string) (net.Listener, string, error) {
	sock, err := socketPath(dir)
	if err != nil {
		return nil, "", err
	}
	if err := os.Remove(sock); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, "", fmt.Errorf("removing the stale socket %s: %w", sock, err)
	}
	old := syscall.Umask(0o077)
	ln, err := net.Listen("unix", sock)
	syscall.Umask(old)
	if err != nil {
		return nil, "", fmt.Errorf("listening on %s: %w", sock, err)
	}
	if err := os.Chmod(sock, 0o600); err != nil {
		ln.Close()
		return nil, "", err
	}
	return ln, sock, nil
}

// dialDaemon connects to the daemon of state folder dir, starting one when
// none answers. Relays that start at the same moment take turns (the spawn
// lock), so that one daemon starts.
func dialDaemon(ctx context.Context, dir, configPath string, extraArgs []string) (net.Conn, error) {
	sock, err := socketPath(dir)
	if err != nil {
		return nil, err
	}
	if c, err := dialOwn(ctx, sock); err == nil || errors.Is(err, errForeignPeer) {
		return c, err
	}
	lf, err := statedir.OpenFile(filepath.Join(dir, spawnLockName), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("state folder %s: %w", dir, err)
	}
	defer lf.Close()
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := flockWait(sctx, lf, syscall.LOCK_EX); err != nil {
		return nil, fmt.Errorf("waiting for another foldproxy to start the daemon of %s: %w", dir, err)
	}
	defer syscall.Flock(int(lf.Fd()), syscall.LOCK_UN)
	if c, err := dialOwn(ctx, sock); err == nil || errors.Is(err, errForeignPeer) {
		return c, err
	}
	if err := spawnDaemon(sctx, dir, configPath, extraArgs); err != nil {
		return nil, err
	}
	c, err := dialOwn(ctx, sock)
	if err != nil && !errors.Is(err, errForeignPeer) {
		return nil, fmt.Errorf("the foldproxy daemon started but does not answer on %s: %w", sock, err)
	}
	return c, err
}

// errForeignPeer is wrapped by dialOwn's error for a socket served by
// another user's process.
var errForeignPeer = errors.New("the socket is served by another user")

// dialOwn connects to the daemon's socket and checks, before anything is
// sent, that the process serving it runs as this user (checkPeer): a
// socket that another user planted in the state folder, or in the folder
// of long socket paths, gets nothing of the agent's session.
func dialOwn(ctx context.Context, sock string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", sock)
	if err != nil {
		return nil, err
	}
	if err := checkPeer(c); err != nil {
		c.Close()
		return nil, fmt.Errorf("%w: %s (%v); foldproxy sent it nothing: remove the socket, and check who can write its folder", errForeignPeer, sock, err)
	}
	return c, nil
}

// spawnDaemon starts "foldproxy serve --daemon" detached from this
// process's session, and waits until it says it is ready, or why it is not.
func spawnDaemon(ctx context.Context, dir, configPath string, extraArgs []string) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding foldproxy's own binary to start the daemon: %w", err)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return err
	}
	defer pr.Close()
	if configPath, err = filepath.Abs(configPath); err != nil {
		return err
	}
	args := append([]string{"serve", "--config", configPath, "--state", dir, "--daemon", "--ready-fd", "3"}, extraArgs...)
	cmd := exec.Command(exe, args...)
	cmd.ExtraFiles = []*os.File{pw}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	// The daemon runs the upstreams: it keeps the working directory of the
	// relay that starts it (the project, where Claude Code starts MCP
	// servers), so relative commands and arguments in the config resolve
	// as they would without foldproxy.
	cmd.Dir = "/"
	if wd, err := os.Getwd(); err == nil {
		cmd.Dir = wd
	}
	if err := cmd.Start(); err != nil {
		pw.Close()
		return fmt.Errorf("starting the foldproxy daemon: %w", err)
	}
	pw.Close()
	go func() { _ = cmd.Wait() }() // reap it if it exits while this relay lives
	type answer struct {
		msg []byte
		err error
	}
	// One line: "ready", or why not. Not until EOF: the daemon's upstream
	// processes could hold the pipe open.
	done := make(chan answer, 1)
	go func() {
		b, err := bufio.NewReader(io.LimitReader(pr, 64<<10)).ReadString('\n')
		if err == io.EOF {
			err = nil
		}
		done <- answer{[]byte(b), err}
	}()
	select {
	case a := <-done:
		msg := strings.TrimSpace(string(a.msg))
		if msg == "ready" {
			return nil
		}
		if msg == "" {
			msg = "it exited without saying why; see " + filepath.Join(dir, daemonLogName)
		}
		return fmt.Errorf("the foldproxy daemon did not start: %s", msg)
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		return fmt.Errorf("the foldproxy daemon did not become ready: %w (see %s)", ctx.Err(), filepath.Join(dir, daemonLogName))
	}
}

// openDaemonLog opens the daemon's log file for appending (0600), moving a
// log past 16 MiB aside first.
func openDaemonLog(dir string) (*os.File, error) {
	path := filepath.Join(dir, daemonLogName)
	if fi, err := os.Lstat(path); err == nil && fi.Mode().IsRegular() && fi.Size() > 16<<20 {
		_ = os.Rename(path, path+".1")
	}
	return statedir.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
}

// readyPipe returns the pipe on which a daemon reports that it is ready.
func readyPipe(fd int) *os.File {
	if fd <= 0 {
		return nil
	}
	// Not inherited by the upstream processes the daemon starts.
	syscall.CloseOnExec(fd)
	return os.NewFile(uintptr(fd), "ready")
}

// execAgent replaces this process with the agent (foldproxy run): path
// with argv and env, keeping hold (the daemon's holding connection) open
// across the exec so that the daemon stays up for the agent's life.
func execAgent(path string, argv, env []string, hold net.Conn) error {
	uc, ok := hold.(*net.UnixConn)
	if !ok {
		return fmt.Errorf("holding the daemon: not a unix socket connection")
	}
	f, err := uc.File() // a duplicate, close-on-exec
	if err != nil {
		return fmt.Errorf("holding the daemon: %w", err)
	}
	if _, _, e := syscall.Syscall(syscall.SYS_FCNTL, f.Fd(), syscall.F_SETFD, 0); e != 0 {
		return fmt.Errorf("holding the daemon: %w", e)
	}
	err = syscall.Exec(path, argv, env)
	runtime.KeepAlive(f) // its finalizer would close the descriptor
	return fmt.Errorf("running %s: %w", path, err)
}
