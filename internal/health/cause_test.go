package health

import "testing"

func TestCauseStringParseRoundTrip(t *testing.T) {
	want := map[Cause]string{
		CauseNone:             "none",
		CauseGoodbye:          "goodbye",
		CauseHandshakeFailed:  "handshake-failed",
		CauseIncompatible:     "incompatible",
		CauseConnReset:        "conn-reset",
		CauseHeartbeatTimeout: "heartbeat-timeout",
		CauseProgressStall:    "progress-stall",
		CauseProtocolError:    "protocol-error",
	}
	if len(want) != int(causeEnd) {
		t.Fatalf("test covers %d causes, package has %d", len(want), causeEnd)
	}
	seen := map[string]bool{}
	for c := CauseNone; c < causeEnd; c++ {
		s := c.String()
		if s != want[c] {
			t.Errorf("Cause(%d).String() = %q, want %q", c, s, want[c])
		}
		if seen[s] {
			t.Errorf("name %q used twice", s)
		}
		seen[s] = true
		got, ok := ParseCause(s)
		if !ok || got != c {
			t.Errorf("ParseCause(%q) = %v, %v; want %v, true", s, got, ok, c)
		}
	}
	for _, c := range []Cause{causeEnd, causeEnd + 1, 255} {
		if s := c.String(); s != "unknown" {
			t.Errorf("Cause(%d).String() = %q, want unknown", c, s)
		}
	}
	for _, s := range []string{"", "unknown", "Goodbye", "conn_reset", " goodbye", "reset"} {
		if c, ok := ParseCause(s); ok || c != CauseNone {
			t.Errorf("ParseCause(%q) = %v, %v; want none, false", s, c, ok)
		}
	}
}

func TestCauseIsFault(t *testing.T) {
	faults := map[Cause]bool{
		CauseConnReset:        true,
		CauseHeartbeatTimeout: true,
		CauseProgressStall:    true,
		CauseProtocolError:    true,
	}
	for c := Cause(0); c < 255; c++ {
		if got := c.IsFault(); got != faults[c] {
			t.Errorf("%v (%d).IsFault() = %v, want %v", c, c, got, faults[c])
		}
	}
}
