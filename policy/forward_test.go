package policy

import (
	"slices"
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
	tests := []parseErrorCase{
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
		{`{"proxy":{"intercept":[]}}`, `unknown field "intercept"`, "(at foldproxy.proxy.intercept)"},
		{`{"proxy":{"mcp":[{"url":"http://mcp.example.com/mcp"}]}}`, "proxy.mcp[0].url", "https://"},
		{`{"proxy":{"mcp":[{"url":"https://mcp.example.com:8443/mcp"}]}}`, "proxy.mcp[0].url", "not in proxy.allowPorts"},
		{`{"proxy":{"mcp":[{"url":"https://u:p@mcp.example.com/mcp"}]}}`, "proxy.mcp[0].url", "without user"},
		{`{"proxy":{"mcp":[{"url":"https://bad!host/mcp"}]}}`, "proxy.mcp[0].url", "host"},
		{`{"proxy":{"mcp":[{"url":"https://a.com/mcp"},{"url":"https://a.com/sse"}]}}`, "proxy.mcp[1].name", "already the name of proxy.mcp[0]"},
		{`{"proxy":{"mcp":[{"url":"https://a.com/mcp","name":"a b"}]}}`, "proxy.mcp[0].name", "without spaces"},
	}
	checkParseErrors(t, tests)
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

func TestRemoteMCP(t *testing.T) {
	got, err := Parse([]byte(`{"proxy":{"allowPorts":[443,8443],"mcp":[{"url":"https://MCP.Example.com/mcp","name":"ex"},{"url":"https://localhost:8443/sse","foldTools":false}]}}`))
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Proxy.MCP) != 2 || !got.Proxy.MCP[0].Folds() || got.Proxy.MCP[1].Folds() {
		t.Fatalf("proxy.mcp = %+v: want two servers, fold tools on the first only", got.Proxy.MCP)
	}
	for in, want := range map[string]string{
		"https://MCP.Example.com/mcp": "mcp.example.com:443",
		"https://localhost:8443/sse":  "localhost:8443",
		"https://[::1]:9/":            "[::1]:9",
		"https://x.com":               "x.com:443",
	} {
		u, err := ParseRemoteURL(in)
		if err != nil || u.Host != want || u.Path == "" {
			t.Errorf("ParseRemoteURL(%q) = %v, %v; want host %s and a path", in, u, err, want)
		}
	}
}
