package modelfront

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http/httptest"
	"reflect"
	"testing"
	"testing/iotest"

	"github.com/foldproxy/foldproxy/fold/modelwire"
)

func TestUsageTap(t *testing.T) {
	gz := func(s string) string {
		var b bytes.Buffer
		w := gzip.NewWriter(&b)
		_, _ = w.Write([]byte(s))
		_ = w.Close()
		return b.String()
	}
	anthropicSSE := "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"usage\":{\"input_tokens\":12,\"cache_creation_input_tokens\":300,\"cache_read_input_tokens\":4000,\"output_tokens\":1}}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"text_delta\",\"text\":\"the \\\"usage\\\" word\"}}\n\n" +
		"event: message_delta\r\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":57}}\r\n\r\n"
	tests := []struct {
		name, ctype, enc, body string
		want                   Usage
	}{
		{"anthropic stream", "text/event-stream; charset=utf-8", "", anthropicSSE, Usage{true, 12, 4000, 300, 57}},
		{"anthropic json", "application/json", "", `{"id":"m","content":[],"usage":{"input_tokens":5,"cache_creation_input_tokens":0,"cache_read_input_tokens":90,"output_tokens":7}}`, Usage{true, 5, 90, 0, 7}},
		{"anthropic json gzip", "application/json", "gzip", gz(`{"usage":{"input_tokens":5,"cache_read_input_tokens":90,"output_tokens":7}}`), Usage{true, 5, 90, 0, 7}},
		{"anthropic stream gzip", "text/event-stream", "gzip", gz(anthropicSSE), Usage{true, 12, 4000, 300, 57}},
		{"chat stream", "text/event-stream", "", "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":1000,\"completion_tokens\":20,\"prompt_tokens_details\":{\"cached_tokens\":800}}}\n\ndata: [DONE]\n\n", Usage{true, 200, 800, 0, 20}},
		{"chat json", "application/json", "", `{"choices":[],"usage":{"prompt_tokens":50,"completion_tokens":3}}`, Usage{true, 50, 0, 0, 3}},
		{"responses stream", "text/event-stream", "", "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"usage\":null}}\n\nevent: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":600,\"input_tokens_details\":{\"cached_tokens\":512},\"output_tokens\":40}}}\n\n", Usage{true, 88, 512, 0, 40}},
		{"no usage", "text/event-stream", "", "data: {\"type\":\"ping\"}\n\n", Usage{}},
		{"other type", "text/plain", "", `{"usage":{"input_tokens":5}}`, Usage{}},
		{"brotli", "application/json", "br", "\x0b\x02\x80", Usage{}},
		{"broken gzip", "application/json", "gzip", "not gzip", Usage{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var u Usage
			rc := newUsageTap(io.NopCloser(iotest.OneByteReader(bytes.NewReader([]byte(tc.body)))), tc.ctype, tc.enc, &u, nil)
			got, err := io.ReadAll(rc)
			if err != nil || string(got) != tc.body {
				t.Fatalf("the answer was not relayed as it came: %v", err)
			}
			_ = rc.Close()
			if u != tc.want {
				t.Errorf("usage %+v, want %+v", u, tc.want)
			}
		})
	}
}

func TestUsageTapClosedEarly(t *testing.T) {
	var u Usage
	body := gzipOf(t, `{"usage":{"input_tokens":5}}`)
	rc := newUsageTap(io.NopCloser(bytes.NewReader(body)), "application/json", "gzip", &u, nil)
	buf := make([]byte, 3)
	_, _ = rc.Read(buf)
	if err := rc.Close(); err != nil {
		t.Fatal(err)
	}
	if u.Known {
		t.Fatal("usage read from an answer cut short")
	}
}

func gzipOf(t *testing.T, s string) []byte {
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	_, _ = w.Write([]byte(s))
	_ = w.Close()
	return b.Bytes()
}

func TestModelBill(t *testing.T) {
	var l modelLedger
	p := func(sums ...uint64) []modelwire.Piece {
		out := make([]modelwire.Piece, len(sums))
		for i, s := range sums {
			out[i] = modelwire.Piece{Start: i * 100, Sum: s}
		}
		return out
	}
	body := make([]byte, 400)
	// First request: everything written.
	b := l.observe("s", body, p(1, 2, 3, 4), 1000, 1000, 0.1, 1.25)
	if b.Held != 0 || b.Billed != 1250 || b.Without != 1250 {
		t.Fatalf("first: %+v", b)
	}
	// The same pieces and one more: the old ones read.
	b = l.observe("s", make([]byte, 500), p(1, 2, 3, 4, 5), 1200, 1200, 0.1, 1.25)
	if b.Held != 960 || b.Without != 0.1*1000+1.25*200 {
		t.Fatalf("grown: %+v", b)
	}
	// A fold changed the third message: read up to it.
	b = l.observe("s", make([]byte, 500), p(1, 2, 9, 4, 5, 6), 1500, 800, 0.1, 1.25)
	if b.Held != 800*200/500.0 {
		t.Fatalf("folded: %+v", b)
	}
	if b.Without != 0.1*1200+1.25*300 {
		t.Fatalf("without: %+v", b)
	}
	// Another session starts afresh.
	if b := l.observe("t", body, p(1, 2), 10, 10, 0.1, 1.25); b.Held != 0 {
		t.Fatalf("other session: %+v", b)
	}
}

func TestModelSessionNames(t *testing.T) {
	req := httptest.NewRequest("POST", "/v1/messages", nil)
	body := []byte(`{"messages":[{"role":"user","content":"hi"}]}`)
	a := modelSession(req, modelwire.Anthropic, body)
	req.Header.Set("X-Claude-Code-Session-Id", "0d1e-secret-ish")
	b := modelSession(req, modelwire.Anthropic, body)
	if a == b || len(b) != 19 || bytes.Contains([]byte(b), []byte("0d1e")) {
		t.Fatalf("sessions %q %q", a, b)
	}
	other := []byte(`{"messages":[{"role":"user","content":"another task"}]}`)
	if modelSession(httptest.NewRequest("POST", "/v1/messages", nil), modelwire.Anthropic, other) == a {
		t.Fatal("two conversations without a header share a session")
	}
	grown := []byte(`{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"hello"}]}`)
	if modelSession(httptest.NewRequest("POST", "/v1/messages", nil), modelwire.Anthropic, grown) != a {
		t.Fatal("a conversation without a header changed sessions as it grew")
	}
}

// TestRecallCallsFromAnswers: the calls of the added recall tool are read
// from the three dialects' streams and JSON answers, each as soon as it is
// whole, other tools' calls left alone.
func TestRecallCallsFromAnswers(t *testing.T) {
	tests := []struct {
		name, ctype, body string
		want              []modelwire.RecallCall
	}{
		{"anthropic stream", "text/event-stream",
			"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"branch_recall\",\"input\":{}}}\n\n" +
				"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":2,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_2\",\"name\":\"Bash\",\"input\":{}}}\n\n" +
				"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"handle\\\":\\\"af~1\"}}\n\n" +
				"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"command\\\":\\\"ls\\\"}\"}}\n\n" +
				"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"23\\\"}\"}}\n\n" +
				"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}\n\n",
			[]modelwire.RecallCall{{ID: "toolu_1", Input: `{"handle":"af~123"}`}}},
		{"responses stream", "text/event-stream",
			"event: response.output_item.done\ndata: {\"type\":\"response.output_item.done\",\"item\":{\"type\":\"function_call\",\"call_id\":\"call_9\",\"name\":\"branch_recall\",\"arguments\":\"{\\\"handle\\\":\\\"af~9\\\"}\"}}\n\n",
			[]modelwire.RecallCall{{ID: "call_9", Input: `{"handle":"af~9"}`}}},
		{"chat stream", "text/event-stream",
			"data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_c\",\"function\":{\"name\":\"branch_recall\",\"arguments\":\"\"}}]}}]}\n\n" +
				"data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\\\"handle\\\":\"}}]}}]}\n\n" +
				"data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"\\\"af~7\\\"}\"}}]}}]}\n\n" +
				"data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\ndata: [DONE]\n\n",
			[]modelwire.RecallCall{{ID: "call_c", Input: `{"handle":"af~7"}`}}},
		{"anthropic json", "application/json", `{"content":[{"type":"tool_use","id":"toolu_j","name":"branch_recall","input":{"handle":"af~5"}}]}`,
			[]modelwire.RecallCall{{ID: "toolu_j", Input: `{"handle":"af~5"}`}}},
		{"other tools only", "text/event-stream", "data: {\"type\":\"response.output_item.done\",\"item\":{\"type\":\"function_call\",\"call_id\":\"c\",\"name\":\"shell\",\"arguments\":\"{}\"}}\n\n", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got []modelwire.RecallCall
			var u Usage
			rc := newUsageTap(io.NopCloser(iotest.OneByteReader(bytes.NewReader([]byte(tc.body)))), tc.ctype, "", &u,
				newRecallCalls(func(c []modelwire.RecallCall) { got = append(got, c...) }))
			if b, err := io.ReadAll(rc); err != nil || string(b) != tc.body {
				t.Fatalf("relayed %q, %v", b, err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("recall calls %+v, want %+v", got, tc.want)
			}
		})
	}
}
