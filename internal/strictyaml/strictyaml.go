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
	"github.com/goccy/go-yaml/token"
)

// Unmarshal decodes data into v strictly (see the package comment). A
// panic inside the YAML library (it has some on malformed input, such as a
// tag on a sequence value) is returned as an error, not a crash.
func Unmarshal(data []byte, v any) (err error) {
	defer recoverMalformed(&err)
	f, err := Parse(data)
	if err != nil {
		return err
	}
	if len(f.Docs) > 0 {
		if err := checkWholeNumbers(f.Docs[0].Body, reflect.TypeOf(v), 0); err != nil {
			return err
		}
	}
	if err := yaml.UnmarshalWithOptions(data, v, yaml.Strict(), yaml.DisallowUnknownField()); err != nil {
		return libraryError(err)
	}
	return nil
}

// Parse returns the YAML library's syntax tree of data, for callers that
// need more than a typed decode (the line of each key, say), with
// Unmarshal's guards: a file wider than [MaxKeysPerLevel] is refused before
// parsing ([ErrTooWide]) and a panic inside the library comes back as
// [ErrMalformed]. Errors with a place in the file are [*Error].
//
// The tree is the library's: a caller walking it should recover from a
// panic in its methods too (see [recoverMalformed] for the message).
func Parse(data []byte) (f *ast.File, err error) {
	defer recoverMalformed(&err)
	if err := checkWidth(data); err != nil {
		return nil, err
	}
	f, err = parser.ParseBytes(data, 0)
	if err != nil {
		return nil, libraryError(err)
	}
	return f, nil
}

// recoverMalformed turns a panic inside the YAML library into an error
// wrapping ErrMalformed. Use it deferred: defer recoverMalformed(&err).
func recoverMalformed(err *error) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("%w (the YAML decoder failed: %v)", ErrMalformed, r)
	}
}

// Error is a YAML error at a place in the file. Its text is
// "[line:column] message", as the YAML library prints its own errors.
type Error struct {
	Line, Column int
	Msg          string
	Err          error // a sentinel such as ErrTooWide, or nil
}

func (e *Error) Error() string { return fmt.Sprintf("[%d:%d] %s", e.Line, e.Column, e.Msg) }
func (e *Error) Unwrap() error { return e.Err }

// errorAt is an *Error at tk (line and column 0 when tk is nil).
func errorAt(tk *token.Token, err error, format string, args ...any) *Error {
	e := &Error{Msg: fmt.Sprintf(format, args...), Err: err}
	if tk != nil && tk.Position != nil {
		e.Line, e.Column = tk.Position.Line, tk.Position.Column
	}
	return e
}

// libraryError is an error of the YAML library as an *Error when it has a
// place in the file, else as its text.
func libraryError(err error) error {
	var ye yaml.Error
	if errors.As(err, &ye) && ye.GetToken() != nil && ye.GetToken().Position != nil {
		return errorAt(ye.GetToken(), nil, "%s", ye.GetMessage())
	}
	return errors.New(yaml.FormatError(err, false, false))
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
		if tk == nil || tk.Position == nil {
			return nil
		}
		return errorAt(tk, nil, "%s is not a whole number", tk.Value)
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
			return &Error{Line: line, Column: indent + 1, Err: ErrTooWide,
				Msg: fmt.Sprintf("%v: more than %d at one level", ErrTooWide, MaxKeysPerLevel)}
		}
	}
	return nil
}

// ErrMalformed is returned (wrapped) for input that made the YAML library
// panic; the error says so instead of crashing the process.
var ErrMalformed = errors.New("malformed YAML")
