package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/foldproxy/foldproxy/policy/jsonscan"
)

// frontFuzzSeeds are messages of every shape the fronts meet, good and bad.
var frontFuzzSeeds = []string{
	`{"jsonrpc":"2.0","id":1,"method":"echo","params":{"a":[1,2]}}`,
	`{"jsonrpc":"2.0","id":"s","method":"notify"}`,
	`{"jsonrpc":"2.0","id":2,"method":"sample"}`,
	`{"jsonrpc":"2.0","id":3,"method":"block"}`,
	`{"jsonrpc":"2.0","id":4,"method":"silent"}`,
	`{"jsonrpc":"2.0","id":5,"method":"panic"}`,
	`{"jsonrpc":"2.0","id":6,"method":"standalone","params":{}}`,
	`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
	`{"jsonrpc":"2.0","method":"release"}`,
	`{"jsonrpc":"2.0","id":"srv-1","result":{}}`,
	`{"jsonrpc":"2.0","id":"srv-1","error":{"code":-1,"message":"no"}}`,
	`[{"jsonrpc":"2.0","id":1,"method":"echo"},{"jsonrpc":"2.0","method":"n"},{"jsonrpc":"2.0","id":1,"method":"echo"}]`,
	`[{"jsonrpc":"2.0","id":1,"method":"echo"},{"id":2},[3],null]`,
	`[]`,
	`[`,
	`{"jsonrpc":"2.0","id":{"x":1},"method":"echo"}`,
	`{"jsonrpc":"2.0","id":1e400,"method":"echo"}`,
	`{"jsonrpc":"2.0","id":1,"method":"echo","params":"x"}`,
	"{\n\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"echo\"}",
	httpTestInit,
	`null`,
	`"\u2028"`,
}

// frontRequestIDs returns the id keys of every request in data, judged as a
// front judges it.
func frontRequestIDs(data []byte) map[string]bool {
	ids := map[string]bool{}
	items, _ := frontDecode(data)
	for _, it := range items {
		if it.msg != nil && it.msg.IsRequest() {
			ids[frontIDKey(it.msg.ID)] = true
		}
	}
	return ids
}

// frontResponseIDs collects the ids of the responses in one encoded message
// or batch, failing the test if it is not valid JSON-RPC.
func frontResponseIDs(t *testing.T, data []byte, into map[string]bool) {
	t.Helper()
	msgs, _, rpcErr := ParseMessages(data)
	if rpcErr != nil {
		t.Fatalf("front wrote invalid JSON-RPC %q: %v", data, rpcErr)
	}
	for _, m := range msgs {
		if m.IsResponse() {
			into[frontIDKey(m.ID)] = true
		}
	}
}

// FuzzStdioFront feeds arbitrary bytes to ServeStdio: it must not panic or
// hang, every line it writes must be valid JSON-RPC, and every request in
// the input must be answered.
func FuzzStdioFront(f *testing.F) {
	for _, s := range frontFuzzSeeds {
		f.Add([]byte(s + "\n"))
	}
	f.Add([]byte(strings.Join(frontFuzzSeeds, "\n")))
	f.Add([]byte(strings.Repeat("x", 3000) + "\n" + frontFuzzSeeds[0]))
	f.Add([]byte("\r\n\n" + frontFuzzSeeds[0] + "\r"))

	const limit = 512
	f.Fuzz(func(t *testing.T, input []byte) {
		ep := newFrontFake()
		var out bytes.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		done := make(chan error, 1)
		go func() {
			done <- ServeStdio(ctx, ep, bytes.NewReader(input), &out, StdioOptions{MaxMessageBytes: limit, DrainTimeout: time.Nanosecond})
		}()
		if err := frontRecv(t, "ServeStdio to return", done); err != nil {
			t.Fatalf("ServeStdio = %v", err)
		}

		want := map[string]bool{}
		for line := range bytes.SplitSeq(input, []byte{'\n'}) {
			line = bytes.TrimSuffix(line, []byte{'\r'})
			if len(line) > limit || len(bytes.TrimSpace(line)) == 0 {
				continue
			}
			for id := range frontRequestIDs(line) {
				want[id] = true
			}
		}
		got := map[string]bool{}
		text := out.Bytes()
		if len(text) > 0 && text[len(text)-1] != '\n' {
			t.Fatalf("output does not end with a newline: %q", text)
		}
		for line := range bytes.SplitSeq(bytes.TrimSuffix(text, []byte{'\n'}), []byte{'\n'}) {
			if len(text) == 0 {
				break
			}
			frontResponseIDs(t, line, got)
		}
		for id := range want {
			if !got[id] {
				t.Errorf("request %s got no response; output:\n%s", id, text)
			}
		}
	})
}

// frontNoWait is the fake endpoint without the methods that wait for the
// agent or for cancellation, which a fuzzed POST on a recorder cannot give.
type frontNoWait struct{ *frontFake }

func (e frontNoWait) Deliver(ctx context.Context, s *Session, msg *Message, out Outbound) {
	if msg.IsRequest() && (msg.Method == "block" || msg.Method == "sample") {
		_ = out.WriteMessage(Response(msg.ID, nil, Errorf(CodeInternalError, "not while fuzzing")))
		return
	}
	e.frontFake.Deliver(ctx, s, msg, out)
}

// FuzzHTTPFront POSTs arbitrary bodies: the handler must not panic, the
// status must be one of the documented ones, and every body must be valid
// JSON-RPC that answers every request.
func FuzzHTTPFront(f *testing.F) {
	for _, s := range frontFuzzSeeds {
		f.Add([]byte(s))
	}
	f.Add([]byte(`{"jsonrpc":"2.0","id":1,"method":"echo","params":{"p":"` + strings.Repeat("x", 3000) + `"}}`))

	f.Fuzz(func(t *testing.T, body []byte) {
		h, err := newHTTPHandler(frontNoWait{newFrontFake()}, HTTPOptions{Loopback: true, MaxMessageBytes: 2048})
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		sid := httpInit(t, h, nil)
		w := httpDo(h, "POST", "/mcp", string(body), map[string]string{"Mcp-Session-Id": sid})

		switch w.Code {
		case http.StatusOK, http.StatusBadRequest, http.StatusRequestEntityTooLarge:
		case http.StatusAccepted:
			if w.Body.Len() != 0 {
				t.Fatalf("202 with a body %q", w.Body)
			}
			return
		default:
			t.Fatalf("status %d is not one a POST may get; body %s", w.Code, w.Body)
		}

		got := map[string]bool{}
		switch ct := w.Header().Get("Content-Type"); ct {
		case "application/json":
			frontResponseIDs(t, w.Body.Bytes(), got)
		case "text/event-stream":
			for _, e := range httpParseSSE(t, w.Body) {
				frontResponseIDs(t, []byte(e.data), got)
			}
		default:
			t.Fatalf("Content-Type %q; body %s", ct, w.Body)
		}
		if w.Code != http.StatusOK {
			return
		}
		for id := range frontRequestIDs(body) {
			if !got[id] {
				t.Errorf("request %s got no response; body:\n%s", id, w.Body)
			}
		}
	})
}

// FuzzFrontClassify checks the fast path of frontClassify against decoding
// on every message the core can build: any id (string or number), result
// or error.
func FuzzFrontClassify(f *testing.F) {
	f.Add("abc", int64(1), true, true)
	f.Add(`a"b\`, int64(-5), false, false)
	f.Add("<&>\u2028", int64(0), true, false)
	f.Fuzz(func(t *testing.T, sid string, nid int64, stringID, isErr bool) {
		id := json.RawMessage(strconv.FormatInt(nid, 10))
		if stringID {
			id = jsonscan.Quote(sid)
		}
		var msgs [][]byte
		if isErr {
			msgs = append(msgs, Response(id, nil, Errorf(CodeInternalError, "%s", sid)))
		} else {
			msgs = append(msgs, Response(id, json.RawMessage(`{"s":`+string(jsonscan.Quote(sid))+`}`), nil))
		}
		if sid != "" { // the core never asks the agent an empty method
			msgs = append(msgs, requestMessage(id, sid, nil))
		}
		for _, m := range msgs {
			if !json.Valid(m) {
				t.Fatalf("not valid JSON: %s", m)
			}
			k1, r1, e1 := frontClassify(m)
			k2, r2, e2 := classifyByDecoding(m)
			if k1 != k2 || r1 != r2 || e1 != e2 {
				t.Fatalf("%s: fast path (%q %v %v), decoding (%q %v %v)", m, k1, r1, e1, k2, r2, e2)
			}
		}
	})
}

// FuzzParseOneFast checks that parseOne's quick path decodes a message
// exactly as json.Unmarshal into a Message does, and takes it whenever it
// says it did.
func FuzzParseOneFast(f *testing.F) {
	for _, s := range frontFuzzSeeds {
		f.Add([]byte(s))
	}
	f.Add([]byte(`{"jsonrpc":"2.0","id":"a\u0062","method":"tools/call","params":{"name":"x"}}`))
	f.Add([]byte(` {"id":null,"result":null,"jsonrpc":"2.0"} `))
	f.Add([]byte(`{"jsonrpc":"2.0","id":1,"id":2,"method":"m"}`))
	f.Add([]byte(`{"jsonrpc":"2.0","ID":1,"Method":"m"}`))
	f.Add([]byte(`{"jsonrpc":"2.\u0030","method":"\ud800"}`))
	f.Add([]byte("{\"jsonrpc\":\"2.0\",\"method\":\"\xff\"}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		got, ok := parseOneFast(data)
		if !ok {
			return
		}
		var want Message
		if err := json.Unmarshal(data, &want); err != nil {
			t.Fatalf("quick path decoded %q, which json.Unmarshal refuses: %v", data, err)
		}
		if got.JSONRPC != want.JSONRPC || got.Method != want.Method || got.Error != nil ||
			!bytes.Equal(got.ID, want.ID) || !bytes.Equal(got.Params, want.Params) || !bytes.Equal(got.Result, want.Result) ||
			(got.ID == nil) != (want.ID == nil) || (got.Params == nil) != (want.Params == nil) || (got.Result == nil) != (want.Result == nil) {
			t.Fatalf("%q: quick path %+v, json.Unmarshal %+v", data, got, want)
		}
		if len(got.ID) > 0 && &got.ID[0] == &data[bytes.Index(data, got.ID)] {
			t.Fatalf("%q: the id aliases the input", data)
		}
	})
}

func TestParseOneFastTakesCommonMessages(t *testing.T) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"a__b","arguments":{}}}`,
		`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7}}`,
		`{"jsonrpc":"2.0","id":"x","result":{}}`,
	} {
		if _, ok := parseOneFast([]byte(s)); !ok {
			t.Errorf("parseOneFast(%s) left it to json.Unmarshal", s)
		}
	}
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":"x","error":{"code":1,"message":"m"}}`,
		`{"jsonrpc":"2.0","id":1,"id":2,"method":"m"}`,
		`{"jsonrpc":"2.0","Method":"m"}`,
		`{"jsonrpc":"2.0","method":null}`,
		"{\"jsonrpc\":\"2.0\",\"method\":\"\xff\"}",
		`[{"jsonrpc":"2.0","method":"m"}]`,
	} {
		if _, ok := parseOneFast([]byte(s)); ok {
			t.Errorf("parseOneFast(%s) took a message it should leave to json.Unmarshal", s)
		}
	}
}
