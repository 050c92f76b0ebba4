package trace

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
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

// Has reports whether the file has column col.
func (r *Row) Has(col string) bool {
	_, ok := r.idx[col]
	return ok
}

// Int parses a required integer column.
func (r *Row) Int(col string) int64 {
	s := r.Str(col)
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		r.Fail(col, fmt.Errorf("not an integer: %s", Quote(s)))
	}
	return v
}

// Float parses a required finite number column.
func (r *Row) Float(col string) float64 {
	s := r.Str(col)
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		r.Fail(col, fmt.Errorf("not a finite number: %s", Quote(s)))
	}
	return v
}

// OptInt reads an optional integer column; empty, absent or "nan" (how
// pandas, which wrote the openb lists, writes a blank) is 0.
func (r *Row) OptInt(col string) int64 {
	if s := r.Str(col); s == "" || strings.EqualFold(s, "nan") {
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
	r.Fail(col, fmt.Errorf("not a boolean: %s", Quote(r.Str(col))))
	return false
}

// Quote quotes a value for a message, cut to 40 bytes so a binary or
// runaway field does not flood it.
func Quote(s string) string {
	if len(s) > 40 {
		return strconv.Quote(s[:40]) + "..."
	}
	return strconv.Quote(s)
}

// IntIn parses a required integer column and checks lo <= value <= hi.
func (r *Row) IntIn(col string, lo, hi int64) int64 {
	v := r.Int(col)
	r.checkRange(col, v, lo, hi)
	return v
}

// OptIntIn is [Row.IntIn] for an optional column; empty or absent is 0.
func (r *Row) OptIntIn(col string, lo, hi int64) int64 {
	v := r.OptInt(col)
	r.checkRange(col, v, lo, hi)
	return v
}

func (r *Row) checkRange(col string, v, lo, hi int64) {
	if r.Err == nil && (v < lo || v > hi) {
		r.Fail(col, fmt.Errorf("%d outside %d..%d", v, lo, hi))
	}
}

// ReadRows reads a CSV file with a header row, checks the required columns
// are there, and calls fn for each record in order. It stops at the first
// error: a malformed record, or what fn returns. Every record must have as
// many fields as the header. A file without rows, with more than [MaxRows]
// rows, or with a record over [MaxRecordBytes] is an error.
func ReadRows(rd io.Reader, file string, required []string, fn func(*Row) error) error {
	lim := newRecordLimiter(rd, MaxRecordBytes)
	cr := csv.NewReader(lim)
	cr.ReuseRecord = true
	header, err := cr.Read()
	if err != nil {
		return readError(file, 1, lim, err)
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
	for rows := 0; ; rows++ {
		rec, err := cr.Read()
		if err == io.EOF {
			if rows == 0 {
				return &RowError{File: file, Line: 1, Err: ErrNoRows}
			}
			return nil
		}
		if err != nil {
			return readError(file, 0, lim, err)
		}
		line, _ := cr.FieldPos(0)
		if rows == MaxRows {
			return &RowError{File: file, Line: line, Err: fmt.Errorf("more than %d rows", MaxRows)}
		}
		if err := fn(&Row{File: file, Line: line, idx: idx, rec: rec}); err != nil {
			return err
		}
	}
}

// readError labels a failed read with the line it happened on: the CSV
// parser's, the record limiter's, or else line.
func readError(file string, line int, lim *recordLimiter, err error) error {
	var pe *csv.ParseError
	var tl *tooLongError
	switch {
	case errors.As(err, &tl):
		line = tl.line
	case errors.As(err, &pe):
		line = pe.Line
	case line == 0:
		line = lim.line
	}
	if line == 1 {
		err = fmt.Errorf("header: %w", err)
	}
	return &RowError{File: file, Line: line, Err: err}
}
