package health

import (
	"fmt"
	"testing"
	"time"
)

// TestDomainBoundsPeersByCount is issue 25's id flood: handshakes with
// unique made-up ids, each ending at once, grew the peer and domain maps
// until the age limit (10 minutes). They are now capped by count too: the
// least recently seen peers go first, a peer with a live session or an
// ejection never.
func TestDomainBoundsPeersByCount(t *testing.T) {
	f := newDfix(t, Options{ProbeTimeout: probeTO, EjectionBase: base})
	t0 := time.Unix(1000, 0)
	live := Peer{ID: "10.9.0.1:7000", Domain: "pod-live"}
	f.up(t0, live)
	flappy := Peer{ID: "10.9.0.2:7000", Domain: "pod-flappy"}
	for range 3 {
		f.up(t0, flappy)
		f.flap(t0, flappy)
	}
	const n = 3 * maxRemembered
	for i := range n {
		at := t0.Add(time.Duration(i) * time.Millisecond) // 12 s: well within forgetAfter
		p := Peer{ID: fmt.Sprintf("10.%d.%d.%d:7000", i>>16&255, i>>8&255, i&255), Domain: fmt.Sprintf("d%d", i)}
		// The policy's calls without the fixture's full check after each
		// (a scan of every peer): checked once at the end.
		f.d.SessionUp(at, p)
		f.d.SessionEnded(at, p, End{Cause: CauseGoodbye, WasUp: true})
		if len(f.d.peers) > maxRemembered || len(f.d.domains) > maxRemembered {
			t.Fatalf("after %d ids: %d peers, %d domains known, cap %d", i+1, len(f.d.peers), len(f.d.domains), maxRemembered)
		}
	}
	f.ok()
	if _, ok := f.d.peers[live.ID]; !ok {
		t.Fatal("a peer with a live session was forgotten")
	}
	if _, ok := f.d.peers[flappy.ID]; !ok {
		t.Fatal("an ejected peer was forgotten")
	}
	last := n - 1
	if _, ok := f.d.peers[fmt.Sprintf("10.%d.%d.%d:7000", last>>16&255, last>>8&255, last&255)]; !ok {
		t.Fatal("the most recent id was forgotten")
	}
	if _, ok := f.d.peers["10.0.0.0:7000"]; ok {
		t.Fatal("the oldest id was kept")
	}
}
