// Package logtest helps tests read what a node logged: Buffer is an
// io.Writer for a slog handler that many goroutines may write at once and a
// test reads back whole.
package logtest

import (
	"strings"
	"sync"
)

// Buffer collects log lines; safe for concurrent use.
type Buffer struct {
	mu sync.Mutex
	b  strings.Builder
}

// Write appends p.
func (l *Buffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns everything written so far.
func (l *Buffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
