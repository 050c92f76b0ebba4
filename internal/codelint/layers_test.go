package codelint

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// module is the import path every layer rule is written against.
const module = "github.com/gpud/gpud"

// TestLayers applies the layer rules (see the package doc) to every Go
// file of the module: test kits (internal/testkit/...) are imported only
// by tests, test/ and other kits, and the rest of internal/ stays below
// pkg/: it imports no pkg/ package.
func TestLayers(t *testing.T) {
	root := filepath.Join("..", "..")
	checked := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if strings.HasPrefix(d.Name(), ".") && rel != "." || d.Name() == "testdata" || d.Name() == "vendor" || rel == "bin" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		checked++
		for _, imp := range f.Imports {
			p, err := strconv.Unquote(imp.Path.Value)
			if err != nil {
				return err
			}
			if msg := layerViolation(rel, p); msg != "" {
				t.Errorf("%s imports %s: %s", rel, p, msg)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 100 {
		t.Fatalf("checked %d Go files under %s: is the root right?", checked, root)
	}
}

// layerViolation says why the file at rel (slash-separated, from the
// module root) may not import path, or "" when it may.
func layerViolation(rel, path string) string {
	testkit := module + "/internal/testkit/"
	switch {
	case strings.HasPrefix(path, testkit):
		if strings.HasSuffix(rel, "_test.go") || strings.HasPrefix(rel, "test/") || strings.HasPrefix(rel, "internal/testkit/") {
			return ""
		}
		return "test kits are for tests (_test.go files, test/, other kits); move what production code needs out of internal/testkit"
	case strings.HasPrefix(path, module+"/pkg/"):
		if strings.HasPrefix(rel, "internal/") && !strings.HasPrefix(rel, "internal/testkit/") && !strings.HasSuffix(rel, "_test.go") {
			return "internal/ is below pkg/ (helpers pkg/ builds on); move the code that needs pkg/ into pkg/ or a test kit"
		}
	}
	return ""
}

// TestLayerViolation pins the rules on the paths they are about.
func TestLayerViolation(t *testing.T) {
	for _, c := range []struct {
		rel, path string
		ok        bool
	}{
		{"pkg/dra/driver.go", module + "/internal/testkit/testwait", false},
		{"cmd/gpud/agent.go", module + "/internal/testkit/schedtest", false},
		{"pkg/dra/driver_test.go", module + "/internal/testkit/testwait", true},
		{"test/dra_test.go", module + "/internal/testkit/schedtest", true},
		{"test/k8senv/env.go", module + "/internal/testkit/testwait", true},
		{"internal/testkit/schedtest/schedtest.go", module + "/pkg/dra", true},
		{"internal/fileio/fileio.go", module + "/pkg/dra", false},
		{"internal/fileio/fileio_test.go", module + "/pkg/dra", true},
		{"pkg/dra/driver.go", module + "/internal/fileio", true},
		{"internal/fileio/fileio.go", "k8s.io/api/core/v1", true},
	} {
		if got := layerViolation(c.rel, c.path) == ""; got != c.ok {
			t.Errorf("layerViolation(%s, %s) allowed = %v, want %v", c.rel, c.path, got, c.ok)
		}
	}
}
