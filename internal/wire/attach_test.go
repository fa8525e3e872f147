package wire

import "testing"

// TestAttaches: only the holder of the Hello's secret can make a
// DataAttach that pairs with it, for that very attach key.
func TestAttaches(t *testing.T) {
	h := &Hello{PeerID: "10.0.0.1:7000", Incarnation: 5, Attempt: 6, Secret: [SecretSize]byte{1, 2, 3}}
	good := &DataAttach{PeerID: h.PeerID, Incarnation: 5, Attempt: 6, MAC: AttachMAC(h.Secret, h.PeerID, 5, 6)}
	if !Attaches(h, good) {
		t.Fatal("the dialer's own DataAttach does not pair")
	}
	other := [SecretSize]byte{9}
	for name, a := range map[string]*DataAttach{
		"no MAC":            {PeerID: h.PeerID, Incarnation: 5, Attempt: 6},
		"another secret":    {PeerID: h.PeerID, Incarnation: 5, Attempt: 6, MAC: AttachMAC(other, h.PeerID, 5, 6)},
		"another attempt":   {PeerID: h.PeerID, Incarnation: 5, Attempt: 7, MAC: AttachMAC(h.Secret, h.PeerID, 5, 7)},
		"MAC of attempt 5":  {PeerID: h.PeerID, Incarnation: 5, Attempt: 6, MAC: AttachMAC(h.Secret, h.PeerID, 5, 5)},
		"another peer":      {PeerID: "10.0.0.1:7001", Incarnation: 5, Attempt: 6, MAC: AttachMAC(h.Secret, "10.0.0.1:7001", 5, 6)},
		"another incarnate": {PeerID: h.PeerID, Incarnation: 4, Attempt: 6, MAC: AttachMAC(h.Secret, h.PeerID, 4, 6)},
	} {
		if Attaches(h, a) {
			t.Errorf("%s: pairs", name)
		}
	}
	zero := *h
	zero.Secret = [SecretSize]byte{}
	if Attaches(&zero, &DataAttach{PeerID: h.PeerID, Incarnation: 5, Attempt: 6, MAC: AttachMAC(zero.Secret, h.PeerID, 5, 6)}) {
		t.Fatal("a Hello without a secret pairs")
	}
	// The MAC separates its fields: moving bytes between the peer id and
	// the numbers changes it.
	if AttachMAC(h.Secret, "a", 1, 2) == AttachMAC(h.Secret, "a\x00", 1, 2) {
		t.Fatal("peer id boundary not in the MAC")
	}
}
