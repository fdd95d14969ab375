package main

import (
	"os"
	"strings"
	"testing"
)

// TestDropStartupPages unmaps this test binary's read-only pages and then
// keeps running code and reading read-only data, which the kernel maps
// back on access.
func TestDropStartupPages(t *testing.T) {
	if n := dropStartupPages(); n <= 0 {
		t.Fatalf("dropStartupPages = %d: the test binary's code was resident, so something must have been dropped", n)
	}
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), "VmRSS") {
		t.Fatalf("/proc/self/status without VmRSS after the drop: %.200s", data)
	}
	if got := strings.Repeat("ab", 3); got != "ababab" {
		t.Fatalf("strings.Repeat after the drop = %q", got)
	}
}
