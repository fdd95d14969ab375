package attach

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// fakeDaemon is the daemon's end of the attach protocol, for Relay's tests:
// each accepted connection is handed to the test after the welcome.
type fakeDaemon struct {
	ln    net.Listener
	conns chan *daemonConn
}

type daemonConn struct {
	c     net.Conn
	br    *bufio.Reader
	hello Hello
}

func newFakeDaemon(t *testing.T) *fakeDaemon {
	t.Helper()
	ln, err := net.Listen("unix", filepath.Join(t.TempDir(), "d.sock"))
	if err != nil {
		t.Fatal(err)
	}
	d := &fakeDaemon{ln: ln, conns: make(chan *daemonConn, 4)}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			br := bufio.NewReader(c)
			line, err := br.ReadBytes('\n')
			if err != nil {
				c.Close()
				continue
			}
			var h Hello
			if err := json.Unmarshal(line, &h); err != nil {
				c.Close()
				continue
			}
			if _, err := io.WriteString(c, `{"session":"s-1","pid":1}`+"\n"); err != nil {
				c.Close()
				continue
			}
			d.conns <- &daemonConn{c: c, br: br, hello: h}
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return d
}

func (d *fakeDaemon) dial(ctx context.Context) (net.Conn, error) {
	var dl net.Dialer
	return dl.DialContext(ctx, "unix", d.ln.Addr().String())
}

// line reads one line the relay sent, without its line break.
func (c *daemonConn) line(t *testing.T) string {
	t.Helper()
	s, err := c.br.ReadString('\n')
	if err != nil {
		t.Fatalf("daemon: reading from the relay: %v (got %q)", err, s)
	}
	return strings.TrimSuffix(s, "\n")
}

// relayRun starts Relay on pipes and returns the agent's ends.
type relayRun struct {
	stdin  *io.PipeWriter
	stdout *bufio.Reader
	stderr *syncBuffer
	done   chan error
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func startRelay(t *testing.T, d *fakeDaemon) *relayRun {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	r := &relayRun{stdin: inW, stdout: bufio.NewReader(outR), stderr: &syncBuffer{}, done: make(chan error, 1)}
	go func() {
		r.done <- Relay(context.Background(), inR, outW, RelayOptions{Dial: d.dial, Config: "cfg", Stderr: r.stderr})
		outW.Close()
	}()
	t.Cleanup(func() { inW.Close(); outR.Close() })
	return r
}

func (r *relayRun) send(t *testing.T, line string) {
	t.Helper()
	if _, err := io.WriteString(r.stdin, line+"\n"); err != nil {
		t.Fatalf("writing to the relay's stdin: %v", err)
	}
}

func (r *relayRun) next(t *testing.T) string {
	t.Helper()
	s, err := r.stdout.ReadString('\n')
	if err != nil {
		t.Fatalf("reading the relay's stdout: %v (got %q)", err, s)
	}
	return s
}

// The relay copies lines both ways byte for byte, log records to stderr,
// and returns once stdin has ended and the daemon has closed.
func TestRelayCopiesLinesAsTheyCome(t *testing.T) {
	d := newFakeDaemon(t)
	r := startRelay(t, d)
	c := <-d.conns
	if c.hello.Version != Version || c.hello.Config != "cfg" || c.hello.Session != "" {
		t.Fatalf("hello %+v", c.hello)
	}
	// What the agent sends goes to the daemon as it is: not re-encoded,
	// not validated (the daemon answers what is wrong with it).
	for _, in := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","arguments":{"x":"<&> é \u00e9"}}}`,
		`{ "method" : "notifications/initialized" , "jsonrpc":"2.0" }`,
		`not json at all`,
		`[{"jsonrpc":"2.0","id":"b1","method":"ping"},{"jsonrpc":"2.0","id":"b2","method":"ping"}]`,
	} {
		r.send(t, in)
		if got := c.line(t); got != in {
			t.Errorf("daemon got %q, want %q", got, in)
		}
	}
	// What the daemon writes reaches the agent as it is, log records go
	// to stderr, and a line longer than the relay's buffer is whole.
	long := `{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"` + strings.Repeat("y", 200<<10) + `"}]}}`
	for _, out := range []string{
		`{"jsonrpc":"2.0","id":1,"result":{"a":"<&> é \u00e9","n":1.50}}`,
		long,
		`[{"jsonrpc":"2.0","id":"b1","result":{}},{"jsonrpc":"2.0","id":"b2","result":{}}]`,
	} {
		if _, err := io.WriteString(c.c, "#a log record\n"+out+"\n"); err != nil {
			t.Fatal(err)
		}
		if got := r.next(t); got != out+"\n" {
			t.Errorf("agent got %.200q, want %.200q", got, out)
		}
	}
	r.stdin.Close()
	if _, err := c.br.ReadByte(); err != io.EOF {
		t.Errorf("the daemon's connection was not closed for writing at the end of stdin: %v", err)
	}
	c.c.Close()
	if err := <-r.done; err != nil {
		t.Errorf("Relay: %v", err)
	}
	if got, want := r.stderr.String(), strings.Repeat("a log record\n", 3); got != want {
		t.Errorf("stderr %q, want %q", got, want)
	}
}

// When the daemon goes away, the relay resumes the session with the next
// one: the requests in flight that change nothing are sent again, in
// order, and the others answered with an error.
func TestRelayResumesAfterTheDaemonWentAway(t *testing.T) {
	d := newFakeDaemon(t)
	r := startRelay(t, d)
	c := <-d.conns
	sent := []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`,
		`{"jsonrpc":"2.0","id":"two","method":"tools/call","params":{"name":"a"}}`,
		`{"jsonrpc":"2.0","id":3,"method":"ping"}`,
		`{"jsonrpc":"2.0","id":4,"method":"ping"}`,
	}
	for _, in := range sent {
		r.send(t, in)
		if got := c.line(t); got != in {
			t.Fatalf("daemon got %q, want %q", got, in)
		}
	}
	// 3 is answered before the daemon goes.
	if _, err := io.WriteString(c.c, `{"jsonrpc":"2.0","id":3,"result":{}}`+"\n"); err != nil {
		t.Fatal(err)
	}
	if got := r.next(t); got != `{"jsonrpc":"2.0","id":3,"result":{}}`+"\n" {
		t.Fatalf("agent got %q", got)
	}
	c.c.Close()

	c2 := <-d.conns
	if c2.hello.Session != "s-1" {
		t.Errorf("the new hello resumes %q, want s-1", c2.hello.Session)
	}
	if got := r.next(t); !strings.Contains(got, `"id":"two"`) || !strings.Contains(got, "may or may not have been carried out") {
		t.Errorf("the tools/call in flight was answered with %q", got)
	}
	for _, want := range []string{sent[0], sent[3]} {
		if got := c2.line(t); got != want {
			t.Errorf("the new daemon got %q, want %q", got, want)
		}
	}
	// As a daemon does: it closes once the relay has closed for writing.
	r.stdin.Close()
	if _, err := c2.br.ReadByte(); err != io.EOF {
		t.Errorf("the daemon's connection was not closed for writing at the end of stdin: %v", err)
	}
	c2.c.Close()
	if err := <-r.done; err != nil {
		t.Errorf("Relay: %v", err)
	}
}

func TestRelayRequestOf(t *testing.T) {
	for _, c := range []struct {
		line, id, method string
	}{
		{`{"jsonrpc":"2.0","id":1,"method":"ping"}`, `1`, "ping"},
		{` {"method":"tools\/list","id":"a\"b"} `, `"a\"b"`, "tools/list"},
		{`{"id":1,"method":"ping","id":-2.5}`, `-2.5`, "ping"},
		{`{"jsonrpc":"2.0","method":"notifications/initialized"}`, "", ""},
		{`{"jsonrpc":"2.0","id":1,"result":{}}`, "", ""},
		{`{"jsonrpc":"2.0","id":null,"method":"ping"}`, "", ""},
		{`{"jsonrpc":"2.0","id":{},"method":"ping"}`, "", ""},
		{`{"jsonrpc":"2.0","id":1,"method":7}`, "", ""},
		{`{"jsonrpc":"2.0","id":1,"method":"ping"`, "", ""},
		{`[{"jsonrpc":"2.0","id":1,"method":"ping"}]`, "", ""},
		{`nonsense`, "", ""},
	} {
		id, method, ok := relayRequestOf([]byte(c.line))
		if ok != (c.id != "") || string(id) != c.id || method != c.method {
			t.Errorf("relayRequestOf(%s) = %s, %q, %v; want %s, %q", c.line, id, method, ok, c.id, c.method)
		}
	}
}

// A holding connection (Hello.Hold) is welcomed with the daemon's
// HTTP address, gets no log records, keeps a daemon that exits when idle
// up while it is open, and lets it exit once closed.
func TestAttachHoldKeepsTheDaemonUp(t *testing.T) {
	ln, err := net.Listen("unix", filepath.Join(t.TempDir(), "d.sock"))
	if err != nil {
		t.Fatal(err)
	}
	a := NewServer(nil, Options{Config: "cfg", IdleExit: 0, HTTP: func() string { return "127.0.0.1:4321" }})
	served := make(chan error, 1)
	go func() { served <- a.Serve(context.Background(), ln) }()
	c, err := net.Dial("unix", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, `{"foldproxyAttach":1,"config":"cfg","hold":true}`+"\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	line, err := br.ReadBytes('\n')
	if err != nil {
		t.Fatal(err)
	}
	var w Welcome
	if err := json.Unmarshal(line, &w); err != nil || w.HTTP != "127.0.0.1:4321" || w.Error != "" || w.Session != "" {
		t.Fatalf("welcome %s (%v): want the HTTP address, no session, no error", line, err)
	}
	if _, err := a.Write([]byte("level=INFO msg=hello\n")); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-served:
		t.Fatalf("the server stopped while held: %v", err)
	default:
	}
	// The hold ends with the peer's side: the server detaches it, and
	// exits as the last attachment is gone.
	if err := c.(*net.UnixConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if err := <-served; err != nil {
		t.Fatalf("Serve after the hold ended: %v", err)
	}
	rest, _ := io.ReadAll(br)
	if len(rest) != 0 {
		t.Errorf("the holding connection got %q after its welcome, want nothing", rest)
	}
}
