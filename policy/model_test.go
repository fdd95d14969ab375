package policy

import (
	"testing"
)

func TestModelDefaults(t *testing.T) {
	got, err := Parse(nil)
	if err != nil {
		t.Fatal(err)
	}
	want := Model{AnthropicURL: "https://api.anthropic.com", OpenAIURL: "https://api.openai.com", MaxRequestBytes: 32 << 20}
	if got.Model != want {
		t.Errorf("Model = %+v, want %+v", got.Model, want)
	}
	if Default().Model != want {
		t.Errorf("Default().Model = %+v, want %+v", Default().Model, want)
	}
}

func TestModelValues(t *testing.T) {
	got, err := Parse([]byte(`{"model":{"anthropicURL":"http://127.0.0.1:9000","openaiURL":"https://gw.example.com/openai","maxRequestBytes":4096}}`))
	if err != nil {
		t.Fatal(err)
	}
	want := Model{AnthropicURL: "http://127.0.0.1:9000", OpenAIURL: "https://gw.example.com/openai", MaxRequestBytes: 4096}
	if got.Model != want {
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
	}
	checkParseErrors(t, tests)
}
