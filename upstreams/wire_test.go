package upstreams

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/foldproxy/foldproxy/policy/jsonrpc"
)

func TestReadEvents(t *testing.T) {
	// It opens with a priming event (an id, empty data), as MCP servers
	// send first on a stream: no message, so not handed over.
	stream := "id: 1\ndata:\n\nid: 2\ndata: \n\nevent: message\ndata: {\"a\":1}\n\n: comment\ndata:{\"b\":\ndata: 2}\r\n\r\nid: 7\ndata: last"
	var got []string
	err := readEvents(strings.NewReader(stream), func(event string, data []byte) bool {
		got = append(got, event+"|"+string(data))
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{`message|{"a":1}`, "|{\"b\":\n2}", "|last"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("events %q, want %q", got, want)
	}
	// fn returning false stops the read.
	n := 0
	_ = readEvents(strings.NewReader("data: 1\n\ndata: 2\n\n"), func(string, []byte) bool { n++; return false })
	if n != 1 {
		t.Errorf("read %d events after fn said stop, want 1", n)
	}
}

// FuzzReadEvents feeds arbitrary event streams to the parser: it must not
// panic, and every event's data must be a copy that later reads do not
// overwrite.
func FuzzReadEvents(f *testing.F) {
	f.Add([]byte("event: message\ndata: {\"jsonrpc\":\"2.0\"}\n\n"))
	f.Add([]byte("data: a\r\ndata: b\r\n\r\n:\n\ndata"))
	f.Add([]byte(strings.Repeat("x", 70<<10) + "\ndata: " + strings.Repeat("y", 70<<10) + "\n\n"))
	f.Fuzz(func(t *testing.T, stream []byte) {
		var kept, copies [][]byte
		_ = readEvents(bytes.NewReader(stream), func(_ string, data []byte) bool {
			kept = append(kept, data)
			copies = append(copies, bytes.Clone(data))
			return true
		})
		for i := range kept {
			if !bytes.Equal(kept[i], copies[i]) {
				t.Fatalf("event %d's data changed after it was handed over", i)
			}
		}
	})
}

// FuzzParseIn checks that a message read from an upstream keeps its
// members exactly: each raw member is valid JSON and appears in the input.
func FuzzParseIn(f *testing.F) {
	f.Add([]byte(`{"jsonrpc":"2.0","id":1,"result":{"z":9007199254740993, "a":"<&>"}}`))
	f.Add([]byte(`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"\u0061"}}`))
	f.Add([]byte(`{"jsonrpc":"2.0","id":"s","error":{"code":-1,"message":"m","data":[1.0]}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := parseIn(bytes.Clone(b))
		if err != nil {
			return
		}
		for _, raw := range []json.RawMessage{m.ID, m.Params, m.Result, m.Error} {
			if raw == nil {
				continue
			}
			if !json.Valid(raw) || !bytes.Contains(b, raw) {
				t.Fatalf("member %q of %q is not a valid part of the input", raw, b)
			}
		}
		if len(m.Error) > 0 && !isNull(m.Error) {
			if e, err := jsonrpc.ParseError(m.Error); err == nil && !bytes.Equal(e.Raw(), m.Error) {
				t.Fatalf("RPCError.Raw %q, want %q", e.Raw(), m.Error)
			}
		}
	})
}

// parseInCases are messages parseIn must read exactly as json.Unmarshal
// into a jsonrpc.Envelope does: its quick path, and what it leaves to encoding/json.
var parseInCases = []string{
	`{"jsonrpc":"2.0","id":1,"result":{"z":9007199254740993, "a":"<&>"}}`,
	`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"\u0061"}}`,
	`{"jsonrpc":"2.0","id":"s","error":{"code":-1,"message":"m","data":[1.0]}}`,
	` { "id" : 7 , "result" : null } `,
	`{"id":1,"id":2,"result":{}}`,
	`{"method":"a","method":null}`,
	`{"method":"a\u00e9\ud800","id":null}`,
	`{"method":5}`,
	`{"method":{}}`,
	`{"Method":"x","ID":3}`,
	`{"jsonrpc":"2.0","id":1,"result":{},"extra":true}`,
	`{"\u0069d":1,"result":1}`,
	`{"id":1,"result":"\u0001 raw` + "\x01" + `"}`,
	`{"id":1,"result":{}`,
	`{"id":1,"result":{}} trailing`,
	`[{"id":1}]`,
	`null`,
	`"text"`,
	``,
	"{\"method\":\"\xff\"}",
}

func TestParseInReadsAsEncodingJSON(t *testing.T) {
	for _, c := range parseInCases {
		checkParseIn(t, []byte(c))
	}
}

// checkParseIn compares parseIn with json.Unmarshal on b.
func checkParseIn(t *testing.T, b []byte) {
	t.Helper()
	got, gerr := parseIn(bytes.Clone(b))
	var want jsonrpc.Envelope
	werr := json.Unmarshal(b, &want)
	if (gerr != nil) != (werr != nil) {
		t.Fatalf("parseIn(%q): error %v, json.Unmarshal: %v", b, gerr, werr)
	}
	if gerr != nil {
		return
	}
	if got.Method != want.Method || !bytes.Equal(got.ID, want.ID) || !bytes.Equal(got.Params, want.Params) ||
		!bytes.Equal(got.Result, want.Result) || !bytes.Equal(got.Error, want.Error) ||
		(got.ID == nil) != (want.ID == nil) || (got.Params == nil) != (want.Params == nil) ||
		(got.Result == nil) != (want.Result == nil) || (got.Error == nil) != (want.Error == nil) {
		t.Fatalf("parseIn(%q) = %+v, json.Unmarshal: %+v", b, *got, want)
	}
}

func FuzzParseInAsEncodingJSON(f *testing.F) {
	for _, c := range parseInCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkParseIn(t, b) })
}
