package sidecar

import (
	"testing"

	"github.com/kvp2p/kvp2p/internal/nodetest"
	"github.com/kvp2p/kvp2p/internal/wire"
)

func askKey(who, i int) wire.Key {
	var k wire.Key
	k[0], k[1], k[2], k[3] = byte(who), byte(i>>16), byte(i>>8), byte(i)
	return k
}

// TestEngineAsksSharedAmongPeers: a peer looking up keys nobody holds, as
// fast as it may, asked the engine for them until 1024 asks were open, and
// every other peer's lookups of keys the engine held answered MISS until
// those were answered. The keys asked and not answered are now shared: a
// session asks at most maxAskedKeys/(k+1) of them, so another finds room
// at once; answered keys give their room back.
func TestEngineAsksSharedAmongPeers(t *testing.T) {
	e := newEngine(EngineConfig{}, 16, nodetest.BlockBytes)
	e.reg = 1
	e.contains = func(wire.Key) bool { return false }
	const attacker, healthy = 7, 8
	asked := 0
	for i := range 2 * maxAskedKeys {
		if e.Pending(attacker, askKey(attacker, i)) {
			asked++
		}
	}
	if asked != maxAskedKeys/2 {
		t.Fatalf("a lone session asked %d keys, want its quota %d", asked, maxAskedKeys/2)
	}
	for i := range 100 {
		if !e.Pending(healthy, askKey(healthy, i)) {
			t.Fatalf("the healthy session's key %d refused beside the flood", i)
		}
	}
	// A key already asked waits, whoever asks it again.
	if !e.Pending(healthy, askKey(attacker, 0)) {
		t.Fatal("a key already asked did not wait")
	}
	// The engine answers (or the asks expire): the room comes back.
	for k := range e.asked {
		e.answered(k)
	}
	if len(e.asked) != 0 || len(e.askedBy) != 0 {
		t.Fatalf("after every answer: %d keys asked, %d askers", len(e.asked), len(e.askedBy))
	}
	if !e.Pending(attacker, askKey(attacker, 1<<20)) {
		t.Fatal("the attacker's room did not come back")
	}
}
