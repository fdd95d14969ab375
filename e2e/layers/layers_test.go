// Package layers pins the imports between foldproxy's own packages, so
// that the layering DESIGN.md draws (cmd → proxy → upstreams, intercept →
// fold → policy; policy imports nothing of ours) cannot rot silently.
package layers

import (
	"bufio"
	"bytes"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/foldproxy/foldproxy/"

// allowed is the import graph between foldproxy's non-test packages
// (e2e aside): each package and every package of ours it may import.
// A new edge is a design decision: add it here, in the same change, and
// make sure the layer rule below still holds.
var allowed = map[string][]string{
	"cmd/foldproxy": {"fold", "fold/memory", "fold/memory/badger", "fold/memory/qdrant", "fold/modelwire", "fold/store",
		"intercept", "intercept/secrets", "intercept/tokens", "policy", "policy/jsonscan", "policy/redact", "policy/statedir",
		"proxy", "proxy/attach", "proxy/modelfront", "proxy/transparent", "upstreams"},
	"fold":                  {"fold/memory", "fold/modelwire", "fold/store", "policy", "policy/jsonscan"},
	"fold/memory":           {"policy"},
	"fold/memory/badger":    {"fold/memory"},
	"fold/memory/qdrant":    {"fold/memory", "policy"},
	"fold/memory/storetest": {"fold/memory", "policy"},
	"fold/modelwire":        {"policy/jsonscan"},
	"fold/store":            {"policy/jsonscan", "policy/rawio"},
	"fold/store/storetest":  {"fold"},
	"intercept":             {"fold", "intercept/secrets", "intercept/tokens", "policy", "policy/jsonrpc", "policy/jsonscan", "policy/rawio", "policy/statedir"},
	"intercept/secrets":     {"fold", "policy", "policy/jsonscan"},
	"intercept/tokens":      {"policy", "policy/jsonscan"},
	"intercept/secretgen":   {},
	"policy":                {},
	"policy/jsonrpc":        {},
	"policy/jsonscan":       {},
	"policy/rawio":          {},
	"policy/redact":         {},
	"policy/statedir":       {},
	"proxy": {"fold", "intercept", "policy", "policy/jsonrpc", "policy/jsonscan", "policy/rawio",
		"proxy/guard", "upstreams"},
	"proxy/attach":      {"policy/jsonrpc", "policy/jsonscan", "policy/rawio", "proxy"},
	"proxy/guard":       {},
	"proxy/modelfront":  {"fold/modelwire", "proxy/guard"},
	"proxy/transparent": {"intercept", "policy", "policy/jsonscan", "policy/statedir", "proxy", "proxy/guard"},
	"upstreams":         {"policy/jsonrpc", "policy/jsonscan", "policy/rawio", "policy/redact"},
}

// below is the layer rule: the top-level folders a folder's packages may
// import (besides packages of their own folder).
var below = map[string][]string{
	"cmd":       {"proxy", "upstreams", "intercept", "fold", "policy"},
	"proxy":     {"upstreams", "intercept", "fold", "policy"},
	"upstreams": {"policy"},
	"intercept": {"fold", "policy"},
	"fold":      {"policy"},
	"policy":    {},
}

func top(pkg string) string {
	t, _, _ := strings.Cut(pkg, "/")
	return t
}

// ourImports lists, with go list, every non-test package of the module
// outside e2e and the packages of ours each imports.
func ourImports(t *testing.T) map[string][]string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "list", "-tags", "gore2regex", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, "./...")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.Bytes())
	}
	got := make(map[string][]string)
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || !strings.HasPrefix(f[0], module) {
			continue
		}
		pkg := strings.TrimPrefix(f[0], module)
		if pkg == "e2e" || strings.HasPrefix(pkg, "e2e/") {
			continue
		}
		deps := []string{}
		for _, imp := range f[1:] {
			if strings.HasPrefix(imp, module) {
				deps = append(deps, strings.TrimPrefix(imp, module))
			}
		}
		slices.Sort(deps)
		got[pkg] = deps
	}
	if len(got) == 0 {
		t.Fatalf("go list named no package of %s:\n%s", module, out)
	}
	return got
}

// TestImportsArePinned: every import between our packages is one the
// allowed graph names, no package of ours imports e2e, and the graph
// names no package or edge that is gone (so it stays the true picture).
func TestImportsArePinned(t *testing.T) {
	got := ourImports(t)
	for pkg, deps := range got {
		want, known := allowed[pkg]
		if !known {
			t.Errorf("package %s is not in the allowed graph: add it with the imports it may have", pkg)
			continue
		}
		for _, d := range deps {
			if d == "e2e" || strings.HasPrefix(d, "e2e/") {
				t.Errorf("%s imports %s: nothing outside e2e may import the e2e tree", pkg, d)
				continue
			}
			if !slices.Contains(want, d) {
				t.Errorf("%s imports %s, an edge the allowed graph does not have", pkg, d)
			}
		}
		for _, w := range want {
			if !slices.Contains(deps, w) {
				t.Errorf("the allowed graph lets %s import %s, which it no longer does: remove the edge", pkg, w)
			}
		}
	}
	for pkg := range allowed {
		if _, ok := got[pkg]; !ok {
			t.Errorf("the allowed graph names %s, which go list does not list", pkg)
		}
	}
}

// TestAllowedGraphKeepsTheLayers: the pinned graph itself obeys the layer
// rule, and the policy packages import nothing of ours.
func TestAllowedGraphKeepsTheLayers(t *testing.T) {
	for pkg, deps := range allowed {
		from := top(pkg)
		ok, known := below[from]
		if !known {
			t.Errorf("%s is in a top-level folder %q the layer rule does not know", pkg, from)
			continue
		}
		for _, d := range deps {
			if to := top(d); to != from && !slices.Contains(ok, to) {
				t.Errorf("%s → %s breaks the layers: %s may import only %v", pkg, d, from, ok)
			}
			if from == "policy" {
				t.Errorf("%s → %s: the policy packages import nothing of ours", pkg, d)
			}
		}
	}
}
