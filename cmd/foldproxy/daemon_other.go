//go:build !unix

package main

import (
	"context"
	"errors"
	"net"
	"os"
	"time"
)

// Without unix sockets and flock, each stdio process serves in-process
// (one process per state folder at a time).
const daemonSupported = false

// daemonLogName is the daemon's log in the state folder (daemon_unix.go).
const daemonLogName = "foldproxy.log"

var errNoDaemon = errors.New("the shared daemon needs a unix system")

func configIdentity(path string) (string, error) { return path, nil }
func lockDaemon(context.Context, string, time.Duration) (func(), error) {
	return func() {}, nil
}
func waitDaemonExit(context.Context, string) error { return nil }
func listenSocket(string) (net.Listener, string, error) {
	return nil, "", errNoDaemon
}
func dialDaemon(context.Context, string, string, []string) (net.Conn, error) {
	return nil, errNoDaemon
}
func openDaemonLog(string) (*os.File, error) { return nil, errNoDaemon }
func readyPipe(int) *os.File                 { return nil }

func execAgent(string, []string, []string, net.Conn) error { return errNoDaemon }
