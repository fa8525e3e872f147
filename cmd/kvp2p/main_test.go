package main

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves a goroutine behind: serve
// must stop every goroutine it started before it returns.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
