package trace

import (
	"errors"
	"fmt"
	"io"
)

// Bounds every trace is checked against while it is read, so a bad row is an
// error naming its file, line and column instead of a run that exhausts
// memory or overflows. Each is well above what real clusters and the openb
// traces hold (8 GPUs, 128 cores and 1 TiB per node; 8,152 pods per list;
// times up to 12.9 million seconds).
const (
	// MaxGPUsPerNode bounds a node's GPU count and a pod's or job's GPUs per
	// pod: the largest servers carry 8 to 16.
	MaxGPUsPerNode = 64
	// MaxClusterGPUs bounds the GPUs of one node list: the largest
	// clusters hold about 100,000.
	MaxClusterGPUs = 1 << 20
	// MaxCPUMilli bounds a node's or pod's CPU: 10,000 cores.
	MaxCPUMilli = 10_000_000
	// MaxMemoryMiB bounds a node's, pod's or GPU's memory: 16 TiB.
	MaxMemoryMiB = 1 << 24
	// MaxSeconds bounds times and durations: about 31 years.
	MaxSeconds = 1_000_000_000
	// MaxRows bounds the records of one file.
	MaxRows = 1_000_000
	// MaxRecordBytes bounds one record (a line, or lines joined by a quoted
	// newline).
	MaxRecordBytes = 64 << 10
)

// ErrNoRows is matched by the error for a file with a header and no rows.
var ErrNoRows = errors.New("no rows after the header")

// recordLimiter fails a read once one CSV record passes max bytes: it counts
// bytes since the last newline outside double quotes, and lines so the
// error can name one.
type recordLimiter struct {
	r       io.Reader
	max     int
	n       int
	line    int // 1-based line of the byte last read
	inQuote bool
	err     error
}

func newRecordLimiter(r io.Reader, max int) *recordLimiter {
	return &recordLimiter{r: r, max: max, line: 1}
}

func (l *recordLimiter) Read(p []byte) (int, error) {
	if l.err != nil {
		return 0, l.err
	}
	n, err := l.r.Read(p)
	for i, b := range p[:n] {
		switch {
		case b == '"':
			l.inQuote = !l.inQuote
		case b == '\n':
			l.line++
			if !l.inQuote {
				l.n = 0
				continue
			}
		}
		if l.n++; l.n > l.max {
			l.err = &tooLongError{line: l.line, max: l.max}
			return i, l.err
		}
	}
	return n, err
}

// tooLongError is a record over [MaxRecordBytes].
type tooLongError struct{ line, max int }

func (e *tooLongError) Error() string {
	return fmt.Sprintf("record longer than %d bytes", e.max)
}
