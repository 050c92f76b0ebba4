package simnode

import (
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"
)

func parseFile(data []byte) (*ast.File, error) { return parser.ParseBytes(data, 0) }
