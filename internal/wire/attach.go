package wire

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
)

// attachLabel separates this MAC from any other use of the secret.
const attachLabel = "kvp2p data-attach v3"

// AttachMAC is what a DataAttach for (peerID, incarnation, attempt) must
// carry when the attempt's Hello carried secret: the first SecretSize bytes
// of HMAC-SHA256(secret, label | peer id | incarnation | attempt).
//
// Why a MAC and not the secret itself: the data connection then proves
// knowledge of the secret for this very attach key only, so a MAC seen on
// one connection (or replayed from an earlier attempt) names no other
// attempt. On plain TCP the Hello itself travels in clear, so the binding
// keeps out an attacker who cannot read the control connection (a process
// on the same host, or anywhere else, without capture rights), which is
// what issue 25's attack #2 was; an on-path reader needs mutual TLS.
func AttachMAC(secret [SecretSize]byte, peerID string, incarnation, attempt uint64) [SecretSize]byte {
	h := hmac.New(sha256.New, secret[:])
	var b [8]byte
	h.Write([]byte(attachLabel))
	binary.BigEndian.PutUint64(b[:], uint64(len(peerID)))
	h.Write(b[:])
	h.Write([]byte(peerID))
	binary.BigEndian.PutUint64(b[:], incarnation)
	h.Write(b[:])
	binary.BigEndian.PutUint64(b[:], attempt)
	h.Write(b[:])
	var out [SecretSize]byte
	copy(out[:], h.Sum(nil))
	return out
}

// Attaches reports whether a is the data connection of the attempt whose
// Hello is h: same peer, incarnation and attempt, and a MAC only the
// holder of h's secret could make. A zero secret binds nothing and
// matches no attach.
func Attaches(h *Hello, a *DataAttach) bool {
	if h.Secret == ([SecretSize]byte{}) || h.PeerID != a.PeerID || h.Incarnation != a.Incarnation || h.Attempt != a.Attempt {
		return false
	}
	want := AttachMAC(h.Secret, h.PeerID, h.Incarnation, h.Attempt)
	return hmac.Equal(want[:], a.MAC[:])
}
