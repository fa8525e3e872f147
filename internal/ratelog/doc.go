// Package ratelog wraps a slog.Handler so that a message repeated faster
// than a budget is logged with counts instead of line by line: a peer that
// sends garbage, spoofed Hellos or floods of work cannot fill the disk
// through the node's log. Debug records pass untouched (debug is opt-in).
package ratelog
