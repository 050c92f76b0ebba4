// Package strictyaml decodes the YAML (and JSON) files gpud's users write,
// with the project's one YAML library, refusing what a lenient decoder
// would silently change: unknown fields, duplicate keys, and numbers with
// a fraction or exponent (which the library truncates into integer fields,
// so `count: 4.5` would become 4). gpud's config files have no fractional
// fields. Errors start with `[line:column]`.
package strictyaml

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"
)

// Unmarshal decodes data into v strictly (see the package comment). A
// panic inside the YAML library (it has some on malformed input, such as a
// tag on a sequence value) is returned as an error, not a crash.
func Unmarshal(data []byte, v any) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w (the YAML decoder failed: %v)", ErrMalformed, r)
		}
	}()
	if err := checkWidth(data); err != nil {
		return err
	}
	f, err := parser.ParseBytes(data, 0)
	if err != nil {
		return errors.New(yaml.FormatError(err, false, false))
	}
	if len(f.Docs) > 0 {
		if err := checkWholeNumbers(f.Docs[0].Body, reflect.TypeOf(v), 0); err != nil {
			return err
		}
	}
	if err := yaml.UnmarshalWithOptions(data, v, yaml.Strict(), yaml.DisallowUnknownField()); err != nil {
		return errors.New(yaml.FormatError(err, false, false))
	}
	return nil
}

// checkWholeNumbers walks the document along the Go type it decodes into
// and refuses, in integer fields, any value that is not a plain integer:
// the library would truncate 4.5 and 1e3 and parse "4" from a string.
// (Its CustomUnmarshaler option would do this per field, but reformats the
// whole document for every value: minutes on a 4,000-line file.)
func checkWholeNumbers(n ast.Node, t reflect.Type, depth int) error {
	if n == nil || t == nil || depth > maxDepth {
		return nil
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch x := n.(type) {
	case *ast.TagNode:
		return checkWholeNumbers(x.Value, t, depth+1)
	case *ast.AnchorNode:
		return checkWholeNumbers(x.Value, t, depth+1)
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		switch n.(type) {
		case *ast.IntegerNode, *ast.NullNode, *ast.AliasNode:
			return nil
		}
		tk := n.GetToken()
		if tk == nil {
			return nil
		}
		return fmt.Errorf("[%d:%d] %s is not a whole number", tk.Position.Line, tk.Position.Column, tk.Value)
	case reflect.Struct, reflect.Map:
		for _, mv := range mappingValues(n) {
			var ft reflect.Type
			if t.Kind() == reflect.Map {
				ft = t.Elem()
			} else if tk := mv.Key.GetToken(); tk != nil {
				ft = fieldType(t, tk.Value)
			}
			if err := checkWholeNumbers(mv.Value, ft, depth+1); err != nil {
				return err
			}
		}
	case reflect.Slice, reflect.Array:
		if seq, ok := n.(*ast.SequenceNode); ok {
			for _, item := range seq.Values {
				if err := checkWholeNumbers(item, t.Elem(), depth+1); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// maxDepth stops the walk on absurdly nested documents (the decoder then
// reports them or fills only what the type holds).
const maxDepth = 64

func mappingValues(n ast.Node) []*ast.MappingValueNode {
	switch m := n.(type) {
	case *ast.MappingNode:
		return m.Values
	case *ast.MappingValueNode:
		return []*ast.MappingValueNode{m}
	}
	return nil
}

// fieldType is the type of t's field decoded from key (its yaml tag name),
// or nil.
func fieldType(t reflect.Type, key string) reflect.Type {
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		if name == key {
			return f.Type
		}
	}
	return nil
}

// MaxKeysPerLevel bounds the lines at one indentation level of one block
// (the keys of one block mapping). The YAML library's parser takes time
// quadratic in the keys of a block mapping (200,000 keys: minutes), so
// wider files are refused before parsing. gpud's files stay far below it.
const MaxKeysPerLevel = 4096

// ErrTooWide is returned (wrapped) for a file with more than
// [MaxKeysPerLevel] keys in one block.
var ErrTooWide = errors.New("too many keys in one mapping")

// checkWidth counts, per indentation, the lines since the last shallower
// line: an upper bound on the keys of each block mapping. Blank lines,
// comments and list items ("- ") do not count; a list item or shallower
// line ends the deeper blocks.
func checkWidth(data []byte) error {
	var counts []int // counts[i]: lines at indent i in the current block
	line := 0
	for len(data) > 0 {
		line++
		var l []byte
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			l, data = data[:i], data[i+1:]
		} else {
			l, data = data, nil
		}
		rest := bytes.TrimLeft(l, " ")
		indent := len(l) - len(rest)
		if len(bytes.TrimSpace(rest)) == 0 || rest[0] == '#' {
			continue
		}
		if indent+1 < len(counts) {
			counts = counts[:indent+1]
		}
		for len(counts) <= indent {
			counts = append(counts, 0)
		}
		if rest[0] == '-' {
			counts[indent] = 0
			continue
		}
		if counts[indent]++; counts[indent] > MaxKeysPerLevel {
			return fmt.Errorf("[%d:%d] %w: more than %d at one level", line, indent+1, ErrTooWide, MaxKeysPerLevel)
		}
	}
	return nil
}

// ErrMalformed is returned (wrapped) for input that made the YAML library
// panic; the error says so instead of crashing the process.
var ErrMalformed = errors.New("malformed YAML")
