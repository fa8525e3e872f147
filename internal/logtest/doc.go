// Package logtest helps tests read what a node logged: Buffer is an
// io.Writer for a slog handler that many goroutines may write at once and a
// test reads back whole.
package logtest
