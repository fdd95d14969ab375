package guard

import (
	"encoding/base64"
	"errors"
	"net/http/httptest"
	"testing"
)

func TestNewToken(t *testing.T) {
	tests := []struct {
		token    string
		loopback bool
		want     error
		need     bool
	}{
		{"", true, nil, false},
		{"", false, ErrTokenRequired, false},
		{"s3cret", false, nil, true},
		{" s3cret", true, ErrTokenMalformed, false},
		{"s3\ncret", true, ErrTokenMalformed, false},
	}
	for _, tt := range tests {
		tok, err := NewToken(tt.token, tt.loopback)
		if !errors.Is(err, tt.want) || (err == nil && tok.Required() != tt.need) {
			t.Errorf("NewToken(%q, %v) = required %v, %v; want %v, %v", tt.token, tt.loopback, tok.Required(), err, tt.need, tt.want)
		}
	}
}

// TestFrontToken pins the wording every front's options error carries:
// the front's name and the field, Token.
func TestFrontToken(t *testing.T) {
	tests := []struct {
		token    string
		loopback bool
		want     string
	}{
		{"", false, "model front: Token is required when the listen address is not loopback"},
		{" s3cret", true, "model front: Token must not contain spaces at its ends or line breaks"},
		{"s3cret", false, ""},
	}
	for _, tt := range tests {
		tok, err := FrontToken("model front", tt.token, tt.loopback)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != tt.want {
			t.Errorf("FrontToken(%q, %v) err = %q, want %q", tt.token, tt.loopback, got, tt.want)
		}
		if err == nil && !tok.Required() {
			t.Errorf("FrontToken(%q, %v) does not require the token", tt.token, tt.loopback)
		}
	}
}

func TestTokenHeaders(t *testing.T) {
	tok, err := NewToken("s3cret", false)
	if err != nil {
		t.Fatal(err)
	}
	basic := func(user, pass string) string {
		return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
	}
	tests := []struct {
		header, value string
		bearer, proxy bool
	}{
		{"Authorization", "Bearer s3cret", true, false},
		{"Authorization", "bearer  s3cret ", true, false},
		{"Authorization", "Bearer wrong", false, false},
		{"Authorization", "Basic s3cret", false, false},
		{"Proxy-Authorization", "Bearer s3cret", false, true},
		{"Proxy-Authorization", basic("foldproxy", "s3cret"), false, true},
		{"Proxy-Authorization", basic("foldproxy", " s3cret"), false, false},
		{"Proxy-Authorization", basic("foldproxy", "wrong"), false, false},
		{"Proxy-Authorization", "Basic !!!", false, false},
		{"Proxy-Authorization", "Digest s3cret", false, false},
	}
	for _, tt := range tests {
		r := httptest.NewRequest("GET", "http://127.0.0.1/", nil)
		r.Header.Set(tt.header, tt.value)
		if got := tok.Bearer(r); got != tt.bearer {
			t.Errorf("Bearer with %s: %q = %v, want %v", tt.header, tt.value, got, tt.bearer)
		}
		if got := tok.Proxy(r); got != tt.proxy {
			t.Errorf("Proxy with %s: %q = %v, want %v", tt.header, tt.value, got, tt.proxy)
		}
	}
	var none Token
	if r := httptest.NewRequest("GET", "/", nil); !none.Bearer(r) || !none.Proxy(r) || !none.Match("anything") {
		t.Error("the zero Token refused a request; it requires nothing")
	}
	need, sum := tok.Sum()
	if !MatchSum(need, sum, "s3cret") || MatchSum(need, sum, "other") {
		t.Error("MatchSum disagrees with Match")
	}
}

func TestRefusal(t *testing.T) {
	allowed, err := NewOrigins([]string{"https://app.example/"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewOrigins([]string{"https://app.example/path"}); err == nil {
		t.Error("NewOrigins accepted an origin with a path")
	}
	tests := []struct {
		host, origin string
		loopback     bool
		refused      bool
	}{
		{"127.0.0.1:8080", "", true, false},
		{"evil.example:8080", "", true, true},
		{"localhost:8080", "http://localhost:3000", true, false},
		{"localhost:8080", "http://evil.example", true, true},
		{"localhost:8080", "https://APP.example", true, false},
		{"proxy.example:8080", "http://proxy.example:8080", false, false},
		{"proxy.example:8080", "http://other.example", false, true},
		{"[::1]:9", "null", true, true},
	}
	for _, tt := range tests {
		r := httptest.NewRequest("POST", "http://"+tt.host+"/mcp", nil)
		r.Host = tt.host
		if tt.origin != "" {
			r.Header.Set("Origin", tt.origin)
		}
		if got := Refusal(r, tt.loopback, allowed); (got != "") != tt.refused {
			t.Errorf("Refusal(Host %q, Origin %q, loopback %v) = %q, want refused %v", tt.host, tt.origin, tt.loopback, got, tt.refused)
		}
	}
}

func TestIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:8080": true, "[::1]:0": true, "localhost:9": true, "127.1.2.3": true,
		":8080": false, "0.0.0.0:80": false, "example.com:80": false,
	} {
		if got := IsLoopback(addr); got != want {
			t.Errorf("IsLoopback(%q) = %v, want %v", addr, got, want)
		}
	}
}
