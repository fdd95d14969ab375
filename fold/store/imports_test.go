package store

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The store never imports fold or anything above it (doc.go): fold imports
// the store. Its only imports of foldproxy's are policy's leaves.
func TestImportsNothingAbove(t *testing.T) {
	allowed := map[string]bool{
		"github.com/foldproxy/foldproxy/policy/rawio":    true,
		"github.com/foldproxy/foldproxy/policy/jsonscan": true,
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		for _, imp := range f.Imports {
			path, err := strconv.Unquote(imp.Path.Value)
			if err != nil {
				t.Fatal(err)
			}
			if strings.HasPrefix(path, "github.com/foldproxy/foldproxy/") && !allowed[path] {
				t.Errorf("%s imports %s: the store may import only policy's leaves of foldproxy's packages", name, path)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no source files found")
	}
}
