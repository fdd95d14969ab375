//go:build drills

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"
)

// Drill 4: generated malformed and mutated JSON-RPC frames into the real
// binary, on its stdio front and on its HTTP front (the in-process
// FuzzStdioFront and FuzzHTTPFront cover the fronts alone). The frames come
// from a seeded generator (FOLDPROXY_DRILL_SEED, FOLDPROXY_DRILL_FRAMES):
// valid requests, truncated JSON, wrong types for jsonrpc/id/method/params,
// edge-case ids, deep nesting, batches of garbage, invalid UTF-8, byte
// mutations, random bytes, notifications and responses, and messages above
// maxMessageBytes.
//
// What must hold: every line or body the proxy writes is JSON-RPC 2.0;
// every request-shaped frame or batch element (an object whose "method" is
// a non-empty string and whose "id" is a string or a number) is answered
// with its id; every malformed frame (not JSON, not an object or array, an
// empty batch, an id of the wrong type) gets an error with a null id; an
// oversized message is refused with CodeMessageTooLarge (-32011; 413 over
// HTTP); the process neither dies nor hangs (each frame is followed by a
// ping that must be answered within fuzzHang); and valid calls still work
// at the end.

const (
	fuzzMaxMessage = 64 << 10 // maxMessageBytes of the drill's proxy
	fuzzHang       = 30 * time.Second
	fuzzHTTPPosts  = 4 // concurrent POSTs
)

var (
	fuzzFrames = envInt("FOLDPROXY_DRILL_FRAMES", 3000)
	fuzzSeed   = envInt("FOLDPROXY_DRILL_SEED", 5)
)

// fuzzConfig wraps two cheap upstreams: flaky that never crashes and sleeps
// at most 200ms, and replay.
func fuzzConfig(t *testing.T) string {
	return writeConfig(t, map[string]any{
		"flaky":  stdioEntry(helperBin(t, "flaky"), "-crash-every", "0", "-max-sleep", "200ms"),
		"replay": replayEntry(t), // absolute -data: the daemon does not run in the repository
	}, map[string]any{"maxMessageBytes": fuzzMaxMessage})
}

func TestDrillFuzzFrames(t *testing.T) {
	t.Run("stdio", drillFuzzStdio)
	t.Run("http", drillFuzzHTTP)
}

// ---- the generator ----

// frameGen generates frames from a seeded source. Not safe for concurrent use.
type frameGen struct {
	r     *rand.Rand
	n     int
	kinds map[string]int // frames generated, by kind
}

func newFrameGen(seed uint64) *frameGen {
	return &frameGen{r: rand.New(rand.NewPCG(seed, 0xf01d)), kinds: map[string]int{}}
}

// next returns one frame and its kind.
func (g *frameGen) next() []byte {
	g.n++
	var kind string
	var f string
	switch p := g.r.IntN(100); {
	case p < 15:
		kind, f = "valid", g.request(g.id())
	case p < 25:
		kind = "truncated"
		s := g.request(g.id())
		if g.r.IntN(3) == 0 {
			s = g.batch()
		}
		f = s[:1+g.r.IntN(max(len(s)-1, 1))]
	case p < 40:
		kind, f = "wrong types", g.wrongTypes()
	case p < 48:
		kind, f = "edge ids", g.edgeID()
	case p < 53:
		kind, f = "nesting", g.nesting()
	case p < 63:
		kind, f = "batch", g.batch()
	case p < 71:
		kind, f = "invalid utf-8", g.badUTF8()
	case p < 86:
		kind, f = "mutated", g.mutate(g.request(g.id()))
	case p < 91:
		kind, f = "random", g.random()
	case p < 96:
		kind, f = "notification/response", g.notification()
	default:
		kind, f = "oversized", g.oversized()
	}
	g.kinds[kind]++
	return []byte(f)
}

func (g *frameGen) pick(list ...string) string { return list[g.r.IntN(len(list))] }

// id is a fresh, ordinary id: a number or a string.
func (g *frameGen) id() string {
	if g.r.IntN(2) == 0 {
		return strconv.Itoa(g.n)
	}
	return strconv.Quote(fmt.Sprintf("f-%d", g.n))
}

// request is a valid request with the given id literal.
func (g *frameGen) request(id string) string {
	method, params := g.template()
	if params == "" {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"method":%q}`, id, method)
	}
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"method":%q,"params":%s}`, id, method, params)
}

// template is a method and its params ("" for none).
func (g *frameGen) template() (string, string) {
	call := func(name, args string) (string, string) {
		return "tools/call", fmt.Sprintf(`{"name":%q,"arguments":%s}`, name, args)
	}
	switch g.r.IntN(16) {
	case 0:
		return "ping", ""
	case 1:
		return "tools/list", g.pick(`{}`, `{"cursor":"x"}`, ``)
	case 2:
		return call("flaky__work", `{}`)
	case 3:
		return call("replay__emit", fmt.Sprintf(`{"bytes":%d,"kind":%q}`, g.r.IntN(2048), g.pick("text", "log", "json", "code", "nope")))
	case 4:
		if g.r.IntN(2) == 0 {
			return "tools/call", fmt.Sprintf(`{"name":"flaky__slow","arguments":{"ms":%d},"_meta":{"progressToken":"p-%d"}}`, g.r.IntN(50), g.n)
		}
		return call("flaky__slow", fmt.Sprintf(`{"ms":%d}`, g.r.IntN(50)))
	case 5:
		return call("branch_status", g.pick(`{}`, `{"detailed":true}`, `{"branch_id":"nope"}`))
	case 6:
		return call("branch_create", `{"description":"fuzz"}`)
	case 7:
		return call("nope__tool", `{}`)
	case 8:
		return g.pick("prompts/list", "resources/list", "resources/templates/list"), `{}`
	case 9:
		return "resources/read", `{"uri":"fuzz://nothing"}`
	case 10:
		return "completion/complete", `{"ref":{"type":"ref/prompt","name":"x"},"argument":{"name":"a","value":"b"}}`
	case 11:
		return "logging/setLevel", fmt.Sprintf(`{"level":%q}`, g.pick("debug", "info", "loud"))
	case 12:
		return "fuzz/no-such-method", `{}`
	case 13:
		return call("branch_recall", `{"handle":"nope"}`)
	case 14:
		return call("replay__list", `{}`)
	default:
		return call("flaky__stats", `{}`)
	}
}

// value is a random JSON value, nested up to depth.
func (g *frameGen) value(depth int) string {
	n := 9
	if depth <= 0 {
		n = 7
	}
	switch g.r.IntN(n) {
	case 0:
		return "null"
	case 1:
		return g.pick("true", "false")
	case 2:
		return g.pick("0", "-1", "1.5", "1e400", "-1e-400", "123456789012345678901234567890", strconv.Itoa(g.r.IntN(1<<30)))
	case 3:
		return strconv.Quote(g.pick("", "x", "2.0", "ping", "tools/call", strings.Repeat("y", g.r.IntN(3000))))
	case 4:
		return `"\u0000\ud800\t\""`
	case 5:
		return "{}"
	case 6:
		return "[]"
	case 7:
		return fmt.Sprintf(`{"a":%s,"b":%s}`, g.value(depth-1), g.value(depth-1))
	default:
		return fmt.Sprintf(`[%s,%s]`, g.value(depth-1), g.value(depth-1))
	}
}

// wrongTypes builds a request and then replaces, drops, duplicates or
// renames its fields.
func (g *frameGen) wrongTypes() string {
	method, params := g.template()
	if params == "" {
		params = "{}"
	}
	fields := [][2]string{{"jsonrpc", `"2.0"`}, {"id", g.id()}, {"method", strconv.Quote(method)}, {"params", params}}
	for ops := 1 + g.r.IntN(2); ops > 0; ops-- {
		i := g.r.IntN(len(fields))
		switch g.r.IntN(6) {
		case 0, 1, 2:
			fields[i][1] = g.value(2)
		case 3:
			fields = append(fields[:i], fields[i+1:]...)
			if len(fields) == 0 {
				fields = [][2]string{{"jsonrpc", `"2.0"`}}
			}
		case 4:
			fields = append(fields, [2]string{fields[i][0], g.value(1)})
		default:
			fields[i][0] = strings.ToUpper(fields[i][0][:1]) + fields[i][0][1:]
		}
	}
	return joinObject(fields)
}

func joinObject(fields [][2]string) string {
	var b strings.Builder
	b.WriteByte('{')
	for i, f := range fields {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Quote(f[0]))
		b.WriteByte(':')
		b.WriteString(f[1])
	}
	b.WriteByte('}')
	return b.String()
}

// edgeID is a ping or a call with an id at the edges of what JSON-RPC allows.
func (g *frameGen) edgeID() string {
	id := g.pick("0", "-0", "-1", "1.5", "1e400", "-1e400", "123456789012345678901234567890123", "1E2",
		`""`, `"\u0000"`, `"\ud800"`, `"é✓ \u2028"`, strconv.Quote(strings.Repeat("i", 5000)), `"&<>"`,
		"null", "true", "{}", "[]", `{"a":1}`, `[1]`)
	return g.request(id)
}

// nesting is deep arrays or objects, at the top or in params.
func (g *frameGen) nesting() string {
	d := []int{10, 100, 1000, 9999, 10001, 20000}[g.r.IntN(6)]
	arr := strings.Repeat("[", d) + strings.Repeat("]", d)
	switch g.r.IntN(3) {
	case 0:
		return arr
	case 1:
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"method":"tools/call","params":{"name":"flaky__work","arguments":{"deep":%s}}}`, g.id(), arr)
	default:
		d = min(d, 5000)
		obj := strings.Repeat(`{"a":`, d) + "1" + strings.Repeat("}", d)
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"method":"tools/call","params":{"name":"flaky__work","arguments":%s}}`, g.id(), obj)
	}
}

// batch is an array of valid and invalid elements.
func (g *frameGen) batch() string {
	n := g.r.IntN(12)
	parts := make([]string, 0, n)
	for i := 0; i < n; i++ {
		switch g.r.IntN(8) {
		case 0, 1, 2:
			parts = append(parts, g.request(g.id()))
		case 3:
			parts = append(parts, g.notification())
		case 4:
			parts = append(parts, g.value(2))
		case 5:
			parts = append(parts, g.wrongTypes())
		case 6:
			parts = append(parts, "[[1,2],[3]]")
		default:
			parts = append(parts, g.edgeID())
		}
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// badUTF8 puts invalid UTF-8 into a valid request, inside a string or not.
func (g *frameGen) badUTF8() string {
	bad := g.pick("\xff", "\xc3\x28", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xc0\xaf", "\x80\x80\x80")
	s := g.request(g.id())
	if g.r.IntN(2) == 0 {
		// Inside the method name: still a request, with a mangled method.
		return strings.Replace(s, `"method":"`, `"method":"`+bad, 1)
	}
	i := g.r.IntN(len(s) + 1)
	return s[:i] + bad + s[i:]
}

// mutate flips, deletes, inserts or duplicates bytes of s.
func (g *frameGen) mutate(s string) string {
	b := []byte(s)
	const alphabet = `{}[]",:0123456789 \ntfaluenrs-+.eE` + "\x00\x7f\xff"
	for ops := 1 + g.r.IntN(4); ops > 0 && len(b) > 0; ops-- {
		i := g.r.IntN(len(b))
		switch g.r.IntN(4) {
		case 0:
			b[i] = byte(g.r.IntN(256))
		case 1:
			b = append(b[:i], b[i+1:]...)
		case 2:
			b = append(b[:i], append([]byte{alphabet[g.r.IntN(len(alphabet))]}, b[i:]...)...)
		default:
			j := min(len(b), i+1+g.r.IntN(16))
			b = append(b[:j], append(append([]byte{}, b[i:j]...), b[j:]...)...)
		}
	}
	return string(b)
}

// random is random bytes or a bare JSON value.
func (g *frameGen) random() string {
	if g.r.IntN(2) == 0 {
		return g.value(3)
	}
	b := make([]byte, 1+g.r.IntN(200))
	for i := range b {
		b[i] = byte(g.r.IntN(256))
	}
	return string(b)
}

// notification is a notification or a response, which get no answer.
func (g *frameGen) notification() string {
	return g.pick(
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		fmt.Sprintf(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":%s}}`, g.id()),
		`{"jsonrpc":"2.0","method":"notifications/roots/list_changed"}`,
		`{"jsonrpc":"2.0","method":"fuzz/notification","params":[1,2]}`,
		`{"jsonrpc":"2.0","id":"srv-1","result":{}}`,
		`{"jsonrpc":"2.0","id":7,"error":{"code":-1,"message":"no"}}`,
	)
}

// oversized is a message above maxMessageBytes: a valid request padded out,
// or garbage.
func (g *frameGen) oversized() string {
	n := fuzzMaxMessage + 1 + g.r.IntN(3*fuzzMaxMessage)
	if g.r.IntN(10) == 0 {
		n = 1 << 20
	}
	if g.r.IntN(3) == 0 {
		return strings.Repeat("x", n)
	}
	head := fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"method":"tools/call","params":{"name":"flaky__work","arguments":{"pad":"`, g.id())
	return head + strings.Repeat("p", n-len(head)) + `"}}}`
}

// ---- what a frame is owed ----

// frameWant is what the proxy owes for one frame.
type frameWant struct {
	ids       []string // keys of the responses owed, one per request-shaped message
	nullErr   bool     // an error with a null id is owed: the frame is malformed
	tooLarge  bool     // above maxMessageBytes
	blank     bool     // nothing but white space
	batchInit bool     // a batch holding an initialize request (HTTP refuses the whole POST)
}

// wantFor judges a frame. The fronts trim white space around a message as
// bytes.TrimSpace does (Unicode white space included), so it does too.
func wantFor(frame []byte) frameWant {
	var w frameWant
	if len(frame) > fuzzMaxMessage {
		w.tooLarge = true
		return w
	}
	data := bytes.TrimSpace(frame)
	if len(data) == 0 {
		w.blank = true
		return w
	}
	if !json.Valid(data) {
		w.nullErr = true
		return w
	}
	switch data[0] {
	case '{':
		key, shaped, badID := judgeObject(data)
		if shaped {
			w.ids = append(w.ids, key)
		}
		w.nullErr = badID
	case '[':
		var items []json.RawMessage
		_ = json.Unmarshal(data, &items)
		if len(items) == 0 {
			w.nullErr = true
		}
		for _, it := range items {
			if len(it) == 0 || it[0] != '{' {
				continue
			}
			if key, shaped, _ := judgeObject(it); shaped {
				w.ids = append(w.ids, key)
				if m := objectField(it, "method"); string(m) == `"initialize"` {
					w.batchInit = true
				}
			}
		}
	default:
		w.nullErr = true
	}
	return w
}

// judgeObject reports whether a JSON object is request-shaped (a non-empty
// string method and a string or number id) and the key of its id, and
// whether it has a method and an id of the wrong type (owed a null-id error).
func judgeObject(obj []byte) (key string, shaped, badID bool) {
	method := objectField(obj, "method")
	id := objectField(obj, "id")
	var m string
	isMethod := len(method) > 0 && method[0] == '"' && json.Unmarshal(method, &m) == nil && m != ""
	if !isMethod || len(id) == 0 {
		return "", false, false
	}
	if !utf8.Valid(id) {
		// An id that is not UTF-8 cannot be echoed in valid JSON: the
		// answer is an error with a null id (JSON-RPC's "id could not be
		// read"), not an answer under the id.
		return "", false, true
	}
	switch id[0] {
	case '"', '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		return idKey(id), true, false
	}
	return "", false, true
}

// objectField returns the raw value of a top-level field of a JSON object,
// matched as encoding/json matches struct fields: case-insensitively, the
// last match winning.
func objectField(obj []byte, name string) json.RawMessage {
	dec := json.NewDecoder(bytes.NewReader(obj))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil
	}
	var out json.RawMessage
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return out
		}
		k, _ := tok.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return out
		}
		if strings.EqualFold(k, name) {
			out = v
		}
	}
	return out
}

// idKey compares ids by value: strings decoded (the core may re-escape
// them), numbers as written.
func idKey(id json.RawMessage) string {
	id = bytes.TrimSpace(id)
	if len(id) > 0 && id[0] == '"' {
		var s string
		if json.Unmarshal(id, &s) == nil {
			return "s" + s
		}
	}
	return "n" + string(id)
}

// checkMessage validates one message the proxy wrote and returns its shape:
// the id key of a response (nullID for a null id), isErr and its code.
func checkMessage(raw []byte) (key string, isResp, isErr bool, code int, err error) {
	var m struct {
		JSONRPC *string         `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Method  json.RawMessage `json:"method"`
		Result  json.RawMessage `json:"result"`
		Error   json.RawMessage `json:"error"`
	}
	if e := json.Unmarshal(raw, &m); e != nil {
		return "", false, false, 0, fmt.Errorf("not a JSON object: %v", e)
	}
	if m.JSONRPC == nil || *m.JSONRPC != "2.0" {
		return "", false, false, 0, fmt.Errorf(`"jsonrpc" is not "2.0"`)
	}
	if len(m.Method) > 0 {
		var s string
		if json.Unmarshal(m.Method, &s) != nil || s == "" {
			return "", false, false, 0, fmt.Errorf("method is not a non-empty string")
		}
		return "", false, false, 0, nil // a notification or request from the proxy
	}
	if len(m.ID) == 0 {
		return "", false, false, 0, fmt.Errorf("neither a method nor an id")
	}
	if (len(m.Result) > 0) == (len(m.Error) > 0) {
		return "", false, false, 0, fmt.Errorf("a response needs exactly one of result and error")
	}
	if string(m.ID) == "null" {
		key = nullID
	} else {
		switch m.ID[0] {
		case '"', '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
			key = idKey(m.ID)
		default:
			return "", false, false, 0, fmt.Errorf("id %s is not a string, a number or null", truncate(string(m.ID), 50))
		}
	}
	if len(m.Error) > 0 {
		var e struct {
			Code    *int    `json:"code"`
			Message *string `json:"message"`
		}
		if json.Unmarshal(m.Error, &e) != nil || e.Code == nil || e.Message == nil || *e.Message == "" {
			return "", false, false, 0, fmt.Errorf("error is not {code, message}: %s", truncate(string(m.Error), 200))
		}
		return key, true, true, *e.Code, nil
	}
	return key, true, false, 0, nil
}

const nullID = "null"

// splitMessages returns the messages of one line or body: the object, or
// the elements of an array.
func splitMessages(raw []byte) ([]json.RawMessage, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '[' {
		var items []json.RawMessage
		if err := json.Unmarshal(raw, &items); err != nil {
			return nil, fmt.Errorf("not a JSON array: %v", err)
		}
		if len(items) == 0 {
			return nil, fmt.Errorf("an empty array")
		}
		return items, nil
	}
	return []json.RawMessage{raw}, nil
}

// fuzzTally counts what a drill saw, for its DRILL line.
type fuzzTally struct {
	frames, requests, answered, nullErrs, tooLarge, invalidOut, nonUTF8 int
}

// ---- stdio ----

// stdioWatch reads foldproxy's stdout and keeps count of what it wrote.
type stdioWatch struct {
	mu           sync.Mutex
	changed      chan struct{}
	got          map[string]int // responses by id key
	nullErrs     int            // top-level errors with a null id
	tooLarge     int            // errors with CodeMessageTooLarge
	atMark       map[string][2]int
	kept         map[string]json.RawMessage // responses to the drill's own probes and final calls
	bad          []string
	badN         int
	nonUTF8      int
	nonUTF8Lines []string
	lines        int
	closed       bool
	closedErr    error
}

func (w *stdioWatch) read(r io.Reader) {
	br := bufio.NewReaderSize(r, 1<<20)
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			w.line(bytes.TrimSuffix(line, []byte{'\n'}))
		}
		if err != nil {
			w.mu.Lock()
			w.closed, w.closedErr = true, err
			w.notifyLocked()
			w.mu.Unlock()
			return
		}
	}
}

func (w *stdioWatch) notifyLocked() {
	close(w.changed)
	w.changed = make(chan struct{})
}

func (w *stdioWatch) line(line []byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	defer w.notifyLocked()
	w.lines++
	if !utf8.Valid(line) {
		w.nonUTF8++
		if len(w.nonUTF8Lines) < 3 {
			w.nonUTF8Lines = append(w.nonUTF8Lines, truncate(string(line), 200))
		}
	}
	fail := func(err error) {
		w.badN++
		if len(w.bad) < 10 {
			w.bad = append(w.bad, fmt.Sprintf("%v: %s", err, truncate(string(line), 300)))
		}
	}
	msgs, err := splitMessages(line)
	if err != nil {
		fail(err)
		return
	}
	batch := len(line) > 0 && line[0] == '['
	for _, m := range msgs {
		key, isResp, isErr, code, err := checkMessage(m)
		if err != nil {
			fail(err)
			continue
		}
		if !isResp {
			continue
		}
		if key == nullID {
			if !batch && isErr {
				w.nullErrs++
				if code == -32011 {
					w.tooLarge++
				}
			}
			continue
		}
		w.got[key]++
		if strings.HasPrefix(key, "sprobe-") || strings.HasPrefix(key, "sfinal-") {
			w.kept[key] = append(json.RawMessage(nil), m...)
		}
		if strings.HasPrefix(key, "ssentinel-") {
			w.atMark[key] = [2]int{w.nullErrs, w.tooLarge}
		}
	}
}

// waitMark waits for the response to sentinel id and returns the null-id
// and too-large error counts as of its arrival.
func (w *stdioWatch) waitMark(ctx context.Context, key string) ([2]int, error) {
	for {
		w.mu.Lock()
		v, ok := w.atMark[key]
		closed, cerr := w.closed, w.closedErr
		ch := w.changed
		w.mu.Unlock()
		if ok {
			return v, nil
		}
		if closed {
			return v, fmt.Errorf("foldproxy closed its stdout (%v)", cerr)
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return v, ctx.Err()
		}
	}
}

// succeeded reports whether the kept response under key is a result that
// is not a tool error.
func (w *stdioWatch) succeeded(key string) bool {
	w.mu.Lock()
	raw := w.kept[key]
	w.mu.Unlock()
	var m struct {
		Result *struct {
			IsError bool `json:"isError"`
		} `json:"result"`
	}
	return json.Unmarshal(raw, &m) == nil && m.Result != nil && !m.Result.IsError
}

// missing returns the owed ids not yet answered, waiting until ctx ends.
func (w *stdioWatch) missing(ctx context.Context, owed map[string]int) []string {
	for {
		w.mu.Lock()
		var miss []string
		for k, n := range owed {
			if w.got[k] < n {
				miss = append(miss, k)
			}
		}
		ch := w.changed
		w.mu.Unlock()
		if len(miss) == 0 {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return miss
		}
	}
}

func drillFuzzStdio(t *testing.T) {
	ctx := testContext(t, 4*time.Minute)
	cmd := exec.Command(proxyBin(t), "serve", "--config", fuzzConfig(t), "--state", t.TempDir())
	awaitDaemonExit(t, cmd.Args[1:])
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	p := startProcess(t, "foldproxy (fuzzed stdio)", cmd)
	dumpOnFailure(t, "foldproxy (fuzzed stdio) stderr", stderr)
	w := &stdioWatch{changed: make(chan struct{}), got: map[string]int{}, atMark: map[string][2]int{}, kept: map[string]json.RawMessage{}}
	go w.read(stdout)

	send := func(line []byte) {
		t.Helper()
		if _, err := stdin.Write(append(line, '\n')); err != nil {
			t.Fatalf("writing to foldproxy's stdin: %v (exited: %v %v)", err, p.exited(), p.err)
		}
	}
	sentinel := 0
	mark := func() [2]int {
		t.Helper()
		sentinel++
		id := fmt.Sprintf("sentinel-%d", sentinel)
		send([]byte(fmt.Sprintf(`{"jsonrpc":"2.0","id":%q,"method":"ping"}`, id)))
		hctx, cancel := context.WithTimeout(ctx, fuzzHang)
		defer cancel()
		v, err := w.waitMark(hctx, "s"+id)
		if err != nil {
			t.Fatalf("no answer to ping %s within %v: foldproxy hangs or died (exited %v: %v): %v", id, fuzzHang, p.exited(), p.err, err)
		}
		return v
	}
	send([]byte(fmt.Sprintf(`{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":%q,"capabilities":{},"clientInfo":{"name":"drill-fuzz","version":"1"}}}`, protocolVersion)))
	send([]byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}`))
	stdioWaitTools(ctx, t, send, w, map[string]string{"flaky__work": `{}`, "replay__emit": `{"bytes":10}`})
	prev := mark()

	g := newFrameGen(uint64(fuzzSeed))
	owed := map[string]int{}
	var tally fuzzTally
	for i := 0; i < fuzzFrames; i++ {
		frame := bytes.ReplaceAll(g.next(), []byte{'\n'}, []byte{' '}) // one frame, one line
		want := wantFor(bytes.TrimSuffix(frame, []byte{'\r'}))
		send(frame)
		cur := mark()
		tally.frames++
		for _, k := range want.ids {
			owed[k]++
			tally.requests++
		}
		switch {
		case want.tooLarge:
			tally.tooLarge++
			if cur[1] <= prev[1] {
				t.Errorf("frame %d (%d bytes, over maxMessageBytes %d): no -32011 error before the next ping's answer", i, len(frame), fuzzMaxMessage)
			}
		case want.nullErr:
			tally.nullErrs++
			if cur[0] <= prev[0] {
				t.Errorf("frame %d is malformed but got no error with a null id: %q", i, truncate(string(frame), 300))
			}
		}
		prev = cur
	}
	dctx, cancel := context.WithTimeout(ctx, fuzzHang)
	miss := w.missing(dctx, owed)
	cancel()
	if len(miss) > 0 {
		t.Errorf("%d request ids got no response within %v of the last frame, e.g. %q", len(miss), fuzzHang, miss[:min(len(miss), 10)])
	}
	tally.answered = tally.requests - len(miss)

	// Valid calls still work.
	send([]byte(`{"jsonrpc":"2.0","id":"final-1","method":"tools/call","params":{"name":"flaky__work","arguments":{}}}`))
	send([]byte(`{"jsonrpc":"2.0","id":"final-2","method":"tools/call","params":{"name":"replay__emit","arguments":{"bytes":100}}}`))
	fctx, cancel := context.WithTimeout(ctx, fuzzHang)
	if miss := w.missing(fctx, map[string]int{"sfinal-1": 1, "sfinal-2": 1}); len(miss) > 0 {
		t.Errorf("valid tools/call after the frames: no answer for %v", miss)
	}
	cancel()
	for _, k := range []string{"sfinal-1", "sfinal-2"} {
		if !w.succeeded(k) {
			w.mu.Lock()
			t.Errorf("valid tools/call %s after the frames failed: %s", k[1:], truncate(string(w.kept[k]), 300))
			w.mu.Unlock()
		}
	}
	mark()

	w.mu.Lock()
	tally.invalidOut, tally.nonUTF8 = w.badN, w.nonUTF8
	bad, lines := append([]string(nil), w.bad...), w.lines
	w.mu.Unlock()
	if len(w.nonUTF8Lines) > 0 {
		t.Logf("output lines that are not valid UTF-8, e.g.: %q", w.nonUTF8Lines)
	}
	if tally.invalidOut > 0 {
		t.Errorf("%d invalid JSON-RPC messages on stdout, e.g.:\n%s", tally.invalidOut, joinLines(bad))
	}
	if p.exited() {
		t.Fatalf("foldproxy exited: %v", p.err)
	}
	// End of input: the proxy must exit cleanly, not crash.
	stdin.Close()
	select {
	case <-p.done:
		if p.err != nil {
			t.Errorf("foldproxy exited with %v after stdin closed, want status 0", p.err)
		}
	case <-time.After(30 * time.Second):
		t.Errorf("foldproxy did not exit within 30s of stdin closing")
	}
	if n := countLines(stderr.String(), "panic"); n > 0 {
		t.Errorf("foldproxy logged %d panics", n)
	}
	t.Logf("DRILL fuzz stdio [seed %d]: %d frames (%v), %d output lines; %d request-shaped, %d answered; %d malformed with a null-id error; %d oversized refused with -32011; "+
		"%d invalid messages out; %d output lines not valid UTF-8; process alive throughout, clean exit on EOF",
		fuzzSeed, tally.frames, g.kinds, lines, tally.requests, tally.answered, tally.nullErrs, tally.tooLarge, tally.invalidOut, tally.nonUTF8)
}

// stdioWaitTools calls each tool until every one succeeds: the upstreams
// connect in the background.
func stdioWaitTools(ctx context.Context, t *testing.T, send func([]byte), w *stdioWatch, calls map[string]string) {
	t.Helper()
	tools := sortedNames(calls)
	for i := 0; i < 300; i++ {
		all := true
		for _, name := range tools {
			id := fmt.Sprintf("probe-%d-%s", i, name)
			send([]byte(fmt.Sprintf(`{"jsonrpc":"2.0","id":%q,"method":"tools/call","params":{"name":%q,"arguments":%s}}`, id, name, calls[name])))
			hctx, cancel := context.WithTimeout(ctx, fuzzHang)
			miss := w.missing(hctx, map[string]int{"s" + id: 1})
			cancel()
			if len(miss) > 0 {
				t.Fatalf("no answer to %s within %v", id, fuzzHang)
			}
			if !w.succeeded("s" + id) {
				all = false
			}
		}
		if all {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	t.Fatalf("tools %v never became callable; last answers: %s", tools, truncate(fmt.Sprint(w.kept), 1000))
}

func sortedNames(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// ---- HTTP ----

func drillFuzzHTTP(t *testing.T) {
	ctx := testContext(t, 4*time.Minute)
	px := startDrillProxy(t, fuzzConfig(t), t.TempDir())
	hc := drillHTTPClient(2 * fuzzHTTPPosts)
	c := &drillClient{hc: hc, url: px.url}
	if err := c.initialize(ctx); err != nil {
		t.Fatal(err)
	}
	c.waitTools(ctx, t, "flaky__work", "replay__emit")

	g := newFrameGen(uint64(fuzzSeed) + 1)
	frames := make([][]byte, fuzzFrames)
	for i := range frames {
		frames[i] = g.next()
	}
	var (
		mu       sync.Mutex
		tally    fuzzTally
		statuses = map[int]int{}
		errs     []string
		errN     int
	)
	report := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		errN++
		if len(errs) < 15 {
			errs = append(errs, fmt.Sprintf(format, args...))
		}
	}
	next := make(chan int)
	var wg sync.WaitGroup
	for k := 0; k < fuzzHTTPPosts; k++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				frame := frames[i]
				want := wantFor(frame)
				pctx, cancel := context.WithTimeout(ctx, fuzzHang)
				r, err := c.post(pctx, frame)
				cancel()
				if err != nil {
					report("frame %d: POST failed (hang or crash?): %v", i, err)
					continue
				}
				fr := fuzzHTTPCheck(i, frame, want, r, report)
				mu.Lock()
				statuses[r.status]++
				tally.frames++
				tally.requests += len(want.ids)
				tally.answered += fr.answered
				tally.invalidOut += fr.invalid
				tally.nonUTF8 += fr.nonUTF8
				if want.tooLarge {
					tally.tooLarge++
				}
				if want.nullErr {
					tally.nullErrs++
				}
				mu.Unlock()
			}
		}()
	}
	for i := range frames {
		select {
		case next <- i:
		case <-ctx.Done():
			t.Errorf("the drill ran out of time at frame %d", i)
		}
		if ctx.Err() != nil {
			break
		}
	}
	close(next)
	wg.Wait()
	if errN > 0 {
		t.Errorf("%d problems; the first ones:\n%s", errN, joinLines(errs))
	}

	// Valid calls still work, on the same session and on a new one.
	for _, cl := range []*drillClient{c, {hc: hc, url: px.url}} {
		if cl.sid == "" {
			if err := cl.initialize(ctx); err != nil {
				t.Fatalf("a new session after the frames: %v", err)
			}
		}
		for _, call := range []struct {
			name string
			args map[string]any
		}{{"flaky__work", nil}, {"replay__emit", map[string]any{"bytes": 100}}} {
			out, err := cl.callTool(ctx, call.name, call.args)
			if err != nil || out.failed() {
				t.Errorf("session %s: %s after the frames: %v %s", cl.sid, call.name, err, outText(out))
			}
		}
	}
	if px.p.exited() {
		t.Fatalf("foldproxy exited: %v", px.p.err)
	}
	if n := countLines(px.p.out.String(), "panic"); n > 0 {
		t.Errorf("foldproxy logged %d panics", n)
	}
	t.Logf("DRILL fuzz http [seed %d]: %d frames (%v), statuses %v; %d request-shaped, %d answered; %d malformed, %d oversized (413); %d invalid messages out; %d bodies not valid UTF-8; process alive throughout",
		fuzzSeed+1, tally.frames, g.kinds, statuses, tally.requests, tally.answered, tally.nullErrs, tally.tooLarge, tally.invalidOut, tally.nonUTF8)
}

type fuzzHTTPResult struct{ answered, invalid, nonUTF8 int }

// fuzzHTTPCheck checks the answer to one POSTed frame.
func fuzzHTTPCheck(i int, frame []byte, want frameWant, r *httpReply, report func(string, ...any)) fuzzHTTPResult {
	var res fuzzHTTPResult
	show := truncate(string(frame), 200)
	if !utf8.Valid(r.body) {
		res.nonUTF8++
	}
	if want.tooLarge {
		if r.status != http.StatusRequestEntityTooLarge || !bytes.Contains(r.body, []byte("-32011")) {
			report("frame %d (%d bytes, over %d): status %d %s, want 413 with -32011", i, len(frame), fuzzMaxMessage, r.status, truncate(string(r.body), 200))
		}
		return res
	}
	switch r.status {
	case http.StatusAccepted:
		if len(r.body) != 0 {
			report("frame %d: 202 with a body %q", i, truncate(string(r.body), 200))
		}
		if len(want.ids) > 0 || want.nullErr {
			report("frame %d: 202 but %d requests and malformed=%v are owed an answer: %q", i, len(want.ids), want.nullErr, show)
		}
		return res
	case http.StatusOK, http.StatusBadRequest:
	default:
		report("frame %d: status %d is not one a POST may get: %s (frame %q)", i, r.status, truncate(string(r.body), 200), show)
		return res
	}
	var bodies []json.RawMessage
	switch r.ctype {
	case "application/json":
		bodies = []json.RawMessage{r.body}
	case "text/event-stream":
		bodies = sseData(r.body)
	default:
		report("frame %d: Content-Type %q", i, r.ctype)
		return res
	}
	got := map[string]int{}
	nullErr := false
	for _, b := range bodies {
		msgs, err := splitMessages(b)
		if err != nil {
			res.invalid++
			report("frame %d: body %v: %s", i, err, truncate(string(b), 200))
			continue
		}
		for _, m := range msgs {
			key, isResp, isErr, _, err := checkMessage(m)
			if err != nil {
				res.invalid++
				report("frame %d: %v: %s", i, err, truncate(string(m), 200))
				continue
			}
			if isResp && key == nullID && isErr {
				nullErr = true
			} else if isResp {
				got[key]++
			}
		}
	}
	if want.nullErr && !nullErr {
		report("frame %d is malformed but got no error with a null id (status %d): %q → %s", i, r.status, show, truncate(string(r.body), 200))
	}
	if r.status == http.StatusBadRequest && want.batchInit {
		return res // refused as a whole: initialize must come alone
	}
	owed := map[string]int{}
	for _, k := range want.ids {
		owed[k]++
	}
	for k, n := range owed {
		if got[k] < n {
			report("frame %d: request id %q got %d of %d responses: %q → %s", i, k, got[k], n, show, truncate(string(r.body), 300))
			res.answered += got[k]
		} else {
			res.answered += n
		}
	}
	return res
}
