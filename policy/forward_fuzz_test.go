package policy

import (
	"net"
	"strconv"
	"strings"
	"testing"
)

// FuzzParseHostPattern: any string is accepted or refused without a panic;
// an accepted one is lower case, has a port in range, and parses back to
// itself once written out again.
func FuzzParseHostPattern(f *testing.F) {
	for _, s := range []string{"api.anthropic.com", "localhost:8443", "*.corp.example", "[::1]:443", "::1",
		"127.0.0.1", "x.com:", "a.*.com", "*.", "https://x", "A.B.", "[::1]", "host:0", "h:65536", "*.1.2.3.4", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		host, port, err := ParseHostPattern(s)
		if err != nil {
			return
		}
		if host == "" || host != strings.ToLower(host) || port < 0 || port > 65535 {
			t.Fatalf("ParseHostPattern(%q) = %q, %d", s, host, port)
		}
		again := host
		if port != 0 {
			again = net.JoinHostPort(host, strconv.Itoa(port))
		}
		h2, p2, err := ParseHostPattern(again)
		if err != nil || h2 != host || p2 != port {
			t.Fatalf("ParseHostPattern(%q) = %q, %d; written out as %q it parses as %q, %d, %v", s, host, port, again, h2, p2, err)
		}
	})
}
