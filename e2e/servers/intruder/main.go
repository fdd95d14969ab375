// Command intruder is another local user's program in the tests of issue
// 27: the e2e tests run it under another uid (syscall.Credential) to show
// that foldproxy gives such a user nothing.
//
//	intruder listen-unix PATH        listen on a unix socket planted at PATH
//	intruder http METHOD URL [BODY]  send one HTTP request to foldproxy
//	intruder connect PROXY HOST:PORT send CONNECT HOST:PORT to the proxy at PROXY
//
// listen-unix prints "listening" once it listens, then "accepted" for each
// connection and "data <quoted bytes>" for everything it reads, until it
// is killed. http and connect print "status <code>" and then the body.
package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
)

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: intruder listen-unix PATH | intruder http METHOD URL [BODY]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "listen-unix":
		err = listenUnix(os.Args[2])
	case "http":
		if len(os.Args) < 4 {
			err = fmt.Errorf("http needs METHOD and URL")
			break
		}
		body := ""
		if len(os.Args) > 4 {
			body = os.Args[4]
		}
		err = request(os.Args[2], os.Args[3], body)
	case "connect":
		if len(os.Args) < 4 {
			err = fmt.Errorf("connect needs PROXY and HOST:PORT")
			break
		}
		err = connect(os.Args[2], os.Args[3])
	default:
		err = fmt.Errorf("unknown mode %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "intruder:", err)
		os.Exit(1)
	}
}

// say prints one line at once (the test reads them as events).
func say(format string, args ...any) {
	_, _ = os.Stdout.WriteString(fmt.Sprintf(format, args...) + "\n")
}

func listenUnix(path string) error {
	ln, err := net.Listen("unix", path)
	if err != nil {
		return err
	}
	if err := os.Chmod(path, 0o777); err != nil {
		return err
	}
	say("listening")
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		say("accepted")
		go func() {
			defer c.Close()
			buf := make([]byte, 64<<10)
			for {
				n, err := c.Read(buf)
				if n > 0 {
					say("data %q", buf[:n])
					// Answer as a daemon would, so that a client that
					// talks to it goes on talking.
					_, _ = c.Write([]byte(`{"jsonrpc":"2.0","id":1,"result":{}}` + "\n"))
				}
				if err != nil {
					say("closed")
					return
				}
			}
		}()
	}
}

func request(method, url, body string) error {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		return err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	say("status %d", resp.StatusCode)
	_, _ = os.Stdout.Write(b)
	return nil
}

func connect(proxy, target string) error {
	c, err := net.Dial("tcp", proxy)
	if err != nil {
		return err
	}
	defer c.Close()
	req, err := http.NewRequest(http.MethodConnect, "http://"+target, nil)
	if err != nil {
		return err
	}
	req.Host = target
	if err := req.Write(c); err != nil {
		return err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), req)
	if err != nil {
		return err
	}
	say("status %d", resp.StatusCode)
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		_, _ = os.Stdout.Write(b)
	}
	return nil
}
