package modelwire

import (
	"strings"
	"testing"
)

// TestPrefixStable grows conversations turn by turn, as a client resends
// them, with the fold state following (a branch closes when its
// branch_return is answered, charges and cuts persist): every forwarded
// request must start with the bytes of the previous forwarded request up
// to its newest message, except where a branch closed since, and then
// still up to that branch's branch_create result. That is what keeps
// prompt caching hitting.
func TestPrefixStable(t *testing.T) {
	rnd := xorshift(7)
	checked := 0
	for i := 0; i < 60; i++ {
		data := make([]byte, 80)
		for j := range data {
			data[j] = rnd()
		}
		full := genScript(data)
		for _, d := range []Dialect{Anthropic, OpenAIChat, OpenAIResponses} {
			st := newFakeState()
			for _, b := range full.branches {
				b.Closed = false
				st.branches[b.ID] = &b
			}
			var prev []byte
			var prevFolded []string
			for n := 1; n <= len(full.turns); n++ {
				s := script{turns: full.turns[:n]}
				// Branches returned by now are closed.
				for _, tr := range s.turns {
					for _, c := range tr.calls {
						if strings.HasSuffix(c.name, "branch_return") {
							if id, _ := returnedID(c.result, ""); id != "" && st.branches[id] != nil {
								st.branches[id].Closed = true
								st.branches[id].Summary = "SUMMARY of " + id
							}
						}
					}
				}
				res := mustApply(t, d, s.render(d), st, Options{Guidance: Guidance{AfterTokens: 200}})
				if prev != nil {
					want := lastMessageStart(t, d, prev)
					for _, id := range res.Folded {
						if !containsStr(prevFolded, id) {
							want = min(want, createResultAt(t, d, prev, id))
						}
					}
					if cp := commonPrefix(prev, res.Body); cp < want {
						t.Fatalf("%s turn %d: forwarded requests differ at byte %d, before %d\nprev: %s\nnext: %s", d, n, cp, want, prev, res.Body)
					}
					checked++
				}
				prev, prevFolded = res.Body, res.Folded
			}
		}
	}
	if checked < 300 {
		t.Fatalf("only %d request pairs checked", checked)
	}
}

func containsStr(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}

func commonPrefix(a, b []byte) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// lastMessageStart is the offset of the newest message of a request.
func lastMessageStart(t *testing.T, d Dialect, body []byte) int {
	c, err := parseConv(d, body)
	if err != nil || len(c.msgs) == 0 {
		t.Fatalf("parse: %v", err)
	}
	return c.msgs[len(c.msgs)-1].sp.s
}

// createResultAt is the offset of branch id's branch_create result.
func createResultAt(t *testing.T, d Dialect, body []byte, id string) int {
	c, err := parseConv(d, body)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range c.msgs {
		for _, r := range m.results {
			if createdID(r.text) == id && hasSuffixTool(c.callName(r.callID), toolCreate) {
				return r.obj.s
			}
		}
	}
	return len(body)
}
