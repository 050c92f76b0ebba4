// Package strictyaml decodes the YAML (and JSON) files gpud's users write,
// with the project's one YAML library, refusing what a lenient decoder
// would silently change: unknown fields, duplicate keys, and numbers with
// a fraction or exponent (which the library truncates into integer fields,
// so `count: 4.5` would become 4). gpud's config files have no fractional
// fields. Errors start with `[line:column]`.
package strictyaml

import (
	"errors"
	"fmt"
	"reflect"
	"strconv"
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
	opts := []yaml.DecodeOption{yaml.Strict(), yaml.DisallowUnknownField(),
		wholeNumber[int](), wholeNumber[int64](), wholeNumber[int32](),
		wholeNumber[uint](), wholeNumber[uint64](), wholeNumber[uint32]()}
	err = yaml.UnmarshalWithOptions(data, v, opts...)
	var ne *numberError
	if errors.As(err, &ne) {
		return fmt.Errorf("%s%s is not a whole number", position(data, ne.text), ne.text)
	}
	if err != nil {
		return errors.New(yaml.FormatError(err, false, false))
	}
	return nil
}

// ErrMalformed is returned (wrapped) for input that made the YAML library
// panic; the error says so instead of crashing the process.
var ErrMalformed = errors.New("malformed YAML")

// numberError is a value decoded into an integer field that is not one.
type numberError struct{ text string }

func (e *numberError) Error() string { return e.text + " is not a whole number" }

// position finds the first value scalar spelled text and returns
// "[line:column] ", or "" if none is found.
func position(data []byte, text string) string {
	f, err := parser.ParseBytes(data, 0)
	if err != nil {
		return ""
	}
	var found valueFinder
	found.text = text
	for _, doc := range f.Docs {
		ast.Walk(&found, doc)
		if found.pos != "" {
			return found.pos
		}
	}
	return ""
}

type valueFinder struct{ text, pos string }

func (f *valueFinder) Visit(n ast.Node) ast.Visitor {
	if f.pos != "" {
		return nil
	}
	if mv, ok := n.(*ast.MappingValueNode); ok {
		ast.Walk(f, mv.Value) // keys are never integers fields' values
		return nil
	}
	if _, ok := n.(ast.ScalarNode); ok {
		if tk := n.GetToken(); tk != nil && tk.Value == strings.Trim(f.text, `"'`) {
			f.pos = fmt.Sprintf("[%d:%d] ", tk.Position.Line, tk.Position.Column)
		}
		return nil
	}
	return f
}

// wholeNumber decodes an integer field from a plain decimal, hex (0x) or
// octal (0o) integer only.
func wholeNumber[T int | int64 | int32 | uint | uint64 | uint32]() yaml.DecodeOption {
	return yaml.CustomUnmarshaler(func(dst *T, b []byte) error {
		s := strings.TrimSpace(string(b))
		var zero T
		bits := int(reflect.TypeOf(zero).Size()) * 8
		if zero-1 > 0 { // unsigned
			n, err := strconv.ParseUint(s, 0, bits)
			if err != nil {
				return &numberError{text: s}
			}
			*dst = T(n)
			return nil
		}
		n, err := strconv.ParseInt(s, 0, bits)
		if err != nil {
			return &numberError{text: s}
		}
		*dst = T(n)
		return nil
	})
}
