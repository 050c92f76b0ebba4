// Package sharingfile reads the node's sharing config (a [timeslice.Config])
// from YAML or JSON, strictly: unknown fields, duplicate keys and values of
// the wrong type are refused, and every error names the line. It is the
// adapter that keeps the YAML library out of the pure timeslice package.
package sharingfile

import (
	"errors"
	"fmt"

	"github.com/goccy/go-yaml/ast"

	"github.com/gpud/gpud/internal/fileio"
	"github.com/gpud/gpud/internal/strictyaml"
	"github.com/gpud/gpud/pkg/gpu"
	"github.com/gpud/gpud/pkg/timeslice"
)

// hint shows the expected shape after a syntax error.
const hint = "want default: {replicas: N} and devices: {<GPU uuid|MIG uuid|index>: {replicas: N} or {shares: [{memoryMiB: M, memoryLimitMiB: L, computePercent: P}]} or {exclusive: true}}"

// ParseConfig decodes a sharing config from YAML or JSON and checks its
// syntax and bounds ([timeslice.Config.Validate] with no inventory).
// Errors wrap [timeslice.ErrInvalid] and carry `[line:column]`.
func ParseConfig(data []byte) (timeslice.Config, error) {
	var cfg timeslice.Config
	if err := strictyaml.Unmarshal(data, &cfg); err != nil {
		return timeslice.Config{}, fmt.Errorf("%w: %w (%s)", timeslice.ErrInvalid, err, hint)
	}
	if err := cfg.Validate(nil); err != nil {
		return timeslice.Config{}, withLines(data, err)
	}
	return cfg, nil
}

// LoadConfigFile reads and parses a sharing config file (at most
// [fileio.MaxConfigBytes]); errors start with the path.
func LoadConfigFile(path string) (timeslice.Config, error) {
	data, err := fileio.ReadFile(path, fileio.MaxConfigBytes)
	if err != nil {
		return timeslice.Config{}, err
	}
	cfg, err := ParseConfig(data)
	if err != nil {
		return timeslice.Config{}, fmt.Errorf("%s: %w", path, err)
	}
	return cfg, nil
}

// LoadConfigFileFor is [LoadConfigFile] followed by
// [timeslice.Config.ValidateFor] against inv, with the line of each
// refused key in the error.
func LoadConfigFileFor(path string, inv gpu.Inventory) (timeslice.Config, error) {
	data, err := fileio.ReadFile(path, fileio.MaxConfigBytes)
	if err != nil {
		return timeslice.Config{}, err
	}
	cfg, err := ParseConfig(data)
	if err == nil {
		if err = cfg.ValidateFor(inv); err != nil {
			err = withLines(data, err)
		}
	}
	if err != nil {
		return timeslice.Config{}, fmt.Errorf("%s: %w", path, err)
	}
	return cfg, nil
}

// withLines prefixes each [*timeslice.KeyError] in err with the line of its
// key in data. The result still wraps timeslice.ErrInvalid.
func withLines(data []byte, err error) error {
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	f, perr := strictyaml.Parse(data)
	if perr != nil || len(f.Docs) == 0 {
		return err
	}
	out := make([]error, len(errs))
	for i, e := range errs {
		out[i] = e
		var ke *timeslice.KeyError
		if !errors.As(e, &ke) {
			continue
		}
		path := []string{"default"}
		if ke.Device != "" {
			path = []string{"devices", ke.Device}
		}
		if pos := keyPosition(f.Docs[0].Body, path); pos != "" {
			out[i] = fmt.Errorf("%s %w", pos, e)
		}
	}
	return errors.Join(out...)
}

// keyPosition finds the key at path in a mapping and returns "[line:col]",
// or "" when it is not there.
func keyPosition(n ast.Node, path []string) string {
	for depth, want := range path {
		var values []*ast.MappingValueNode
		switch m := n.(type) {
		case *ast.MappingNode:
			values = m.Values
		case *ast.MappingValueNode:
			values = []*ast.MappingValueNode{m}
		default:
			return ""
		}
		n = nil
		for _, v := range values {
			tk := v.Key.GetToken()
			if tk == nil || tk.Value != want {
				continue
			}
			if depth == len(path)-1 {
				return fmt.Sprintf("[%d:%d]", tk.Position.Line, tk.Position.Column)
			}
			n = v.Value
			break
		}
		if n == nil {
			return ""
		}
	}
	return ""
}
