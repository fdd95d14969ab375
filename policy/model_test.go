package policy

import (
	"reflect"
	"testing"
)

func TestModelDefaults(t *testing.T) {
	got, err := Parse(nil)
	if err != nil {
		t.Fatal(err)
	}
	want := Model{AnthropicURL: "https://api.anthropic.com", OpenAIURL: "https://api.openai.com", MaxRequestBytes: 32 << 20,
		AutoFold: ModelAutoFold{KeepRecent: 1, Trigger: 2000, MinTokens: 100, MinBatch: 300, Oversize: 10000, KeepHead: 4000, KeepTail: 2000, MinRequests: 20},
		Prices:   ModelPrices{CacheRead: 0.1, CacheWrite: 1.25}}
	if !reflect.DeepEqual(got.Model, want) {
		t.Errorf("Model = %+v, want %+v", got.Model, want)
	}
	if got.Model.AutoFold.EffectiveMode() != "on" || !got.Model.AutoFold.OnSuperseded() || !got.Model.AutoFold.OnRepeats() {
		t.Errorf("automatic folding is not on by default: %+v", got.Model.AutoFold)
	}
	if !reflect.DeepEqual(Default().Model, want) {
		t.Errorf("Default().Model = %+v, want %+v", Default().Model, want)
	}
}

func TestModelValues(t *testing.T) {
	got, err := Parse([]byte(`{"model":{"anthropicURL":"http://127.0.0.1:9000","openaiURL":"https://gw.example.com/openai","maxRequestBytes":4096}}`))
	if err != nil {
		t.Fatal(err)
	}
	want := defaultModel()
	want.AnthropicURL, want.OpenAIURL, want.MaxRequestBytes = "http://127.0.0.1:9000", "https://gw.example.com/openai", 4096
	if !reflect.DeepEqual(got.Model, want) {
		t.Errorf("Model = %+v, want %+v", got.Model, want)
	}
}

func TestModelErrorsNameTheField(t *testing.T) {
	tests := []parseErrorCase{
		{`{"model":{"anthropicURL":"api.anthropic.com"}}`, "model.anthropicURL", "http"},
		{`{"model":{"anthropicURL":"ftp://x"}}`, "model.anthropicURL", "http"},
		{`{"model":{"openaiURL":"https://"}}`, "model.openaiURL", "no host"},
		{`{"model":{"openaiURL":"https://user:sk-secret@api.openai.com"}}`, "model.openaiURL", "credentials"},
		{`{"model":{"anthropicURL":"https://api.anthropic.com?x=1"}}`, "model.anthropicURL", "query"},
		{`{"model":{"anthropicURL":"%zz"}}`, "model.anthropicURL", "not a URL"},
		{`{"model":{"maxRequestBytes":10}}`, "model.maxRequestBytes", "minimum"},
		{`{"model":{"anthropicBase":"https://x"}}`, `unknown field "anthropicBase"`, "(at foldproxy.model.anthropicBase)"},
		{`{"model":{"autofold":{"mode":"aggressive"}}}`, "model.autofold.mode", `"on", "observe" or "off"`},
		{`{"model":{"autofold":{"keepRecent":-1}}}`, "model.autofold.keepRecent", "negative"},
		{`{"model":{"autofold":{"minTokens":10}}}`, "model.autofold.minTokens", "minimum of 50"},
		{`{"model":{"autofold":{"oversize":3000}}}`, "model.autofold.oversize", "keepHead (4000) and keepTail (2000)"},
		{`{"model":{"autofold":{"oversize":-2}}}`, "model.autofold.oversize", "-1 to turn the rule off"},
		{`{"model":{"autofold":{"exclude":["Read",""]}}}`, "model.autofold.exclude", "empty tool name"},
		{`{"model":{"autofold":{"keepRecnt":3}}}`, `unknown field "keepRecnt"`, "(at foldproxy.model.autofold.keepRecnt)"},
		{`{"model":{"prices":{"cacheRead":2}}}`, "model.prices.cacheRead", "at most 1"},
		{`{"model":{"prices":{"cacheWrite":0.05}}}`, "model.prices.cacheWrite", "at least cacheRead"},
	}
	checkParseErrors(t, tests)
}

func TestModelAutoFoldValues(t *testing.T) {
	got, err := Parse([]byte(`{"model":{"autofold":{"mode":"observe","keepRecent":4,"oversize":-1,"superseded":false,"exclude":["TodoWrite"]},"prices":{"cacheRead":0.5,"cacheWrite":1}}}`))
	if err != nil {
		t.Fatal(err)
	}
	a := got.Model.AutoFold
	if a.EffectiveMode() != "observe" || a.KeepRecent != 4 || a.Oversize != -1 || a.OnSuperseded() || !a.OnRepeats() || !reflect.DeepEqual(a.Exclude, []string{"TodoWrite"}) || a.Trigger != 2000 {
		t.Errorf("AutoFold = %+v", a)
	}
	if got.Model.Prices != (ModelPrices{CacheRead: 0.5, CacheWrite: 1}) {
		t.Errorf("Prices = %+v", got.Model.Prices)
	}
}
