package codelint

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// prefixRe matches the "pkg: " that starts a message.
var prefixRe = regexp.MustCompile(`^([a-z0-9]+): `)

// TestErrorsNameTheirPackageOnce applies the error-prefix rule (see the
// package doc) to every non-test file of the module: no fmt.Errorf that
// starts with a package's prefix wraps a sentinel carrying the same
// prefix, and none wraps two such sentinels.
func TestErrorsNameTheirPackageOnce(t *testing.T) {
	root := filepath.Join("..", "..")
	pkgs := map[string][]*ast.File{} // dir -> files
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "bin") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		pkgs[filepath.Dir(path)] = append(pkgs[filepath.Dir(path)], f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, files := range pkgs {
		sentinels := sentinelPrefixes(files)
		for _, f := range files {
			ast.Inspect(f, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok || !isSel(call.Fun, "fmt", "Errorf") || len(call.Args) == 0 {
					return true
				}
				format, ok := stringLit(call.Args[0])
				if !ok {
					return true
				}
				checked++
				var wrapped []string
				for _, a := range call.Args[1:] {
					if id, ok := a.(*ast.Ident); ok && sentinels[id.Name] != "" {
						wrapped = append(wrapped, id.Name)
					}
				}
				pos := fset.Position(call.Pos())
				if m := prefixRe.FindStringSubmatch(format); m != nil {
					for _, s := range wrapped {
						if sentinels[s] == m[1] {
							t.Errorf("%s: %q starts with %q and wraps %s, which says it again: put the sentinel first (\"%%w: ...\")", pos, format, m[1]+":", s)
						}
					}
				}
				seen := map[string]string{}
				for _, s := range wrapped {
					if other, dup := seen[sentinels[s]]; dup {
						t.Errorf("%s: wraps %s and %s, both prefixed %q: drop the prefix of the one always wrapped by the other", pos, other, s, sentinels[s]+":")
					}
					seen[sentinels[s]] = s
				}
				return true
			})
		}
	}
	if checked < 100 {
		t.Fatalf("checked %d fmt.Errorf calls: the walk missed the module's source", checked)
	}
}

// sentinelPrefixes maps each package-level `var X = errors.New("p: ...")`
// to its prefix p.
func sentinelPrefixes(files []*ast.File) map[string]string {
	out := map[string]string{}
	for _, f := range files {
		for _, decl := range f.Decls {
			g, ok := decl.(*ast.GenDecl)
			if !ok || g.Tok != token.VAR {
				continue
			}
			for _, spec := range g.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, v := range vs.Values {
					call, ok := v.(*ast.CallExpr)
					if !ok || !isSel(call.Fun, "errors", "New") || len(call.Args) != 1 || i >= len(vs.Names) {
						continue
					}
					if msg, ok := stringLit(call.Args[0]); ok {
						if m := prefixRe.FindStringSubmatch(msg); m != nil {
							out[vs.Names[i].Name] = m[1]
						}
					}
				}
			}
		}
	}
	return out
}

func isSel(e ast.Expr, pkg, name string) bool {
	s, ok := e.(*ast.SelectorExpr)
	if !ok || s.Sel.Name != name {
		return false
	}
	id, ok := s.X.(*ast.Ident)
	return ok && id.Name == pkg
}

func stringLit(e ast.Expr) (string, bool) {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(lit.Value)
	return s, err == nil
}
