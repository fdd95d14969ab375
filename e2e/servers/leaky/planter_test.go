package main

import (
	"encoding/base64"
	"regexp"
	"strings"
	"testing"
)

func TestFormatPlanterFormats(t *testing.T) {
	formats := map[string]*regexp.Regexp{
		"aws-access-token":    regexp.MustCompile(`^AKIA[A-Z2-7]{16}$`),
		"github-pat":          regexp.MustCompile(`^ghp_[0-9a-zA-Z]{36}$`),
		"slack-bot-token":     regexp.MustCompile(`^xoxb-[0-9]{12}-[0-9]{12}-[a-zA-Z0-9]{24}$`),
		"stripe-access-token": regexp.MustCompile(`^sk_live_[a-zA-Z0-9]{24}$`),
	}
	a, b := newFormatPlanter(3).Secrets(), newFormatPlanter(3).Secrets()
	if len(a) != len(formats) {
		t.Fatalf("%d secrets, want %d", len(a), len(formats))
	}
	for i, s := range a {
		re, ok := formats[s.Rule]
		if !ok || !re.MatchString(s.Value) {
			t.Errorf("secret %d: rule %q value %q does not have the rule's format", i, s.Rule, s.Value)
		}
		if b[i] != s {
			t.Errorf("the same seed gave %v and %v", s, b[i])
		}
	}
	if c := newFormatPlanter(4).Secrets(); c[0] == a[0] {
		t.Errorf("seeds 3 and 4 gave the same value %q", a[0].Value)
	}
}

func TestPayloadForms(t *testing.T) {
	l, err := newLeaky(newFormatPlanter(1))
	if err != nil {
		t.Fatal(err)
	}
	m := l.manifest()
	all, err := l.text("all")
	if err != nil {
		t.Fatal(err)
	}
	for enc, forms := range m.Forms {
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
	if _, err := l.text("rot13"); err == nil {
		t.Error("text(rot13): no error")
	}
}
