package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// fastEntry is an mcpServers entry running the fast server.
func (e *env) fastEntry() map[string]any {
	return map[string]any{"command": e.fast, "args": []string{"-data", e.data}}
}

// startFastProxy runs foldproxy (the binary bin) over stdio in front of
// the fast server, with extra arguments and environment, driven by a raw
// client, and waits until it lists fast__emit.
func (e *env) startFastProxy(ctx context.Context, name, bin string, extra, env []string) (*rawPeer, string, error) {
	cfg, err := e.writeConfig(name+".json", map[string]any{"fast": e.fastEntry()}, benchSettings())
	if err != nil {
		return nil, "", err
	}
	state, err := e.stateDir(name)
	if err != nil {
		return nil, "", err
	}
	args := append([]string{"serve", "--config", cfg, "--state", state, "--log-level", "warn"}, extra...)
	p, err := startRaw(ctx, "foldproxy "+name, env, bin, args...)
	if err != nil {
		return nil, "", err
	}
	if err := p.waitTool(ctx, "fast__emit"); err != nil {
		p.close()
		return nil, "", err
	}
	return p, state, nil
}

// runProfile makes calls tools/call of size bytes through foldproxy in
// front of the fast server, every foldproxy process writing a CPU profile
// of its life into out (FOLDPROXY_CPUPROFILE), and prints the CPU time
// each process used per call.
func runProfile(ctx context.Context, e *env, bin string, size, calls int, out string, extra []string) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	out, _ = filepath.Abs(out)
	p, state, err := e.startFastProxy(ctx, "profile", bin, extra, []string{"FOLDPROXY_CPUPROFILE=" + filepath.Join(out, "cpu-%p.prof")})
	if err != nil {
		return err
	}
	defer p.close()
	for range max(calls/10, 3) {
		if err := p.call(ctx, "fast__emit", size); err != nil {
			return err
		}
	}
	pids := proxyPIDs(p.pid(), state)
	c0 := cpuOf(pids)
	t0 := time.Now()
	for range calls {
		if err := p.call(ctx, "fast__emit", size); err != nil {
			return err
		}
	}
	wall := time.Since(t0)
	c1 := cpuOf(pids)
	fmt.Printf("%d calls of %d bytes: %.3f ms a call (wall); CPU a call: ", calls, size, msf(wall)/float64(calls))
	for i, pid := range pids {
		fmt.Printf("pid %d %.3f ms  ", pid, msf(c1[i]-c0[i])/float64(calls))
	}
	fmt.Println()
	p.close()
	fmt.Println("profiles in", out)
	return nil
}
