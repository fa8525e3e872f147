package kvp2p

import (
	"testing"

	"go.uber.org/goleak"
)

// Every test's nodes stop with it: no goroutine outlives the tests.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
