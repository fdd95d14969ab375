package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// The golden exchanges in testdata/exchanges/*.txtar check that foldproxy
// relays an upstream's JSON-RPC byte for byte: results, notifications,
// server-to-client requests and the agent's answers to them, and errors
// with data, each with what JSON encoders change (an integer beyond 2^53,
// <&>, key order, odd whitespace, unicode escapes). The real binary runs
// against the script helper server (servers/script), which writes exactly
// the bytes of the exchange's "upstream" section, over every pair of front
// (stdio, streamable HTTP) and upstream transport (stdio, streamable HTTP,
// legacy HTTP+SSE).
//
// An exchange file has these sections:
//
//	-- call --     the agent's request (one line; its tool is script__<file name>)
//	-- answers --  the agent's answers to foldproxy's requests, in order;
//	               ${id} is the id of the request answered
//	-- upstream -- what the upstream writes for the call (see servers/script):
//	               ${id}, ${progressToken}, and "<" to wait for an answer, ${got}
//	-- want --     every message the agent received, one a line, up to and
//	               including the response to its call; the ids of foldproxy's
//	               own requests read "fp-*"
//
// The only edits foldproxy makes are documented ones: the id of the
// response is the agent's, a progress token is the agent's, the id of a
// request to the agent is foldproxy's. go test ./e2e -run TestGoldenExchanges
// -update rewrites the want sections from what the stdio front received.
var updateGolden = flag.Bool("update", false, "rewrite the want sections of testdata/exchanges/*.txtar")

// exchange is one parsed golden file.
type exchange struct {
	name, path string
	comment    string
	call       string
	answers    []string
	upstream   []string
	want       string
}

// parseTxtar splits a txtar archive into its comment and its named files.
func parseTxtar(data string) (comment string, files map[string]string, order []string) {
	files = map[string]string{}
	cur := ""
	var b strings.Builder
	flush := func() {
		if cur == "" {
			comment = b.String()
		} else {
			files[cur] = b.String()
		}
		b.Reset()
	}
	for _, line := range strings.SplitAfter(data, "\n") {
		t := strings.TrimRight(line, "\n")
		if strings.HasPrefix(t, "-- ") && strings.HasSuffix(t, " --") && len(t) > 6 {
			flush()
			cur = strings.TrimSpace(t[3 : len(t)-3])
			order = append(order, cur)
			continue
		}
		b.WriteString(line)
	}
	flush()
	return comment, files, order
}

// lines returns the non-empty lines of a section.
func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.TrimSpace(l) != "" {
			out = append(out, l)
		}
	}
	return out
}

func loadExchanges(t *testing.T) []*exchange {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(e2eDir, "testdata", "exchanges", "*.txtar"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no golden exchanges in testdata/exchanges (%v)", err)
	}
	var out []*exchange
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		comment, files, _ := parseTxtar(string(data))
		ex := &exchange{
			name: strings.TrimSuffix(filepath.Base(p), ".txtar"), path: p, comment: comment,
			call:     strings.TrimSpace(files["call"]),
			answers:  lines(files["answers"]),
			upstream: lines(files["upstream"]),
			want:     files["want"],
		}
		if ex.call == "" || len(ex.upstream) == 0 {
			t.Fatalf("%s: the call and upstream sections are required", p)
		}
		out = append(out, ex)
	}
	return out
}

// write rewrites the exchange's file with want as its want section.
func (ex *exchange) write(want string) error {
	var b strings.Builder
	b.WriteString(ex.comment)
	b.WriteString("-- call --\n" + ex.call + "\n")
	if len(ex.answers) > 0 {
		b.WriteString("-- answers --\n" + strings.Join(ex.answers, "\n") + "\n")
	}
	b.WriteString("-- upstream --\n" + strings.Join(ex.upstream, "\n") + "\n")
	b.WriteString("-- want --\n" + want)
	return os.WriteFile(ex.path, []byte(b.String()), 0o644)
}

// rawAgent is an agent that speaks raw JSON-RPC lines to foldproxy, so
// that what it receives is compared byte for byte.
type rawAgent interface {
	send(ctx context.Context, msg string) error
	recv(ctx context.Context) (string, error)
}

// stdioAgent runs foldproxy on stdio.
type stdioAgent struct {
	in  io.Writer
	got chan string
}

func startStdioAgent(t *testing.T, cfg string, env ...string) *stdioAgent {
	t.Helper()
	state := t.TempDir()
	// The relay's daemon (in a session of its own, outside the process
	// group that cleanup kills) still closes its store when the relay is
	// gone: wait for it before the state folder is removed (cleanups run
	// last first).
	t.Cleanup(func() { waitNoDaemon(testContext(t, 60*time.Second), t, state) })
	cmd := exec.Command(proxyBin(t), "serve", "--config", cfg, "--state", state)
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	startProcess(t, "foldproxy stdio", cmd)
	a := &stdioAgent{in: stdin, got: make(chan string, 64)}
	go func() {
		r := bufio.NewReaderSize(stdout, 1<<20)
		for {
			line, err := r.ReadString('\n')
			if l := strings.TrimRight(line, "\n"); l != "" {
				a.got <- l
			}
			if err != nil {
				close(a.got)
				return
			}
		}
	}()
	t.Cleanup(func() { stdin.Close() })
	return a
}

func (a *stdioAgent) send(_ context.Context, msg string) error {
	_, err := io.WriteString(a.in, msg+"\n")
	return err
}

func (a *stdioAgent) recv(ctx context.Context) (string, error) {
	select {
	case l, ok := <-a.got:
		if !ok {
			return "", io.EOF
		}
		return l, nil
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// httpAgent speaks to foldproxy's streamable HTTP front: each message is
// POSTed; what comes back (a JSON body or an event stream) is received.
type httpAgent struct {
	url     string
	mu      sync.Mutex
	session string
	got     chan string
	wg      sync.WaitGroup
}

func (a *httpAgent) send(ctx context.Context, msg string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.url, strings.NewReader(msg))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", protocolVersion)
	a.mu.Lock()
	if a.session != "" {
		req.Header.Set("Mcp-Session-Id", a.session)
	}
	a.mu.Unlock()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	if sid := resp.Header.Get("Mcp-Session-Id"); sid != "" {
		a.mu.Lock()
		a.session = sid
		a.mu.Unlock()
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	switch {
	case resp.StatusCode == http.StatusAccepted:
		resp.Body.Close()
	case resp.StatusCode != http.StatusOK:
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return fmt.Errorf("POST %s: %s: %s", msg, resp.Status, b)
	case mt == "application/json":
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		a.got <- string(b)
	case mt == "text/event-stream":
		a.wg.Go(func() {
			defer resp.Body.Close()
			r := bufio.NewReaderSize(resp.Body, 1<<20)
			var data []string
			for {
				line, err := r.ReadString('\n')
				line = strings.TrimRight(line, "\r\n")
				switch {
				case line == "" && len(data) > 0:
					a.got <- strings.Join(data, "\n")
					data = nil
				case strings.HasPrefix(line, "data:"):
					data = append(data, strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " "))
				}
				if err != nil {
					return
				}
			}
		})
	default:
		resp.Body.Close()
		return fmt.Errorf("POST: content type %q", mt)
	}
	return nil
}

func (a *httpAgent) recv(ctx context.Context) (string, error) {
	select {
	case l := <-a.got:
		return l, nil
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// message is what the agent reads of a message it received.
type message struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
}

// until receives until the response with id arrives, answering requests
// from foldproxy with answers (each may hold ${id}) on the way; it returns
// every message received, the response last.
func until(ctx context.Context, a rawAgent, id string, answers []string) ([]string, error) {
	var got []string
	for {
		l, err := a.recv(ctx)
		if err != nil {
			return got, fmt.Errorf("waiting for the response to %s: %w (received so far: %q)", id, err, got)
		}
		var m message
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			return got, fmt.Errorf("received a line that is not JSON: %q: %w", l, err)
		}
		if strings.HasSuffix(m.Method, "/list_changed") {
			continue // an upstream (re)connecting: not part of the exchange
		}
		got = append(got, l)
		switch {
		case m.Method == "" && string(m.ID) == id:
			return got, nil
		case m.Method != "" && len(m.ID) > 0:
			if len(answers) == 0 {
				return got, fmt.Errorf("foldproxy sent a request and the exchange has no answer left: %s", l)
			}
			ans := strings.ReplaceAll(answers[0], "${id}", string(m.ID))
			answers = answers[1:]
			if err := a.send(ctx, ans); err != nil {
				return got, err
			}
		}
	}
}

// handshake initializes the session with the capabilities the exchanges
// need and waits until the upstream's tools are listed.
func handshake(ctx context.Context, a rawAgent) error {
	if err := a.send(ctx, `{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"`+protocolVersion+`","capabilities":{"sampling":{},"elicitation":{},"roots":{"listChanged":true}},"clientInfo":{"name":"golden","version":"1"}}}`); err != nil {
		return err
	}
	if _, err := until(ctx, a, `"init"`, nil); err != nil {
		return err
	}
	if err := a.send(ctx, `{"jsonrpc":"2.0","method":"notifications/initialized"}`); err != nil {
		return err
	}
	if err := a.send(ctx, `{"jsonrpc":"2.0","id":"list","method":"tools/list"}`); err != nil {
		return err
	}
	got, err := until(ctx, a, `"list"`, nil)
	if err != nil {
		return err
	}
	if !strings.Contains(got[len(got)-1], `"script__`) {
		return fmt.Errorf("tools/list does not list the script server's tools: %s", got[len(got)-1])
	}
	return nil
}

// fpID is the form of the ids of foldproxy's own requests to the agent.
var fpID = regexp.MustCompile(`"fp-[0-9a-f]+"`)

func TestGoldenExchanges(t *testing.T) {
	exchanges := loadExchanges(t)
	scripts := map[string][]string{}
	for _, ex := range exchanges {
		scripts[ex.name] = ex.upstream
	}
	b, err := json.Marshal(scripts)
	if err != nil {
		t.Fatal(err)
	}
	scriptFile := writeFile(t, "script.json", b)
	bin := helperBin(t, "script")

	upstreams := map[string]func(t *testing.T) map[string]any{
		"stdio": func(t *testing.T) map[string]any { return stdioEntry(bin, "--script", scriptFile) },
		"http": func(t *testing.T) map[string]any {
			port := freePort(t)
			addr := fmt.Sprintf("127.0.0.1:%d", port)
			p := startProcess(t, "script --listen", exec.Command(bin, "--script", scriptFile, "--listen", addr))
			waitListening(testContext(t, 30*time.Second), t, p, addr)
			return urlEntry("http", "http://"+addr+"/mcp")
		},
		"sse": func(t *testing.T) map[string]any {
			port := freePort(t)
			addr := fmt.Sprintf("127.0.0.1:%d", port)
			p := startProcess(t, "script --listen --sse", exec.Command(bin, "--script", scriptFile, "--listen", addr, "--sse"))
			waitListening(testContext(t, 30*time.Second), t, p, addr)
			return urlEntry("sse", "http://"+addr+"/sse")
		},
	}
	fronts := map[string]func(t *testing.T, cfg string) rawAgent{
		// The default: the daemon serves the agent's pipes itself.
		"stdio": func(t *testing.T, cfg string) rawAgent { return startStdioAgent(t, cfg) },
		// The stdio process relays every line to the daemon.
		"stdio-relay": func(t *testing.T, cfg string) rawAgent { return startStdioAgent(t, cfg, "FOLDPROXY_ATTACH=relay") },
		"http": func(t *testing.T, cfg string) rawAgent {
			url, _ := startProxyHTTPProcess(t, cfg)
			a := &httpAgent{url: url, got: make(chan string, 64)}
			t.Cleanup(a.wg.Wait)
			return a
		},
	}
	updated := map[string]bool{}
	for _, front := range []string{"stdio", "stdio-relay", "http"} {
		for _, up := range []string{"stdio", "http", "sse"} {
			t.Run(front+"-front/"+up+"-upstream", func(t *testing.T) {
				if !*updateGolden {
					// -update writes from the first pair and compares
					// the others with it, in order.
					t.Parallel()
				}
				ctx := testContext(t, 60*time.Second)
				cfg := writeConfig(t, map[string]any{"script": upstreams[up](t)}, nil)
				a := fronts[front](t, cfg)
				if err := handshake(ctx, a); err != nil {
					t.Fatalf("handshake: %v", err)
				}
				for i, ex := range exchanges {
					id := fmt.Sprintf(`"x%d"`, i)
					call := strings.Replace(ex.call, `"id":"x"`, `"id":`+id, 1)
					if call == ex.call {
						t.Fatalf("%s: the call's id must be \"x\"", ex.name)
					}
					if err := a.send(ctx, call); err != nil {
						t.Fatalf("%s: sending the call: %v", ex.name, err)
					}
					got, err := until(ctx, a, id, ex.answers)
					if err != nil {
						t.Fatalf("%s: %v", ex.name, err)
					}
					// The response's id is the agent's: put back the
					// exchange's own.
					last := got[len(got)-1]
					got[len(got)-1] = strings.Replace(last, `"id":`+id, `"id":"x"`, 1)
					for j := range got {
						got[j] = fpID.ReplaceAllString(got[j], `"fp-*"`)
					}
					have := strings.Join(got, "\n") + "\n"
					if *updateGolden && !updated[ex.name] {
						updated[ex.name] = true
						if err := ex.write(have); err != nil {
							t.Fatal(err)
						}
						ex.want = have
						continue
					}
					if have != ex.want {
						t.Errorf("%s: the agent received\n%s\nwant (%s)\n%s", ex.name, have, ex.path, ex.want)
						showDiff(t, have, ex.want)
					}
				}
			})
		}
	}
}

// showDiff logs the first byte where two texts differ.
func showDiff(t *testing.T, have, want string) {
	t.Helper()
	i := 0
	for i < len(have) && i < len(want) && have[i] == want[i] {
		i++
	}
	from := max(0, i-40)
	t.Logf("first difference at byte %d:\n have …%s\n want …%s", i, have[from:min(len(have), i+40)], want[from:min(len(want), i+40)])
}
