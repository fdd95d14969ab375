package proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"os"
)

// The core's side of package proxy/attach, which serves many stdio
// sessions of one project in one daemon: what an attached session needs
// of the stdio front (its line reader and writer, the agent's pipes made
// pollable, serving a session over pipes passed to the daemon) and of the
// JSON-RPC codec. Nothing here knows of sockets or of the journal's
// layout: the journal is the Journal interface, implemented by attach.

// TransportAttach is the transport recorded for sessions of attached stdio
// processes. Unlike plain stdio sessions they resume after a restart of the
// daemon: the relay keeps the session id and presents it again.
const TransportAttach = "attach"

// relayResendable are the requests that a relay sends again to a new
// daemon when the old one went away before answering: they change nothing.
// Any other request is answered with an error that says it may or may not
// have been carried out.
var relayResendable = map[string]bool{
	"initialize": true, "ping": true, "tools/list": true, "prompts/list": true,
	"resources/list": true, "resources/templates/list": true,
}

// Resendable reports whether a request of method changes nothing, so that
// it may be sent again to a new daemon when the old one went away before
// answering.
func Resendable(method string) bool { return relayResendable[method] }

// Journal is an attached session's record in shared memory (package
// attach): the stdio front notes there the requests it owes and every
// answer as it writes it, so that whoever serves the session next knows
// what was taken and not answered. The session's reader calls NewGroup,
// LineEndPos and Track; its writer, one at a time, Untrack, Answering,
// BeginOut, Wrote and EndOut.
type Journal interface {
	// NewGroup starts the group of the requests of one line.
	NewGroup() uint64
	// LineEndPos is the input position past the line last read.
	LineEndPos() uint64
	// Track notes the request id (method, its line when keep) as owed,
	// read up to end, in group.
	Track(id json.RawMessage, method string, line []byte, end, group uint64, keep bool) error
	// Untrack forgets the owed request of id key (IDKey).
	Untrack(key string)
	// Answering takes the owed requests of keys for an answer about to
	// be written.
	Answering(keys []string) (ref uint64, slots []int)
	// BeginOut, Wrote and EndOut bracket the writing of one answer of
	// total bytes: Wrote after each write(2), EndOut with whether it was
	// written whole.
	BeginOut(total int, ref uint64)
	Wrote(n int)
	EndOut(slots []int, whole bool)
}

// LineSource is where an attached session's lines come from. One
// goroutine at a time reads.
type LineSource interface {
	// ReadLine reads one line as ReadLine does.
	ReadLine(max int64) (line []byte, tooLarge bool, err error)
	// More reports whether input past the line last read is at hand.
	More() bool
	// Handled is called once the line last read has been handled: its
	// requests noted as owed and handed on, its other messages
	// delivered.
	Handled()
}

// lineSource adapts a LineSource to the stdio front's stdioSource.
type lineSource struct{ src LineSource }

func (s lineSource) readLine(max int64) ([]byte, bool, error) { return s.src.ReadLine(max) }
func (s lineSource) more() bool                               { return s.src.More() }
func (s lineSource) handled()                                 { s.src.Handled() }

// AttachedPipes are the agent's own pipes of a session whose stdio
// process passed them to the daemon.
type AttachedPipes struct {
	// Source gives the lines the agent wrote.
	Source LineSource
	// Out is the agent's stdin; Write writes it, calling wrote after each
	// write(2).
	Out   io.Writer
	Write func(p []byte, wrote func(int)) (int, error)
	// Journal records every answer as it goes out. Required.
	Journal Journal
	// Hangup, when closed, ends the session as the end of its input does.
	Hangup <-chan struct{}
}

// ServeAttached serves one session over the agent's own pipes as
// ServeStdio does over a reader and a writer, its answers recorded in
// p.Journal.
func ServeAttached(ctx context.Context, ep Endpoint, p AttachedPipes, opts StdioOptions) error {
	w := &stdioWriter{w: p.Out, wf: p.Write, j: p.Journal, broken: make(chan struct{})}
	opts.hangup = p.Hangup
	return serveStdio(ctx, ep, lineSource{p.Source}, w, opts)
}

// LineWriter is the stdio front's writer of JSON-RPC messages to the
// agent, one per line, whole, one writer at a time: what a relay writes
// the agent's stdout with.
type LineWriter struct{ w *stdioWriter }

// NewLineWriter returns the writer of w.
func NewLineWriter(w io.Writer) *LineWriter {
	return &LineWriter{&stdioWriter{w: w, broken: make(chan struct{})}}
}

// WriteMessage writes msg, compacted, on one line. It is safe for
// concurrent use.
func (l *LineWriter) WriteMessage(msg []byte) error { return l.w.WriteMessage(msg) }

// WriteLine writes line, already one line of JSON, as it is.
func (l *LineWriter) WriteLine(line []byte) error { return l.w.writeLine(line) }

// Broken is closed at the first write error.
func (l *LineWriter) Broken() <-chan struct{} { return l.w.broken }

// Failure is the first write error, nil before one.
func (l *LineWriter) Failure() error { return l.w.failure() }

// ReadLine reads one line, without its line ending. A line longer than
// max is reported as tooLarge, and its bytes past max are read and dropped
// rather than kept. A final line without a newline is returned together
// with the error that ended it.
func ReadLine(br *bufio.Reader, max int64) (line []byte, tooLarge bool, err error) {
	return stdioReadLine(br, max)
}

// JoinArray joins messages into one JSON array (a batch's answer).
func JoinArray(msgs [][]byte) []byte { return stdioJoinArray(msgs) }

// RawConnIO returns c's reader and writer, going through the poller
// without the net package's deadlines where the platform allows.
func RawConnIO(c net.Conn) io.ReadWriter { return rawConnIO(c) }

// Pipes are the agent's stdin and stdout made pollable (PollablePipes).
type Pipes struct {
	In  io.Reader
	Out io.Writer
	// InFile and OutFile are the pollable duplicates of the agent's
	// pipes, nil when one could not be made pollable.
	InFile, OutFile *os.File
	restore, drop   func()
}

// PollablePipes makes stdin and stdout pollable when they are pipes or
// sockets (see pollablePipes).
func PollablePipes(stdin io.Reader, stdout io.Writer) Pipes {
	p := pollablePipes(stdin, stdout)
	return Pipes{In: p.in, Out: p.out, InFile: p.inFile, OutFile: p.outFile, restore: p.restore, drop: p.drop}
}

// Restore puts the agent's pipes back in the mode they had.
func (p Pipes) Restore() { p.restore() }

// Drop closes the duplicates, so that this process's poller is no longer
// woken by the pipes (a relay that passed them to the daemon).
func (p Pipes) Drop() { p.drop() }

// Classify reads a message's id key and whether it is a response (and an
// error response) without decoding the rest.
func Classify(msg []byte) (key string, isResponse, isError bool) { return frontClassify(msg) }

// Requests returns the well-formed requests of a line, one message or a
// batch judged element by element.
func Requests(line []byte) []*Message {
	items, _ := frontDecode(line)
	var out []*Message
	for _, it := range items {
		if it.msg != nil && it.msg.IsRequest() {
			out = append(out, it.msg)
		}
	}
	return out
}
