// Package attach lets many stdio sessions of one project share one
// foldproxy process, the project's daemon, which owns the state store and
// the upstream processes.
//
// It owns the attach protocol on the daemon's unix socket (Hello,
// Welcome, the "#" log lines and "!exiting"), the daemon's side (Server:
// each attached stdio process is its own session of the core, over the
// socket or over the agent's own pipes) and the stdio process's side
// (Relay). On Linux the stdio process passes the agent's stdin and stdout
// to the daemon (SCM_RIGHTS) with a journal of the session in shared
// memory (journal.go), and only waits: the daemon reads and writes the
// agent's pipes itself. Elsewhere, or with FOLDPROXY_ATTACH=relay, the
// stdio process is a relay of JSON-RPC lines between the agent and the
// socket. Either way, when the daemon dies the stdio process resumes the
// session on the next daemon (proxy.TransportAttach sessions are
// resumable); from the journal it knows what the daemon read and did not
// handle (it is read again) and what it took and did not answer (answered
// with an error, or sent again when it changes nothing). A holding
// connection (Hello.Hold, what "foldproxy run" gives its agent) serves no
// session and keeps the daemon up; every welcome names the address of the
// daemon's HTTP listener, whose model front serves the project's stdio
// sessions.
//
// attach must never let the relay map the journal while the daemon serves
// the session: the relay maps it only once the daemon has given the pipes
// back or is gone. It reaches the core only through proxy's exported seam
// (proxy.Endpoint, proxy.ServeStdio, proxy.ServeAttached, proxy.Journal,
// the line reader and writer): the sessions it serves are the core's.
package attach
