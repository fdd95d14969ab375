package proxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"testing"
)

// stdioRun serves input through ServeStdio with a fake endpoint and returns
// the lines written.
func stdioRun(t *testing.T, opts StdioOptions, input string) (lines []string, f *frontFake) {
	t.Helper()
	f = newFrontFake()
	var out bytes.Buffer
	if err := ServeStdio(context.Background(), f, strings.NewReader(input), &out, opts); err != nil {
		t.Fatalf("ServeStdio: %v", err)
	}
	text := out.String()
	if text != "" && !strings.HasSuffix(text, "\n") {
		t.Fatalf("output %q does not end with a newline", text)
	}
	if text == "" {
		return nil, f
	}
	return strings.Split(strings.TrimSuffix(text, "\n"), "\n"), f
}

// stdioSummary renders responses as "id:result-or-error-code", sorted, so
// that tests compare them regardless of completion order.
func stdioSummary(t *testing.T, line string) string {
	t.Helper()
	msgs, batch := frontParseResponses(t, []byte(line))
	var parts []string
	for _, m := range msgs {
		if m.Error != nil {
			parts = append(parts, fmt.Sprintf("%s:err%d", m.ID, m.Error.Code))
		} else {
			parts = append(parts, fmt.Sprintf("%s:%s", m.ID, m.Result))
		}
	}
	sort.Strings(parts)
	s := strings.Join(parts, " ")
	if batch {
		s = "[" + s + "]"
	}
	return s
}

func TestServeStdioLines(t *testing.T) {
	atLimitPad := strings.Repeat("y", 1000)
	atLimit := `{"jsonrpc":"2.0","id":1,"method":"echo","params":{"p":"` + atLimitPad + `"}}`
	tests := []struct {
		name  string
		opts  StdioOptions
		input string
		want  []string
	}{
		{"request", StdioOptions{}, `{"jsonrpc":"2.0","id":1,"method":"echo","params":{"a":1}}` + "\n",
			[]string{`1:{"echo":{"a":1}}`}},
		{"crlf and no final newline", StdioOptions{}, `{"jsonrpc":"2.0","id":"x","method":"echo"}` + "\r\n" + `{"jsonrpc":"2.0","id":2,"method":"echo"}`,
			[]string{`"x":{"echo":null}`, `2:{"echo":null}`}},
		{"blank lines ignored", StdioOptions{}, "\n  \n\t\n", nil},
		{"notification gets no answer", StdioOptions{}, `{"jsonrpc":"2.0","method":"notifications/initialized"}` + "\n", nil},
		{"response gets no answer", StdioOptions{}, `{"jsonrpc":"2.0","id":"srv-1","result":{}}` + "\n", nil},
		{"parse error, loop goes on", StdioOptions{}, "{nope\n" + `{"jsonrpc":"2.0","id":3,"method":"echo"}` + "\n",
			[]string{`null:err-32700`, `3:{"echo":null}`}},
		{"invalid request keeps its id", StdioOptions{}, `{"jsonrpc":"1.0","id":9,"method":"echo"}` + "\n",
			[]string{`9:err-32600`}},
		{"unknown method", StdioOptions{}, `{"jsonrpc":"2.0","id":4,"method":"nope"}` + "\n",
			[]string{`4:err-32601`}},
		{"core panics", StdioOptions{}, `{"jsonrpc":"2.0","id":5,"method":"panic"}` + "\n",
			[]string{`5:err-32603`}},
		{"core answers nothing", StdioOptions{}, `{"jsonrpc":"2.0","id":6,"method":"silent"}` + "\n",
			[]string{`6:err-32603`}},
		{"batch", StdioOptions{}, `[{"jsonrpc":"2.0","id":1,"method":"echo"},{"jsonrpc":"2.0","method":"n"},{"jsonrpc":"2.0","id":2,"method":"silent"}]` + "\n",
			[]string{`[1:{"echo":null} 2:err-32603]`}},
		{"batch with a bad element", StdioOptions{}, `[{"jsonrpc":"2.0","id":1,"method":"echo"},{"jsonrpc":"2.0","id":2}]` + "\n",
			[]string{`[1:{"echo":null} 2:err-32600]`}},
		{"batch of notifications", StdioOptions{}, `[{"jsonrpc":"2.0","method":"a"},{"jsonrpc":"2.0","method":"b"}]` + "\n", nil},
		{"empty batch", StdioOptions{}, "[]\n", []string{`null:err-32600`}},
		{"too large, loop goes on", StdioOptions{MaxMessageBytes: 1024},
			`{"jsonrpc":"2.0","id":1,"method":"echo","params":{"pad":"` + strings.Repeat("x", 5000) + `"}}` + "\n" +
				`{"jsonrpc":"2.0","id":2,"method":"echo"}` + "\n",
			[]string{`null:err-32011`, `2:{"echo":null}`}},
		{"exactly at the limit", StdioOptions{MaxMessageBytes: int64(len(atLimit))}, atLimit + "\r\n",
			[]string{`1:{"echo":{"p":"` + atLimitPad + `"}}`}},
		{"too large without newline", StdioOptions{MaxMessageBytes: 1024}, strings.Repeat("z", 200000),
			[]string{`null:err-32011`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lines, _ := stdioRun(t, tt.opts, tt.input)
			var got []string
			for _, l := range lines {
				got = append(got, stdioSummary(t, l))
			}
			// Requests run concurrently, so lines are compared as a set.
			sort.Strings(got)
			want := append([]string(nil), tt.want...)
			sort.Strings(want)
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Errorf("got lines\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		})
	}
}

func TestServeStdioTooLargeNamesLimit(t *testing.T) {
	lines, _ := stdioRun(t, StdioOptions{MaxMessageBytes: 2048}, strings.Repeat("a", 4000)+"\n")
	if len(lines) != 1 || !strings.Contains(lines[0], "2048") {
		t.Fatalf("got %q, want one error naming the limit 2048", lines)
	}
}

func TestServeStdioOpensOneSession(t *testing.T) {
	_, f := stdioRun(t, StdioOptions{}, `{"jsonrpc":"2.0","id":1,"method":"echo"}`+"\n")
	opened := f.sessions()
	if len(opened) != 1 {
		t.Fatalf("opened %d sessions, want 1", len(opened))
	}
	o := opened[0]
	if o.id != "" || o.transport != "stdio" || o.standalone == nil {
		t.Errorf("OpenSession(id %q, transport %q, standalone %v), want (\"\", \"stdio\", non-nil)", o.id, o.transport, o.standalone)
	}
	if got := f.closeCount(o.s); got != 1 {
		t.Errorf("CloseSession called %d times, want 1", got)
	}
	// Nothing reaches the writer once ServeStdio has returned.
	if err := o.standalone.WriteMessage(Notification("late", nil)); !errors.Is(err, ErrOutboundClosed) {
		t.Errorf("late write error = %v, want ErrOutboundClosed", err)
	}
}

// TestServeStdioConcurrency shows that a blocked request holds up neither
// other requests nor notifications, and that notifications arrive in order.
func TestServeStdioConcurrency(t *testing.T) {
	f := newFrontFake()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- ServeStdio(context.Background(), f, inR, outW, StdioOptions{}) }()
	lines := bufio.NewScanner(outR)
	readLine := func() string {
		t.Helper()
		ch := make(chan string, 1)
		go func() {
			if lines.Scan() {
				ch <- lines.Text()
			} else {
				ch <- "EOF"
			}
		}()
		return frontRecv(t, "a line from ServeStdio", ch)
	}
	write := func(s string) {
		t.Helper()
		if _, err := io.WriteString(inW, s+"\n"); err != nil {
			t.Fatal(err)
		}
	}

	write(`{"jsonrpc":"2.0","id":1,"method":"block"}`)
	frontRecv(t, "block to start", f.started)
	write(`{"jsonrpc":"2.0","method":"first"}`)
	write(`{"jsonrpc":"2.0","id":2,"method":"echo"}`)
	if got, want := stdioSummary(t, readLine()), `2:{"echo":null}`; got != want {
		t.Fatalf("while 1 blocks, got %s, want %s", got, want)
	}
	write(`{"jsonrpc":"2.0","method":"second"}`)
	write(`{"jsonrpc":"2.0","method":"release"}`)
	if got, want := stdioSummary(t, readLine()), `1:{"released":true}`; got != want {
		t.Fatalf("after release, got %s, want %s", got, want)
	}
	inW.Close()
	if err := frontRecv(t, "ServeStdio to return", done); err != nil {
		t.Fatalf("ServeStdio = %v, want nil at EOF", err)
	}
	outW.Close()
	if got, want := strings.Join(f.notifications(), ","), "first,second,release"; got != want {
		t.Errorf("notifications delivered %s, want %s", got, want)
	}
}

func TestServeStdioContextCancel(t *testing.T) {
	f := newFrontFake()
	inR, inW := io.Pipe()
	defer inW.Close()
	ctx, cancel := context.WithCancel(context.Background())
	var out bytes.Buffer
	var outMu sync.Mutex
	done := make(chan error, 1)
	go func() {
		done <- ServeStdio(ctx, f, inR, frontLockedWriter{&outMu, &out}, StdioOptions{})
	}()
	if _, err := io.WriteString(inW, `{"jsonrpc":"2.0","id":1,"method":"block"}`+"\n"); err != nil {
		t.Fatal(err)
	}
	frontRecv(t, "block to start", f.started)
	cancel()
	if err := frontRecv(t, "ServeStdio to return", done); !errors.Is(err, context.Canceled) {
		t.Fatalf("ServeStdio = %v, want context.Canceled", err)
	}
	if got := frontRecv(t, "the request's cancellation", f.cancelled); got != "1" {
		t.Errorf("cancelled request %s, want 1", got)
	}
	if s := f.sessions()[0].s; f.closeCount(s) != 1 {
		t.Errorf("CloseSession called %d times, want 1", f.closeCount(s))
	}
}

// TestServeStdioDrainsAtEOF: a request still running when stdin closes is
// answered before ServeStdio returns.
func TestServeStdioDrainsAtEOF(t *testing.T) {
	f := newFrontFake()
	in := `{"jsonrpc":"2.0","id":1,"method":"block"}` + "\n"
	var out bytes.Buffer
	var outMu sync.Mutex
	done := make(chan error, 1)
	go func() {
		done <- ServeStdio(context.Background(), f, strings.NewReader(in), frontLockedWriter{&outMu, &out}, StdioOptions{DrainTimeout: 1 << 40})
	}()
	frontRecv(t, "block to start", f.started)
	f.relOnce.Do(func() { close(f.release) })
	if err := frontRecv(t, "ServeStdio to return", done); err != nil {
		t.Fatalf("ServeStdio = %v", err)
	}
	if got, want := stdioSummary(t, strings.TrimSpace(out.String())), `1:{"released":true}`; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}

// TestServeStdioDrainTimeout: past DrainTimeout the request is cancelled and
// ServeStdio returns.
func TestServeStdioDrainTimeout(t *testing.T) {
	f := newFrontFake()
	in := `{"jsonrpc":"2.0","id":1,"method":"block"}` + "\n"
	var out bytes.Buffer
	var outMu sync.Mutex
	if err := ServeStdio(context.Background(), f, strings.NewReader(in), frontLockedWriter{&outMu, &out}, StdioOptions{DrainTimeout: 1}); err != nil {
		t.Fatalf("ServeStdio = %v", err)
	}
	if got := frontRecv(t, "the request's cancellation", f.cancelled); got != "1" {
		t.Errorf("cancelled request %s, want 1", got)
	}
}

// TestServeStdioNoInterleaving: many concurrent large answers come out as
// whole lines.
func TestServeStdioNoInterleaving(t *testing.T) {
	var in strings.Builder
	const n = 50
	for i := range n {
		fmt.Fprintf(&in, `{"jsonrpc":"2.0","id":%d,"method":"echo","params":{"pad":"%s"}}`+"\n", i, strings.Repeat("p", 20000+i))
	}
	lines, _ := stdioRun(t, StdioOptions{}, in.String())
	if len(lines) != n {
		t.Fatalf("got %d lines, want %d", len(lines), n)
	}
	seen := map[string]bool{}
	for _, l := range lines {
		msgs, _ := frontParseResponses(t, []byte(l))
		seen[string(msgs[0].ID)] = true
	}
	if len(seen) != n {
		t.Errorf("got %d distinct ids, want %d", len(seen), n)
	}
}

// TestServeStdioCompactsMultilineMessages: a pretty-printed message from the
// core still goes out as one line.
func TestServeStdioCompactsMultilineMessages(t *testing.T) {
	var out bytes.Buffer
	w := &stdioWriter{w: &out, broken: make(chan struct{})}
	if err := w.WriteMessage([]byte("{\n  \"jsonrpc\": \"2.0\",\n  \"method\": \"m\"\n}")); err != nil {
		t.Fatal(err)
	}
	if got, want := out.String(), `{"jsonrpc":"2.0","method":"m"}`+"\n"; got != want {
		t.Errorf("wrote %q, want %q", got, want)
	}
}

func TestServeStdioWriteError(t *testing.T) {
	f := newFrontFake()
	inR, inW := io.Pipe()
	defer inW.Close()
	done := make(chan error, 1)
	go func() { done <- ServeStdio(context.Background(), f, inR, frontFailWriter{}, StdioOptions{}) }()
	if _, err := io.WriteString(inW, `{"jsonrpc":"2.0","id":1,"method":"echo"}`+"\n"); err != nil {
		t.Fatal(err)
	}
	err := frontRecv(t, "ServeStdio to return", done)
	if err == nil || !strings.Contains(err.Error(), "writing to the agent") {
		t.Fatalf("ServeStdio = %v, want a write error", err)
	}
}

func TestServeStdioBadArguments(t *testing.T) {
	tests := []struct {
		name string
		ep   Endpoint
		r    io.Reader
		w    io.Writer
		opts StdioOptions
	}{
		{"no endpoint", nil, strings.NewReader(""), io.Discard, StdioOptions{}},
		{"no reader", newFrontFake(), nil, io.Discard, StdioOptions{}},
		{"no writer", newFrontFake(), strings.NewReader(""), nil, StdioOptions{}},
		{"negative limit", newFrontFake(), strings.NewReader(""), io.Discard, StdioOptions{MaxMessageBytes: -1}},
	}
	for _, tt := range tests {
		if err := ServeStdio(context.Background(), tt.ep, tt.r, tt.w, tt.opts); err == nil {
			t.Errorf("%s: ServeStdio = nil, want an error", tt.name)
		}
	}
}

func TestStdioReadLine(t *testing.T) {
	tests := []struct {
		name string
		in   string
		max  int64
		want []string // "big" for a line refused as too large
	}{
		{"lines", "a\nbb\r\nccc", 10, []string{"a", "bb", "ccc"}},
		{"limit", "12345\n123456\n1234567\nok\n", 6, []string{"12345", "123456", "big", "ok"}},
		{"crlf at the limit", "123456\r\n", 6, []string{"123456"}},
		{"long beyond the buffer", strings.Repeat("q", 300000) + "\nok", 1000, []string{"big", "ok"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			br := bufio.NewReaderSize(strings.NewReader(tt.in), 16)
			var got []string
			for {
				line, big, err := stdioReadLine(br, tt.max)
				switch {
				case big:
					got = append(got, "big")
				case len(line) > 0:
					got = append(got, string(line))
				}
				if err != nil {
					break
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestStdioCollectorPassesRelatedMessages(t *testing.T) {
	var out bytes.Buffer
	main := &stdioWriter{w: &out, broken: make(chan struct{})}
	c := &stdioCollector{main: main, await: newFrontAwait(), hold: true}
	c.await.add(json.RawMessage(`1`))
	if err := c.WriteMessage(Notification("notifications/progress", nil)); err != nil {
		t.Fatal(err)
	}
	if err := c.WriteMessage(Response(json.RawMessage(`1`), json.RawMessage(`{}`), nil)); err != nil {
		t.Fatal(err)
	}
	if got, want := out.String(), `{"jsonrpc":"2.0","method":"notifications/progress"}`+"\n"; got != want {
		t.Fatalf("before finish wrote %q, want only the notification %q", got, want)
	}
	c.finish()
	if got, want := strings.Count(out.String(), "\n"), 2; got != want {
		t.Errorf("wrote %d lines, want %d", got, want)
	}
}

// frontLockedWriter serializes writes so a test can read the buffer safely.
type frontLockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (w frontLockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}

type frontFailWriter struct{}

func (frontFailWriter) Write([]byte) (int, error) { return 0, errors.New("broken pipe") }
