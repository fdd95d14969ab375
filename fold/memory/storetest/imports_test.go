package storetest

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImportsNoE2E pins the package's doc: storetest, a library package the
// backends' tests import, depends on nothing of the e2e tree.
func TestImportsNoE2E(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) == 0 {
		t.Fatal("go list listed no dependencies: the test checks nothing")
	}
	for _, p := range deps {
		if strings.Contains(p, "/foldproxy/e2e") {
			t.Errorf("storetest depends on %s, of the e2e tree", p)
		}
	}
}
