package fsm

import (
	"strings"
	"testing"
)

type st string

func (s st) String() string { return string(s) }

// In a test binary an illegal move must stop the test where it happened.
func TestIllegalPanicsInTests(t *testing.T) {
	defer func() {
		r := recover()
		if r == nil || !strings.Contains(r.(string), "conn: illegal transition gone -> live") {
			t.Fatalf("recovered %v, want the illegal move named", r)
		}
	}()
	Illegal(nil, "conn", st("gone"), st("live"))
	t.Fatal("Illegal returned")
}
