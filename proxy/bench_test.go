package proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/foldproxy/foldproxy/upstreams"
)

// resultEndpoint answers every request with one raw result, as the core
// answers a tools/call with an upstream's result.
type resultEndpoint struct{ result json.RawMessage }

func (e *resultEndpoint) OpenSession(_ context.Context, id, transport string, standalone Outbound) *Session {
	return newSession(id, transport, standalone)
}

func (e *resultEndpoint) Deliver(_ context.Context, _ *Session, msg *Message, out Outbound) {
	if msg.IsRequest() {
		_ = out.WriteMessage(Response(msg.ID, e.result, nil))
	}
}

func (e *resultEndpoint) CloseSession(*Session) {}

// benchResult is a tools/call result of about n bytes of text, with what
// an upstream writes: HTML characters, escapes, a structuredContent.
func benchResult(n int) json.RawMessage {
	line := "line of tool output <&> \u00e9\n"
	text, _ := json.Marshal(strings.Repeat(line, n/len(line)+1)[:n])
	return json.RawMessage(`{"content":[{"type":"text","text":` + string(text) + `}],"structuredContent":{"n":9007199254740993},"isError":false}`)
}

// cpuTime is the process's user and system time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkStdioFrontResult measures the stdio front's path of a result:
// the agent's request read and decoded, the response envelope built around
// the raw result, classified and written to stdout, and read back by the
// agent. cpu-ns/op is the process's CPU time per call.
func BenchmarkStdioFrontResult(b *testing.B) {
	for _, n := range []int{16, 1 << 10, 100 << 10, 1 << 20} {
		b.Run(fmt.Sprintf("%dB", n), func(b *testing.B) {
			ep := &resultEndpoint{result: benchResult(n)}
			inR, inW := io.Pipe()
			outR, outW := io.Pipe()
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- ServeStdio(ctx, ep, inR, outW, StdioOptions{}) }()
			defer func() {
				cancel()
				inW.Close()
				outR.Close()
				<-done
			}()
			r := bufio.NewReaderSize(outR, 1<<20)
			req := []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{}}}` + "\n")
			call := func() int {
				if _, err := inW.Write(req); err != nil {
					b.Fatal(err)
				}
				line, err := r.ReadSlice('\n')
				for err == bufio.ErrBufferFull {
					var more []byte
					more, err = r.ReadSlice('\n')
					line = append(line, more...)
				}
				if err != nil {
					b.Fatal(err)
				}
				return len(line)
			}
			b.SetBytes(int64(call()))
			b.ResetTimer()
			cpu0 := cpuTime()
			for b.Loop() {
				call()
			}
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// discardOutbound takes every message and keeps none.
type discardOutbound struct{}

func (discardOutbound) WriteMessage([]byte) error { return nil }

// BenchmarkServerToolsCallTiny measures the core's own path of a forwarded
// tools/call with a tiny result, without interceptors and with an upstream
// that answers at once: routing, the request's contexts and bookkeeping,
// and the response envelope.
func BenchmarkServerToolsCallTiny(b *testing.B) {
	res := json.RawMessage(`{"content":[{"type":"text","text":"0123456789"}]}`)
	up := &fakeUpstream{name: "ev", cat: upstreams.Catalog{Tools: []json.RawMessage{json.RawMessage(echoTool)}},
		answer: func(context.Context, string, json.RawMessage) (json.RawMessage, error) { return res, nil }}
	s, _ := newTestServer(b, []Upstream{up}, nil)
	sess := initSession(b, s, `{}`)
	msg := &Message{JSONRPC: "2.0", ID: json.RawMessage(`12`), Method: "tools/call",
		Params: json.RawMessage(`{"name":"ev__echo","arguments":{"message":"hi"}}`)}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		up.mu.Lock()
		up.seen = up.seen[:0]
		up.mu.Unlock()
		s.Deliver(ctx, sess, msg, discardOutbound{})
	}
}
