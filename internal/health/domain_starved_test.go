package health

import (
	"reflect"
	"testing"
	"time"
)

// TestDomainStarvedPostponesProbes: a starvation report moves an
// outstanding check's deadline later by its length (the process could not
// have heard the ProbeAck), once per check, never earlier; a sibling that
// then stays silent is still closed at the postponed deadline.
func TestDomainStarvedPostponesProbes(t *testing.T) {
	f := newDfix(t, Options{ProbeTimeout: probeTO})
	ps := pod("pod", "h:1", "h:2", "h:3")
	f.up(at(0), ps...)
	now := at(time.Second)
	f.fault(now, ps[0])
	seq := f.wantProbes("fault", "h:2", "h:3")
	const starved = 400 * time.Millisecond
	var s Starver = f.d // the table finds it by this interface
	s.Starved(starved)
	s.Starved(-time.Hour)                                // never earlier
	f.ack(now.Add(probeTO+starved/2), ps[1], seq["h:2"]) // late, but within the postponed deadline
	if ds := f.tick(now.Add(probeTO + starved - time.Nanosecond)); ds != nil {
		t.Fatalf("closed before the postponed deadline: %+v", ds)
	}
	ds := f.tick(now.Add(probeTO + starved))
	want := []Decision{{Kind: DecideClose, Peer: "h:3", Cause: CauseProgressStall}}
	if !reflect.DeepEqual(ds, want) {
		t.Fatalf("at the postponed deadline: %+v, want %+v", ds, want)
	}
	f.ok()
}
