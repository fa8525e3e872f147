//go:build !unix

package proccpu

import "time"

// Used reports nothing where getrusage does not exist.
func Used() (time.Duration, bool) { return 0, false }
