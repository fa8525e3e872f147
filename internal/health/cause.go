package health

// Cause says why a session ended. Every session end carries exactly one.
// Values are stable: never reorder, only append.
type Cause uint8

const (
	// CauseNone means the session has not ended.
	CauseNone Cause = iota
	// CauseGoodbye is an orderly end: idle eviction, shutdown, a peer cap.
	CauseGoodbye
	// CauseHandshakeFailed: the handshake did not complete in time, or the
	// connection could not be made.
	CauseHandshakeFailed
	// CauseIncompatible: block size, layout fingerprint or hash seed differ.
	CauseIncompatible
	// CauseConnReset: EOF or RST without a Goodbye, or the peer restarted.
	CauseConnReset
	// CauseHeartbeatTimeout: nothing heard from the peer for the heartbeat timeout.
	CauseHeartbeatTimeout
	// CauseProgressStall: a load's data path carried neither bytes nor a
	// Progress frame for the stall timeout.
	CauseProgressStall
	// CauseProtocolError: the peer broke the protocol.
	CauseProtocolError
	causeEnd
)

var causeNames = [...]string{
	CauseNone:             "none",
	CauseGoodbye:          "goodbye",
	CauseHandshakeFailed:  "handshake-failed",
	CauseIncompatible:     "incompatible",
	CauseConnReset:        "conn-reset",
	CauseHeartbeatTimeout: "heartbeat-timeout",
	CauseProgressStall:    "progress-stall",
	CauseProtocolError:    "protocol-error",
}

func (c Cause) String() string {
	if c < causeEnd {
		return causeNames[c]
	}
	return "unknown"
}

// IsFault reports whether the cause is evidence that the peer (and perhaps
// its failure domain) is broken. Orderly ends, refused handshakes and
// incompatibility are not.
func (c Cause) IsFault() bool {
	switch c {
	case CauseConnReset, CauseHeartbeatTimeout, CauseProgressStall, CauseProtocolError:
		return true
	}
	return false
}

// ParseCause is the inverse of String.
func ParseCause(s string) (Cause, bool) {
	for i, n := range causeNames {
		if n == s {
			return Cause(i), true
		}
	}
	return CauseNone, false
}
