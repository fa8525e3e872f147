package session

import "time"

// Probe asks the peer's data path to answer (Seq must not be 0, which is the
// data path's keepalive). It is sent only on a ready session; the caller
// learns the answer from the data path's ProbeAck.
func (s *Session) Probe(now time.Time, seq uint64) bool {
	if s.phase != ready || seq == 0 {
		return false
	}
	s.data(DataOp{Kind: OpProbe, Seq: seq})
	return true
}
