package main

import (
	"context"
	"errors"
	"io"
)

// runDemo is the newcomer's first run: a small fleet on 127.0.0.1 with faults.
func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return errors.New("demo: not built yet")
}
