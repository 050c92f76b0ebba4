package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"
)

// applyConfigFile sets flags from a YAML file whose keys are flag names
// (`http-addr: 127.0.0.1:9400`). Flags given on the command line win. An
// unknown key or a bad value is an error naming the key and its line.
func applyConfigFile(fs *flag.FlagSet, path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	file, err := parser.ParseBytes(data, 0)
	if err != nil {
		return fmt.Errorf("config %s: %s", path, yaml.FormatError(err, false, false))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var errs []error
	for _, doc := range file.Docs {
		if doc.Body == nil {
			continue
		}
		mapping, ok := doc.Body.(*ast.MappingNode)
		if !ok {
			return fmt.Errorf("config %s: line %d: want a mapping of flag names to values", path, doc.Body.GetToken().Position.Line)
		}
		for _, kv := range mapping.Values {
			key := kv.Key.String()
			line := kv.Key.GetToken().Position.Line
			f := fs.Lookup(key)
			if f == nil || key == "config" {
				errs = append(errs, fmt.Errorf("config %s: line %d: unknown key %q (keys are the agent's flag names: %s)", path, line, key, flagNames(fs)))
				continue
			}
			if set[key] {
				continue
			}
			if err := fs.Set(key, scalar(kv.Value)); err != nil {
				errs = append(errs, fmt.Errorf("config %s: line %d: %s: %w", path, line, key, err))
			}
		}
	}
	return errors.Join(errs...)
}

// scalar returns a YAML value as the string a flag parses; sequences become
// comma-separated lists.
func scalar(n ast.Node) string {
	if seq, ok := n.(*ast.SequenceNode); ok {
		parts := make([]string, len(seq.Values))
		for i, v := range seq.Values {
			parts[i] = scalar(v)
		}
		return strings.Join(parts, ",")
	}
	if s, ok := n.(*ast.StringNode); ok {
		return s.Value
	}
	return n.String()
}

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
