package trace

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Row gives typed access to one CSV record by column name. The first
// failure sticks in Err as a [*RowError] naming the file, line and column.
type Row struct {
	File string
	Line int
	Err  error
	idx  map[string]int
	rec  []string
}

// Fail records err against column col, unless the row already failed.
func (r *Row) Fail(col string, err error) {
	if r.Err == nil {
		r.Err = &RowError{File: r.File, Line: r.Line, Column: col, Err: err}
	}
}

// Str returns a column's trimmed text; "" when the column is absent.
func (r *Row) Str(col string) string {
	i, ok := r.idx[col]
	if !ok || i >= len(r.rec) {
		return ""
	}
	return strings.TrimSpace(r.rec[i])
}

// Int parses a required integer column.
func (r *Row) Int(col string) int64 {
	s := r.Str(col)
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		r.Fail(col, fmt.Errorf("not an integer: %q", s))
	}
	return v
}

// OptInt reads an optional integer column; empty or absent is 0.
func (r *Row) OptInt(col string) int64 {
	if r.Str(col) == "" {
		return 0
	}
	return r.Int(col)
}

// Bool reads an optional boolean column (true/false, 1/0, yes/no); empty or
// absent is false.
func (r *Row) Bool(col string) bool {
	switch strings.ToLower(r.Str(col)) {
	case "", "false", "0", "no":
		return false
	case "true", "1", "yes":
		return true
	}
	r.Fail(col, fmt.Errorf("not a boolean: %q", r.Str(col)))
	return false
}

// ReadRows reads a CSV file with a header row, checks the required columns
// are there, and calls fn for each record in order. It stops at the first
// error: a malformed record, or what fn returns. Every record must have as
// many fields as the header.
func ReadRows(rd io.Reader, file string, required []string, fn func(*Row) error) error {
	cr := csv.NewReader(rd)
	cr.ReuseRecord = true
	header, err := cr.Read()
	if err != nil {
		return &RowError{File: file, Line: 1, Err: fmt.Errorf("header: %w", err)}
	}
	idx := make(map[string]int, len(header))
	for i, h := range header {
		idx[strings.TrimSpace(strings.TrimPrefix(h, "\ufeff"))] = i
	}
	for _, c := range required {
		if _, ok := idx[c]; !ok {
			return &RowError{File: file, Line: 1, Column: c, Err: errors.New("missing column")}
		}
	}
	for {
		rec, err := cr.Read()
		if err == io.EOF {
			return nil
		}
		line, _ := cr.FieldPos(0)
		if err != nil {
			var pe *csv.ParseError
			if errors.As(err, &pe) {
				line = pe.Line
			}
			return &RowError{File: file, Line: line, Err: err}
		}
		if err := fn(&Row{File: file, Line: line, idx: idx, rec: rec}); err != nil {
			return err
		}
	}
}
