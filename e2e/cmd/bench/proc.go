package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

// startProxy runs "foldproxy serve" over stdio on a config with the given
// upstreams and bench settings, initializes it and waits until tools/list
// shows every tool named in want.
func (e *env) startProxy(ctx context.Context, name string, servers map[string]any, want ...string) (*mcpPeer, error) {
	return e.startProxyArgs(ctx, name, servers, nil, want...)
}

// startProxyArgs is startProxy with extra arguments to serve (such as
// --standalone).
func (e *env) startProxyArgs(ctx context.Context, name string, servers map[string]any, extra []string, want ...string) (*mcpPeer, error) {
	p, _, err := e.startProxyBin(ctx, name, e.proxy, servers, extra, want...)
	return p, err
}

// startProxyBin is startProxyArgs with the foldproxy binary bin, and
// returns the state folder too.
func (e *env) startProxyBin(ctx context.Context, name, bin string, servers map[string]any, extra []string, want ...string) (*mcpPeer, string, error) {
	cfg, err := e.writeConfig(name+".json", servers, benchSettings())
	if err != nil {
		return nil, "", err
	}
	state, err := e.stateDir(name)
	if err != nil {
		return nil, "", err
	}
	args := append([]string{"serve", "--config", cfg, "--state", state, "--log-level", "warn"}, extra...)
	p, err := connectStdio(ctx, "foldproxy "+name, bin, args...)
	if err != nil {
		return nil, "", err
	}
	if err := waitTools(ctx, p, want...); err != nil {
		p.close()
		return nil, "", err
	}
	return p, state, nil
}

// waitTools polls tools/list until every tool in want is listed.
func waitTools(ctx context.Context, p *mcpPeer, want ...string) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	var last []string
	for {
		names, err := listTools(ctx, p)
		if err == nil && hasAll(names, want) {
			return nil
		}
		last = names
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: tools %v not listed (have %s): %w%s", p.name, want, strings.Join(last, ", "), ctx.Err(), p.stderr.tail())
		case <-time.After(2 * time.Millisecond):
		}
	}
}

func listTools(ctx context.Context, p *mcpPeer) ([]string, error) {
	res, err := p.ListTools(ctx, mcpListToolsRequest())
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(res.Tools))
	for _, t := range res.Tools {
		names = append(names, t.Name)
	}
	return names, nil
}

func hasAll(have, want []string) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}
