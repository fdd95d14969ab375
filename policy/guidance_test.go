package policy

import (
	"testing"
)

func TestModelGuidance(t *testing.T) {
	got, err := Parse(nil)
	if err != nil {
		t.Fatal(err)
	}
	if g := got.Model.Guidance; !g.On() || g.Tokens() != 8000 || !g.OnRepeats() {
		t.Errorf("defaults: on %v, tokens %d, repeats %v; want true, 8000, true", g.On(), g.Tokens(), g.OnRepeats())
	}
	got, err = Parse([]byte(`{"model":{"guidance":{"enabled":false,"afterTokens":12000,"repeats":false}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if g := got.Model.Guidance; g.On() || g.Tokens() != 12000 || g.OnRepeats() {
		t.Errorf("values: on %v, tokens %d, repeats %v; want false, 12000, false", g.On(), g.Tokens(), g.OnRepeats())
	}
	checkParseErrors(t, []parseErrorCase{
		{`{"model":{"guidance":{"afterTokens":-1}}}`, "model.guidance", "negative"},
		{`{"model":{"guidance":{"afterTokens":10}}}`, "model.guidance", "minimum"},
		{`{"model":{"guidance":{"after":10}}}`, `unknown field "after"`, "(at foldproxy.model.guidance.after)"},
	})
}
