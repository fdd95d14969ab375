package transparent

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestImportsNoCore pins what doc.go says: transparent reaches the core
// only through ForwardOptions.Model and the Remote interface, never by
// importing it (the core's tests import transparent).
func TestImportsNoCore(t *testing.T) {
	assertImportsNone(t, ".", "github.com/foldproxy/foldproxy/proxy")
}

// assertImportsNone fails when a non-test Go file in dir imports one of
// the packages named.
func assertImportsNone(t *testing.T, dir string, banned ...string) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no Go files in %s: %v", dir, err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			for _, b := range banned {
				if path == b {
					t.Errorf("%s imports %s", name, path)
				}
			}
		}
	}
}
