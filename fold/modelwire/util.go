package modelwire

import (
	"strings"
	"unicode/utf8"
)

// alignRune moves n down to the start of a UTF-8 sequence of s.
func alignRune(s string, n int) int {
	if n >= len(s) {
		return len(s)
	}
	if n < 0 {
		return 0
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return n
}

// hasSuffixTool reports whether a tool name names fold tool t: exactly, or
// with a client's or proxy's prefix ("mcp__foldproxy__branch_create",
// "foldproxy_branch_create", "foldproxy.branch_create").
func hasSuffixTool(name, t string) bool {
	if name == t {
		return true
	}
	if !strings.HasSuffix(name, t) {
		return false
	}
	c := name[len(name)-len(t)-1]
	return c == '_' || c == '.' || c == '/' || c == '-' || c == ':'
}
