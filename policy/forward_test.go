package policy

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestProxyDefaultsAndValues(t *testing.T) {
	got, err := Parse(nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Proxy.InterceptHosts, []string{"api.anthropic.com", "api.openai.com"}) || !slices.Equal(got.Proxy.AllowPorts, []int{443}) || got.ProxyListen != "" {
		t.Errorf("defaults: %+v proxyListen %q", got.Proxy, got.ProxyListen)
	}
	got, err = Parse([]byte(`{"proxyListen":"127.0.0.1:8899","proxy":{"interceptHosts":["localhost:8443","*.example.com"],"allowPorts":[443,8443],"extraRootsFile":"roots.pem"}}`))
	if err != nil {
		t.Fatal(err)
	}
	want := Proxy{InterceptHosts: []string{"localhost:8443", "*.example.com"}, AllowPorts: []int{443, 8443}, ExtraRootsFile: "roots.pem"}
	if !slices.Equal(got.Proxy.InterceptHosts, want.InterceptHosts) || !slices.Equal(got.Proxy.AllowPorts, want.AllowPorts) || got.Proxy.ExtraRootsFile != want.ExtraRootsFile || got.ProxyListen != "127.0.0.1:8899" {
		t.Errorf("got %+v, want %+v", got.Proxy, want)
	}
	got, err = Parse([]byte(`{"proxy":{"interceptHosts":[]}}`))
	if err != nil || len(got.Proxy.InterceptHosts) != 0 {
		t.Errorf("an empty interceptHosts must intercept nothing: %v %v", got.Proxy.InterceptHosts, err)
	}
}

func TestProxyErrorsNameTheField(t *testing.T) {
	tests := []struct{ in, field, why string }{
		{`{"proxy":{"interceptHosts":["https://api.anthropic.com"]}}`, "proxy.interceptHosts[0]", "not a URL"},
		{`{"proxy":{"interceptHosts":["ok.com"," a"]}}`, "proxy.interceptHosts[1]", "spaces"},
		{`{"proxy":{"interceptHosts":["a b"]}}`, "proxy.interceptHosts[0]", "not a valid host"},
		{`{"proxy":{"interceptHosts":["x.com:99999"]}}`, "proxy.interceptHosts[0]", "bad port"},
		{`{"proxy":{"interceptHosts":["x.com:"]}}`, "proxy.interceptHosts[0]", "bad port"},
		{`{"proxy":{"interceptHosts":["a.*.com"]}}`, "proxy.interceptHosts[0]", "*"},
		{`{"proxy":{"interceptHosts":["*.1.2.3.4"]}}`, "proxy.interceptHosts[0]", "IP"},
		{`{"proxy":{"interceptHosts":["bad!host"]}}`, "proxy.interceptHosts[0]", "not a valid host"},
		{`{"proxy":{"allowPorts":[0]}}`, "proxy.allowPorts[0]", "not a TCP port"},
		{`{"proxy":{"allowPorts":[443,70000]}}`, "proxy.allowPorts[1]", "not a TCP port"},
		{`{"proxy":{"intercept":[]}}`, `unknown field "intercept"`, ""},
	}
	for _, tt := range tests {
		_, err := Parse([]byte(tt.in))
		if err == nil {
			t.Errorf("Parse(%s): no error, want one naming %s", tt.in, tt.field)
			continue
		}
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("Parse(%s): %v does not wrap ErrInvalid", tt.in, err)
		}
		if !strings.Contains(err.Error(), tt.field) || !strings.Contains(err.Error(), tt.why) {
			t.Errorf("Parse(%s) = %q, want it to name %s and say %q", tt.in, err, tt.field, tt.why)
		}
	}
}

func TestParseHostPattern(t *testing.T) {
	for in, want := range map[string]struct {
		host string
		port int
	}{
		"API.Anthropic.com.": {"api.anthropic.com", 0},
		"localhost:8443":     {"localhost", 8443},
		"*.example.com":      {"*.example.com", 0},
		"127.0.0.1":          {"127.0.0.1", 0},
		"[::1]:443":          {"::1", 443},
		"::1":                {"::1", 0},
	} {
		h, p, err := ParseHostPattern(in)
		if err != nil || h != want.host || p != want.port {
			t.Errorf("ParseHostPattern(%q) = %q, %d, %v; want %q, %d", in, h, p, err, want.host, want.port)
		}
	}
}
