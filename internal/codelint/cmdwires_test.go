package codelint

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// flagMethods are the methods a flag option struct may have (see the
// package doc): flag.Value's, flag.Getter's and the bool-flag marker,
// binding to a flag set, and checking the values it holds.
var flagMethods = map[string]bool{
	"String": true, "Set": true, "Get": true, "IsBoolFlag": true,
	"register": true, "validate": true,
}

// TestCmdOnlyWires applies the cmd-wires rule (see the package doc) to
// the non-test files of cmd/gpud: every type declared there with methods
// is a flag option struct, whose methods are all flagMethods.
func TestCmdOnlyWires(t *testing.T) {
	dir := filepath.Join("..", "..", "cmd", "gpud")
	methods, err := cmdMethods(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(methods) == 0 {
		t.Fatalf("no methods found in %s: is the path right?", dir)
	}
	for _, m := range methods {
		if flagMethods[m.method] {
			continue
		}
		t.Errorf("%s: %s is not a flag option struct's method (%s): cmd/gpud only wires; "+
			"move %s into the package that owns it (a type with its own Config and Validate there), or make it a function of the wiring",
			m.pos, m.name, strings.Join(slices.Sorted(mapKeys(flagMethods)), ", "), m.typ)
	}
}

type cmdMethod struct {
	pos               token.Position
	typ, method, name string // name is "typ.method"
}

// cmdMethods returns every method declared in the non-test Go files of
// dir.
func cmdMethods(dir string) ([]cmdMethod, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	var out []cmdMethod
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv == nil || len(fd.Recv.List) != 1 {
				continue
			}
			typ := recvType(fd.Recv.List[0].Type)
			out = append(out, cmdMethod{pos: fset.Position(fd.Pos()), typ: typ, method: fd.Name.Name, name: typ + "." + fd.Name.Name})
		}
	}
	return out, nil
}

// recvType is the name of a receiver's type: T for T, *T, T[P] and *T[P].
func recvType(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.StarExpr:
		return recvType(e.X)
	case *ast.IndexExpr:
		return recvType(e.X)
	case *ast.IndexListExpr:
		return recvType(e.X)
	case *ast.Ident:
		return e.Name
	}
	return fmt.Sprintf("%T", e)
}

func mapKeys(m map[string]bool) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}
