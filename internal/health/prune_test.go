package health

import (
	"fmt"
	"testing"
	"time"
)

// TestDomainForgetsSilentPeers is finding 9: the state of every peer id
// ever seen (about 0.6 KB each) was kept for the life of the process. A
// peer with no session, probe or ejection is forgotten once it has been
// silent for forgetAfter; one with a live session, or ejected, is kept.
func TestDomainForgetsSilentPeers(t *testing.T) {
	f := newDfix(t, Options{ProbeTimeout: probeTO, EjectionBase: base})
	t0 := time.Unix(1000, 0)
	const n = 500
	for i := range n {
		p := Peer{ID: fmt.Sprintf("10.1.%d.%d:7000", i/250, i%250), Domain: fmt.Sprintf("pod-%d", i)}
		f.up(t0, p)
		f.end(t0, p, End{Cause: CauseGoodbye})
	}
	live := Peer{ID: "10.9.0.1:7000", Domain: "pod-live"}
	f.up(t0, live)
	flappy := Peer{ID: "10.9.0.2:7000", Domain: "pod-flappy"}
	for range 3 {
		f.up(t0, flappy)
		f.flap(t0, flappy)
	}
	if !f.d.ejected(t0, f.d.peers[flappy.ID]) {
		t.Fatal("setup: the flapping peer is not ejected")
	}
	if got := len(f.d.peers); got != n+2 {
		t.Fatalf("setup: %d peers known", got)
	}
	f.d.Tick(t0.Add(f.d.forgetAfter() - time.Second))
	f.ok()
	if got := len(f.d.peers); got != n+2 {
		t.Fatalf("%d peers known before forgetAfter, want %d", got, n+2)
	}
	f.d.Tick(t0.Add(f.d.forgetAfter() + pruneEvery))
	f.ok()
	if _, ok := f.d.peers[live.ID]; !ok {
		t.Fatal("a peer with a live session was forgotten")
	}
	if _, ok := f.d.peers[flappy.ID]; !ok {
		t.Fatal("an ejected peer was forgotten")
	}
	if got := len(f.d.peers); got != 2 {
		t.Fatalf("%d peers known after forgetAfter, want 2", got)
	}
	if got := len(f.d.domains); got != 2 {
		t.Fatalf("%d domains known after forgetAfter, want 2", got)
	}
}
