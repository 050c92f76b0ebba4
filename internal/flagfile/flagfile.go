// Package flagfile sets a flag.FlagSet from a YAML file whose keys are the
// flag names (`http-addr: 127.0.0.1:9400`), the config file of `gpud
// agent --config`. Flags given on the command line win; an unknown key or
// a bad value is an error "FILE:LINE: ...", and a file with many errors
// gives a bounded message, not one line per key.
package flagfile

import (
	"errors"
	"flag"
	"fmt"
	"sort"
	"strings"

	"github.com/goccy/go-yaml/ast"

	"github.com/gpud/gpud/internal/fileio"
	"github.com/gpud/gpud/internal/printable"
	"github.com/gpud/gpud/internal/strictyaml"
)

// MaxErrors bounds the errors one file reports: a flag set has tens of
// flags, so a file with more errors is not a config file, and its error
// should not be megabytes long.
const MaxErrors = 20

// FlagError is a bad flag value: "--name: what is wrong and what is
// allowed". A loader that knows which line of a file set the flag can
// point at that line instead (see [Apply]).
type FlagError struct {
	Flag string // the flag's name, without dashes
	Err  error
}

func (e *FlagError) Error() string { return "--" + e.Flag + ": " + e.Err.Error() }
func (e *FlagError) Unwrap() error { return e.Err }

// ApplyFile reads path (at most fileio.MaxConfigBytes) and applies it to
// fs as Apply does. The flag that names the file is "config".
func ApplyFile(fs *flag.FlagSet, path string) (map[string]int, error) {
	data, err := fileio.ReadFile(path, fileio.MaxConfigBytes)
	if err != nil {
		return nil, fmt.Errorf("--config: %w", err)
	}
	return Apply(fs, path, data)
}

// Apply sets the flags of fs that data, read from path, names and the
// command line did not set, and returns the line of each flag the file
// named. The key "config" (the flag naming the file) is refused. Every
// error line starts with path. The file goes through strictyaml.Parse
// (the guards of every YAML gpud reads: no library panic, no mapping wide
// enough to make the parser quadratic), and a panic while walking the
// library's tree is an error at the key being applied.
func Apply(fs *flag.FlagSet, path string, data []byte) (lines map[string]int, err error) {
	file, err := strictyaml.Parse(data)
	if err != nil {
		var ye *strictyaml.Error
		if errors.As(err, &ye) && ye.Line > 0 {
			return nil, &Error{Path: path, Line: ye.Line, Msg: fmt.Sprintf("%s (column %d)", printable.Text(ye.Msg), ye.Column), Err: err}
		}
		return nil, &Error{Path: path, Msg: printable.Text(err.Error()), Err: err}
	}
	at := 1 // the line being applied, for a panic in the library's tree
	defer func() {
		if r := recover(); r != nil {
			lines, err = nil, &Error{Path: path, Line: at, Err: strictyaml.ErrMalformed,
				Msg: printable.Text(fmt.Sprintf("%v (the YAML library failed: %v)", strictyaml.ErrMalformed, r))}
		}
	}()
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	lines = map[string]int{}
	var errs []error
	unknown := false // the first unknown key's error lists the keys
	for _, doc := range file.Docs {
		if doc == nil || doc.Body == nil {
			continue
		}
		at = max(lineOf(doc.Body), 1)
		mapping, ok := mappingOf(doc.Body)
		if !ok {
			return nil, fmt.Errorf("%s:%d: want a mapping of flag names to values", path, at)
		}
		for _, kv := range mapping.Values {
			at = max(lineOf(kv.Key), at)
			if len(errs) == MaxErrors {
				errs = append(errs, fmt.Errorf("%s:%d: too many errors, stopped here", path, at))
				return lines, errors.Join(errs...)
			}
			key := kv.Key.String()
			f := fs.Lookup(key)
			if f == nil || key == "config" {
				err := fmt.Errorf("%s:%d: unknown key %s", path, at, printable.Quote(key))
				if !unknown {
					err = fmt.Errorf("%w (keys are the flag names: %s)", err, flagNames(fs))
					unknown = true
				}
				errs = append(errs, err)
				continue
			}
			if _, dup := lines[key]; dup {
				errs = append(errs, fmt.Errorf("%s:%d: %s set twice (first on line %d)", path, at, key, lines[key]))
				continue
			}
			lines[key] = at
			if set[key] {
				continue
			}
			v, err := scalar(kv.Value)
			if err == nil {
				err = fs.Set(key, v)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("%s:%d: %s: %w", path, at, key, err))
			}
		}
	}
	return lines, errors.Join(errs...)
}

// Error is a file the YAML parser refused: "FILE:LINE: msg", or
// "FILE: msg" when Line is 0. Msg is printable; Err is the cause.
type Error struct {
	Path string
	Line int
	Msg  string
	Err  error
}

func (e *Error) Error() string {
	if e.Line == 0 {
		return fmt.Sprintf("%s: %s", e.Path, e.Msg)
	}
	return fmt.Sprintf("%s:%d: %s", e.Path, e.Line, e.Msg)
}

func (e *Error) Unwrap() error { return e.Err }

// lineOf is the line of a node's token, or 0.
func lineOf(n ast.Node) int {
	if tk := n.GetToken(); tk != nil && tk.Position != nil {
		return tk.Position.Line
	}
	return 0
}

// mappingOf returns a document body as a mapping; a one-key mapping parses
// as a MappingValueNode.
func mappingOf(n ast.Node) (*ast.MappingNode, bool) {
	switch m := n.(type) {
	case *ast.MappingNode:
		return m, true
	case *ast.MappingValueNode:
		return &ast.MappingNode{Values: []*ast.MappingValueNode{m}}, true
	}
	return nil, false
}

// scalar returns a YAML value as the string a flag parses; sequences of
// scalars become comma-separated lists. Mappings are refused.
func scalar(n ast.Node) (string, error) {
	switch v := n.(type) {
	case nil:
		return "", nil
	case *ast.SequenceNode:
		parts := make([]string, len(v.Values))
		for i, x := range v.Values {
			if _, ok := x.(*ast.SequenceNode); ok {
				return "", errors.New("want a value or a list of values, not nested lists")
			}
			s, err := scalar(x)
			if err != nil {
				return "", err
			}
			parts[i] = s
		}
		return strings.Join(parts, ","), nil
	case *ast.StringNode:
		return v.Value, nil
	case *ast.NullNode:
		return "", nil
	case *ast.MappingNode, *ast.MappingValueNode:
		return "", errors.New("want a value or a list of values, not a mapping")
	}
	return n.String(), nil
}

// flagNames lists fs's flags but "config", sorted, for the unknown-key
// error.
func flagNames(fs *flag.FlagSet) string {
	var names []string
	fs.VisitAll(func(f *flag.Flag) {
		if f.Name != "config" {
			names = append(names, f.Name)
		}
	})
	sort.Strings(names)
	return strings.Join(names, ", ")
}
