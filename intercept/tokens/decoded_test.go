package tokens

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/foldproxy/foldproxy/intercept/secrets"
	"github.com/foldproxy/foldproxy/policy"
	"github.com/foldproxy/foldproxy/policy/jsonscan"
)

// TestDecodedSharedWithCount: the texts the count takes from the scan's
// decoding (secrets.Decoded) are exactly the texts it decodes itself, on every
// trajectory output and on texts made to differ (escapes of every kind,
// surrogate pairs and lone surrogates, invalid UTF-8, several blocks, the
// other methods' shapes), and so are the counts, with and without a limit.
func TestDecodedSharedWithCount(t *testing.T) {
	s, err := secrets.NewScrubber(policy.Scrub{Timeout: policy.Duration(time.Hour)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := newCounter(t, "")
	type tc struct {
		method string
		res    json.RawMessage
	}
	var cases []tc
	for _, o := range trajectoryOutputs(t) {
		cases = append(cases, tc{"tools/call", textResult(t, o)})
	}
	for _, r := range []string{
		`{"content":[{"type":"text","text":"plain"}]}`,
		`{"content":[{"type":"text","text":"a\nb\t\"q\" \\ \/ \b\f\r \u00e9\u4e2d \ud83d\ude00 end"}]}`,
		`{"content":[{"type":"text","text":"lone \ud800 high, \udc00 low, \ud800\u0041 pair broken"}]}`,
		"{\"content\":[{\"type\":\"text\",\"text\":\"bad \xff\xfe utf8 \\n after\"}]}",
		`{"isError":false, "content" : [ {"type":"image","data":"iVBORw0KGgoAAAANSUhEUgAA","mimeType":"image/png"}, {"text":"second\\n\"x\"","type":"text"},{"type":"text","text":""} ] }`,
		`{"content":[{"type":"resource","resource":{"uri":"file:///a","text":"res\ttext\n"}}],"structuredContent":{"k":"v\n"}}`,
		`  {"content":[{"type":"text","text":"\u0000nul and \\u0041 literal"}]}  `,
	} {
		cases = append(cases, tc{"tools/call", json.RawMessage(r)})
	}
	cases = append(cases,
		tc{"resources/read", json.RawMessage(`{"contents":[{"uri":"a","text":"one\ntwo"},{"uri":"b","text":"x\u00e9"}]}`)},
		tc{"prompts/get", json.RawMessage(`{"description":"d\n\"e\"","messages":[{"role":"user","content":{"type":"text","text":"m\\n\t1"}}]}`)},
	)
	shared := 0
	for i, k := range cases {
		out, _, dec, err := s.ScrubJSONUntil(context.Background(), time.Now().Add(time.Hour), k.res)
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		if string(out) != string(k.res) {
			if dec != nil {
				t.Errorf("case %d: the scan edited the result and still handed on its decoding", i)
			}
			continue // a secret was found (the trajectories hold a few)
		}
		if dec == nil || !dec.Of(out) {
			t.Fatalf("case %d: the scan handed on no decoding of the result", i)
		}
		sh, err := c.parseResult(k.method, out)
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		ref, _ := c.parseResult(k.method, out)
		for j := range sh.items {
			it := &sh.items[j]
			it.useDecoded(out, dec)
			if !it.isText {
				continue
			}
			want, err := ref.items[j].fullText()
			if err != nil {
				t.Fatalf("case %d item %d: %v", i, j, err)
			}
			if it.decoded {
				shared++
				if it.text != want {
					t.Errorf("case %d item %d: shared text %q, decoded %q", i, j, it.text, want)
				}
			}
		}
		for _, lim := range []int{-1, 0, 5, 100} {
			n1, o1, err1 := c.CountResult(k.method, out, lim)
			var fl IsError
			n2, o2, err2 := c.countResult(k.method, out, lim, dec, &fl)
			if n1 != n2 || o1 != o2 || (err1 == nil) != (err2 == nil) {
				t.Errorf("case %d limit %d: count %d %v %v with the shared texts, %d %v %v without", i, lim, n2, o2, err2, n1, o1, err1)
			}
			if fl != IsErrorUnknown && (fl == IsErrorTrue) != isErrorRef(out) {
				t.Errorf("case %d: the count read isError %v, isErrorResult %v", i, fl == IsErrorTrue, isErrorRef(out))
			}
		}
	}
	if shared < len(cases)*9/10 {
		t.Errorf("%d texts shared over %d results: the shared path is not taken", shared, len(cases))
	}
}

// isErrorRef is intercept's isErrorResult (the budget's reading of
// "isError"), which budget_test pins the count's reading to as well.
func isErrorRef(result []byte) bool {
	raw := jsonscan.TrimSpace(result)
	ms, err := jsonscan.Object(raw)
	if err != nil {
		return false
	}
	for _, m := range ms {
		if m.Key == "isError" {
			return string(raw[m.Value.Start:m.Value.End]) == "true"
		}
	}
	return false
}
