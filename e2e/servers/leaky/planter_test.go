package main

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
)

func TestGenPlanterSecrets(t *testing.T) {
	a, b := genPlanter{seed: 3}.Secrets(), genPlanter{seed: 3}.Secrets()
	rules := map[string]bool{}
	for i, s := range a {
		rules[s.Rule] = true
		if s.Value == "" || !strings.Contains(s.Context, s.Value) {
			t.Errorf("secret %d (%s): context %q does not hold value %q", i, s.Rule, s.Context, s.Value)
		}
		if b[i] != s {
			t.Errorf("the same seed gave %v and %v", s, b[i])
		}
	}
	if len(rules) < 30 {
		t.Errorf("%d rule types planted, want at least 30", len(rules))
	}
	for _, want := range []string{"aws-access-token", "github-pat", "gitlab-pat", "slack-bot-token", "stripe-access-token",
		"gcp-api-key", "openai-api-key", "anthropic-api-key", "npm-access-token", "pypi-upload-token", "sendgrid-api-token",
		"twilio-api-key", "private-key", "jwt", "generic-api-key"} {
		if !rules[want] {
			t.Errorf("no %s secret planted", want)
		}
	}
	if c := (genPlanter{seed: 4}).Secrets(); c[0] == a[0] {
		t.Errorf("seeds 3 and 4 gave the same value %q", a[0].Value)
	}
}

func TestPayloadForms(t *testing.T) {
	l, err := newLeaky(genPlanter{seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	m := l.manifest()
	all, err := l.text("all")
	if err != nil {
		t.Fatal(err)
	}
	for enc, forms := range m.Forms {
		if len(forms) != len(m.Secrets) {
			t.Errorf("%d %s forms for %d secrets", len(forms), enc, len(m.Secrets))
		}
		for _, f := range forms {
			if !strings.Contains(l.forms[enc], f) || !strings.Contains(all, f) {
				t.Errorf("%s form %q is not in the payload", enc, f)
			}
		}
	}
	for i, f := range m.Forms["base64"] {
		dec, err := base64.StdEncoding.DecodeString(f)
		if err != nil || !strings.Contains(string(dec), m.Secrets[i].Value) {
			t.Errorf("base64 form %q does not decode to secret %d (%v)", f, i, err)
		}
	}
	// The json form holds the context line under two levels of escaping.
	for i, f := range m.Forms["json"] {
		var outer struct{ Config string }
		var inner struct{ Line string }
		if err := json.Unmarshal([]byte(f), &outer); err != nil {
			t.Fatalf("json form %d: %v", i, err)
		}
		if err := json.Unmarshal([]byte(outer.Config), &inner); err != nil || inner.Line != m.Secrets[i].Context {
			t.Errorf("json form %d holds %q (%v), want the context line", i, inner.Line, err)
		}
	}
	if _, err := l.text("rot13"); err == nil {
		t.Error("text(rot13): no error")
	}
}
