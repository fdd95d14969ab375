package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/foldproxy/foldproxy/policy/statedir"
)

// Local users. A loopback listener is reachable by every user of the
// machine, not only by the one who started foldproxy. When a token is
// configured it is the key; without one, foldproxy's loopback TCP
// listeners (--listen: MCP, the model front, /metrics and /healthz;
// --metrics; --proxy-listen) serve only their own user:
//
//   - On Linux the kernel knows which user made the socket at the other
//     end of a loopback connection (tcpPeerUID: sock_diag, else
//     /proc/net/tcp). It is looked up once per connection, when its first
//     request arrives, and a connection of another user gets 403 for each
//     request.
//   - Elsewhere that is not known, so foldproxy takes a token it generates
//     at start, kept in <state>/http.token (0600) for the user's clients
//     to read, and the listeners require it as they require a configured
//     one.

// localTokenName is the file of the generated token in the state folder.
const localTokenName = "http.token"

// localAccess is how the loopback listeners tell their own user's clients
// from other local users'.
type localAccess struct {
	// guard checks each connection's user; nil when a token does it.
	guard *localUsers
	// token is the token the listeners take: the configured one, or the
	// one generated at start where there is no guard.
	token string
}

// localAccessOf decides localAccess for a process listening on the
// addresses given ("" for none), whose listeners take token ("" for none):
// a token configured is all (checkExposure requires one beyond loopback);
// without one, the user check where the system has it, else a token
// generated in the state folder dir for --listen and --proxy-listen (the
// --metrics listener takes no token).
func localAccessOf(dir, token, listen, proxyListen, metrics string, logger *slog.Logger) (localAccess, error) {
	switch {
	case token != "" || listen == "" && proxyListen == "" && metrics == "":
		return localAccess{token: token}, nil
	case tcpPeerSupported:
		return localAccess{guard: &localUsers{uid: os.Getuid(), lookup: tcpPeerUID, logger: logger}}, nil
	case listen == "" && proxyListen == "":
		return localAccess{}, nil
	}
	tok, err := localToken(dir)
	if err != nil {
		return localAccess{}, err
	}
	logger.Info("foldproxy cannot tell local users apart on this system: its loopback listeners take the token in the state folder "+
		"(Authorization: Bearer, X-Foldproxy-Token on the model front, Proxy-Authorization on the proxy)",
		"token_file", filepath.Join(dir, localTokenName))
	return localAccess{token: tok}, nil
}

// localToken returns the token kept in the state folder dir, making it
// (32 random bytes, hex, mode 0600) when there is none: clients set up
// with it go on working across restarts.
func localToken(dir string) (string, error) {
	path := filepath.Join(dir, localTokenName)
	b, err := statedir.ReadFile(path)
	if err == nil && len(strings.TrimSpace(string(b))) == 64 {
		return strings.TrimSpace(string(b)), nil
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("the local token %s: %w", path, err)
	}
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", err
	}
	tok := hex.EncodeToString(raw[:])
	f, err := statedir.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return "", fmt.Errorf("the local token %s: %w", path, err)
	}
	_, err = io.WriteString(f, tok+"\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("the local token %s: %w", path, err)
	}
	return tok, nil
}

// localUsers refuses the requests of another local user on a loopback
// listener: the user owning the peer's socket is looked up once per
// connection (lookup), when its first request arrives.
type localUsers struct {
	uid    int
	lookup func(net.Conn) (int, error)
	logger *slog.Logger
}

// peerKey is the context key of a connection's peerUser.
type peerKey struct{}

// peerUser is what is known of a connection's user, found once.
type peerUser struct {
	conn net.Conn
	once sync.Once
	uid  int
	err  error
}

// apply makes hs check the user of each connection; nil g leaves hs be.
func (g *localUsers) apply(hs *http.Server) {
	if g == nil {
		return
	}
	prev := hs.ConnContext
	hs.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		if prev != nil {
			ctx = prev(ctx, c)
		}
		return context.WithValue(ctx, peerKey{}, &peerUser{conn: c})
	}
	next := hs.Handler
	hs.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if msg := g.refusal(r.Context()); msg != "" {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.Header().Set("X-Foldproxy-Error", "1")
			w.Header().Set("Connection", "close")
			w.WriteHeader(http.StatusForbidden)
			_, _ = io.WriteString(w, msg+"\n")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// refusal is why the connection of ctx may not be served, "" when it may.
func (g *localUsers) refusal(ctx context.Context) string {
	p, _ := ctx.Value(peerKey{}).(*peerUser)
	if p == nil {
		return "foldproxy could not tell which local user this connection comes from, so it refuses it"
	}
	p.once.Do(func() {
		p.uid, p.err = g.lookup(p.conn)
		switch {
		case p.err != nil:
			g.logger.Warn("foldproxy refused a connection whose user it could not find", "remote", p.conn.RemoteAddr().String(), "err", p.err)
		case p.uid != g.uid:
			g.logger.Warn("foldproxy refused a connection of another local user", "remote", p.conn.RemoteAddr().String(), "uid", p.uid)
		}
	})
	switch {
	case p.err != nil:
		return fmt.Sprintf("foldproxy could not tell which local user this connection comes from (%v), so it refuses it: "+
			"set foldproxy.authToken (or FOLDPROXY_TOKEN) and send it instead", p.err)
	case p.uid != g.uid:
		return fmt.Sprintf("foldproxy serves only the user that started it (uid %d) on this loopback address, and this connection is uid %d's: "+
			"set foldproxy.authToken (or FOLDPROXY_TOKEN) to let other users in with the token", g.uid, p.uid)
	}
	return ""
}
