package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"time"
)

// rawPeer is a bare JSON-RPC client over a stdio process: it writes one
// request line and reads lines until its answer, with no SDK between the
// clock and the bytes. The overhead section drives every side with it, so
// that what is timed is the server and what stands in front of it, to the
// last byte of the answer.
type rawPeer struct {
	name   string
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Reader
	stderr *tailBuffer
	id     int
	buf    []byte
}

// startRaw runs command (in a process group of its own) with extra
// environment variables, and initializes it.
func startRaw(ctx context.Context, name string, env []string, command string, args ...string) (*rawPeer, error) {
	cmd := exec.Command(command, args...)
	cmd.Env = append(os.Environ(), env...)
	p := &rawPeer{name: name, cmd: cmd, stderr: &tailBuffer{max: 16 << 10}}
	cmd.Stderr = p.stderr
	ownGroup(cmd)
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	p.in, p.out = in, bufio.NewReaderSize(out, 1<<20)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if _, err := p.roundTrip(ctx, "initialize", fmt.Sprintf(`{"protocolVersion":%q,"capabilities":{},"clientInfo":{"name":"foldproxy-bench","version":"1.0.0"}}`, protocolVersion)); err != nil {
		p.close()
		return nil, err
	}
	if _, err := p.in.Write([]byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}` + "\n")); err != nil {
		p.close()
		return nil, err
	}
	return p, nil
}

// roundTrip sends a request and returns its answer's line; notifications
// and requests from the server on the way are skipped (a request is
// answered with an empty result).
func (p *rawPeer) roundTrip(ctx context.Context, method, params string) ([]byte, error) {
	p.id++
	want := strconv.Itoa(p.id)
	p.buf = append(p.buf[:0], `{"jsonrpc":"2.0","id":`...)
	p.buf = append(p.buf, want...)
	p.buf = append(p.buf, `,"method":"`...)
	p.buf = append(p.buf, method...)
	p.buf = append(p.buf, `","params":`...)
	p.buf = append(p.buf, params...)
	p.buf = append(p.buf, "}\n"...)
	if _, err := p.in.Write(p.buf); err != nil {
		return nil, fmt.Errorf("%s: writing: %w%s", p.name, err, p.stderr.tail())
	}
	for {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		line, err := p.out.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			long := bytes.Clone(line)
			for err == bufio.ErrBufferFull {
				line, err = p.out.ReadSlice('\n')
				long = append(long, line...)
			}
			line = long
		}
		if err != nil {
			return nil, fmt.Errorf("%s: reading: %w%s", p.name, err, p.stderr.tail())
		}
		var head struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		// Only the start of a long line is decoded: the id comes first in
		// every answer the bench's servers and foldproxy write.
		if i := bytes.Index(line, []byte(`"id":`)); i >= 0 && i < 64 {
			j := i + 5
			k := j
			for k < len(line) && line[k] != ',' && line[k] != '}' {
				k++
			}
			head.ID = line[j:k]
			if m := bytes.Index(line[:min(len(line), 200)], []byte(`"method":"`)); m >= 0 {
				head.Method = "?"
			}
		} else if err := json.Unmarshal(line, &head); err != nil {
			return nil, fmt.Errorf("%s: not JSON: %.200q", p.name, line)
		}
		if head.Method != "" {
			if len(head.ID) > 0 && string(head.ID) != "null" {
				_, _ = p.in.Write([]byte(`{"jsonrpc":"2.0","id":` + string(head.ID) + `,"result":{}}` + "\n"))
			}
			continue
		}
		if string(head.ID) != want {
			continue
		}
		return line, nil
	}
}

// call calls tool emit(bytes) (named tool here) and checks that the answer
// is a result holding about that many bytes.
func (p *rawPeer) call(ctx context.Context, tool string, n int) error {
	line, err := p.roundTrip(ctx, "tools/call", fmt.Sprintf(`{"name":%q,"arguments":{"bytes":%d}}`, tool, n))
	if err != nil {
		return err
	}
	if !bytes.Contains(line[:min(len(line), 200)], []byte(`"result":{"content":[{"type":"text","text":"`)) ||
		bytes.Contains(line[:min(len(line), 200)], []byte(`"isError":true`)) || len(line) < n {
		return fmt.Errorf("%s: %s(%d): unexpected answer (%d bytes): %.300q", p.name, tool, n, len(line), line)
	}
	return nil
}

// tools returns the names tools/list answers with.
func (p *rawPeer) tools(ctx context.Context) ([]string, error) {
	line, err := p.roundTrip(ctx, "tools/list", `{}`)
	if err != nil {
		return nil, err
	}
	var ans struct {
		Result struct {
			Tools []struct {
				Name string `json:"name"`
			} `json:"tools"`
		} `json:"result"`
	}
	if err := json.Unmarshal(line, &ans); err != nil {
		return nil, fmt.Errorf("%s: tools/list: %w", p.name, err)
	}
	names := make([]string, 0, len(ans.Result.Tools))
	for _, t := range ans.Result.Tools {
		names = append(names, t.Name)
	}
	return names, nil
}

// waitTool polls tools/list until it names tool.
func (p *rawPeer) waitTool(ctx context.Context, tool string) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for {
		names, err := p.tools(ctx)
		if err == nil && hasAll(names, []string{tool}) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: tool %s not listed (have %v, err %v)%s", p.name, tool, names, err, p.stderr.tail())
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// pid is the process's id.
func (p *rawPeer) pid() int { return p.cmd.Process.Pid }

// close closes stdin, so that the server exits on its own, and kills what
// is left of its process group after a while.
func (p *rawPeer) close() {
	_ = p.in.Close()
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
	}
	_ = killGroup(p.cmd)
}
