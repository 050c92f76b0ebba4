// Package testbuf holds a bytes buffer safe across goroutines, for tests
// that collect logs written while other goroutines run.
package testbuf

import (
	"bytes"
	"sync"
)

// Buffer is a log sink safe across goroutines; the zero value is empty.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String is what has been written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
