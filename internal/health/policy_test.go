package health

import (
	"reflect"
	"testing"
	"time"
)

var t0 = time.Unix(1_800_000_000, 0)

func at(d time.Duration) time.Time { return t0.Add(d) }

// allCauses lists every cause a session can end with.
var allCauses = []Cause{
	CauseGoodbye, CauseHandshakeFailed, CauseIncompatible,
	CauseConnReset, CauseHeartbeatTimeout, CauseProgressStall, CauseProtocolError,
}

func mustNew(t *testing.T, name string, opt Options) Policy {
	t.Helper()
	p, err := New(name, opt)
	if err != nil {
		t.Fatalf("New(%q): %v", name, err)
	}
	if p.Name() != name {
		t.Fatalf("New(%q).Name() = %q", name, p.Name())
	}
	return p
}

func TestNew(t *testing.T) {
	if got := Names(); !reflect.DeepEqual(got, []string{Domain, PerPeer, HostGroup}) {
		t.Errorf("Names() = %v, want the default (domain) first", got)
	}
	for _, n := range Names() {
		mustNew(t, n, Options{})
	}
	for _, n := range []string{"", "Domain", "host_group", "per_peer"} {
		if p, err := New(n, Options{}); err == nil || p != nil {
			t.Errorf("New(%q) = %v, %v; want an error", n, p, err)
		}
	}
}

func TestPerPeer(t *testing.T) {
	p := mustNew(t, PerPeer, Options{})
	if w := p.Waits(at(0), Peer{ID: "10.0.0.1:7777"}); w != (Waits{}) {
		t.Errorf("Waits = %+v, want none (MISS at once, vLLM #64501)", w)
	}
	a := Peer{ID: "10.0.0.1:7777", Domain: "pod"}
	b := Peer{ID: "10.0.0.1:7778", Domain: "pod"}
	p.SessionUp(at(0), a)
	p.SessionUp(at(0), b)
	for i, c := range allCauses {
		now := at(time.Duration(i) * time.Millisecond)
		for _, restart := range []bool{false, true} {
			if out := p.SessionEnded(now, a, End{Cause: c, Restart: restart, LoadsFailed: 3}); out != nil {
				t.Errorf("%v: SessionEnded closed %v", c, out)
			}
		}
		p.LoadDone(now, b, false)
		p.Tick(now.Add(time.Hour))
		if !p.MayDial(now, a) || !p.MayDial(now, b) {
			t.Errorf("%v: MayDial false", c)
		}
		if g := p.Gate(now, a); g != GateOpen {
			t.Errorf("%v: Gate(a) = %v", c, g)
		}
		if g := p.Gate(now, b); g != GateOpen {
			t.Errorf("%v: Gate(b) = %v", c, g)
		}
		p.ProbeAck(now, b, 1)
		if ds := p.TakeDecisions(); ds != nil {
			t.Errorf("%v: decisions %v", c, ds)
		}
	}
}

func hostGroupFixture(t *testing.T, q time.Duration) (Policy, []Peer) {
	p := mustNew(t, HostGroup, Options{HostQuarantine: q})
	peers := []Peer{
		{ID: "10.0.0.1:7777"},
		{ID: "10.0.0.1:7780", Outbound: true},
		{ID: "10.0.0.1:7778", Domain: "other"}, // the domain is irrelevant here
		{ID: "10.0.0.1:7779"},
		{ID: "10.0.0.2:7777"},
		{ID: "10.0.0.11:7777"},
		{ID: "[::1]:7777"},
		{ID: "[::1]:7778"},
	}
	for _, x := range peers {
		p.SessionUp(at(0), x)
	}
	return p, peers
}

func ids(ps []Peer) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.ID)
	}
	return out
}

func TestHostGroupClosesSameHostOnAnyEnd(t *testing.T) {
	// Faithful to PR #64678: every end counts, orderly ones included (what
	// its review objected to), and restarts too.
	for _, c := range allCauses {
		for _, restart := range []bool{false, true} {
			p, peers := hostGroupFixture(t, 0)
			got := p.SessionEnded(at(time.Second), peers[0], End{Cause: c, Restart: restart})
			want := []string{"10.0.0.1:7778", "10.0.0.1:7779", "10.0.0.1:7780"} // sorted
			if !reflect.DeepEqual(ids(got), want) {
				t.Errorf("%v restart=%v: closed %v, want %v", c, restart, ids(got), want)
			}
			if got[0] != peers[2] {
				t.Errorf("returned %+v, want the peer as it came up (%+v)", got[0], peers[2])
			}
			// The siblings were closed in this reap: ending them (or the dead
			// peer again) returns nothing more.
			for _, x := range append([]Peer{peers[0]}, got...) {
				if out := p.SessionEnded(at(time.Second), x, End{Cause: c}); len(out) != 0 {
					t.Errorf("%v: second end of %s closed %v", c, x.ID, ids(out))
				}
			}
			// Other hosts are untouched, including 10.0.0.11 (not a prefix match).
			got = p.SessionEnded(at(time.Second), peers[6], End{Cause: c})
			if !reflect.DeepEqual(ids(got), []string{"[::1]:7778"}) {
				t.Errorf("%v: [::1]:7777 ended, closed %v", c, ids(got))
			}
			if out := p.SessionEnded(at(time.Second), peers[4], End{Cause: c}); len(out) != 0 {
				t.Errorf("%v: alone on its host, closed %v", c, ids(out))
			}
			if ds := p.TakeDecisions(); ds != nil {
				t.Errorf("decisions %v", ds)
			}
		}
	}
}

func TestHostGroupBookkeeping(t *testing.T) {
	p := mustNew(t, HostGroup, Options{})
	a, b, c := Peer{ID: "h:1"}, Peer{ID: "h:2"}, Peer{ID: "h:3"}
	if out := p.SessionEnded(at(0), a, End{Cause: CauseConnReset}); len(out) != 0 {
		t.Errorf("end of an unknown session closed %v", ids(out))
	}
	p.SessionUp(at(0), a)
	p.SessionUp(at(0), b)
	p.SessionUp(at(0), b) // twice: still one session
	p.SessionUp(at(0), c)
	p.SessionEnded(at(0), Peer{ID: "other:1"}, End{Cause: CauseConnReset})
	// A new session comes up after the first reap: only it is a sibling.
	if out := p.SessionEnded(at(0), a, End{Cause: CauseGoodbye}); !reflect.DeepEqual(ids(out), []string{"h:2", "h:3"}) {
		t.Fatalf("closed %v", ids(out))
	}
	p.SessionUp(at(time.Second), b)
	if out := p.SessionEnded(at(time.Second), c, End{Cause: CauseConnReset}); !reflect.DeepEqual(ids(out), []string{"h:2"}) {
		t.Errorf("closed %v, want [h:2] (h:3 is the dead one, h:1 ended before)", ids(out))
	}
}

func TestHostGroupQuarantine(t *testing.T) {
	for _, tc := range []struct {
		opt  time.Duration
		want time.Duration
	}{{0, 10 * time.Second}, {-time.Second, 10 * time.Second}, {3 * time.Second, 3 * time.Second}} {
		p, peers := hostGroupFixture(t, tc.opt)
		end := at(5 * time.Second)
		p.SessionEnded(end, peers[0], End{Cause: CauseHandshakeFailed})
		for _, id := range []string{"10.0.0.1:7777", "10.0.0.1:7778", "10.0.0.1:9999", "10.0.0.1"} {
			for _, now := range []time.Time{end, end.Add(tc.want - time.Nanosecond)} {
				if p.MayDial(now, Peer{ID: id, Outbound: true}) {
					t.Errorf("q=%v: MayDial(%s) at +%v during quarantine", tc.opt, id, now.Sub(end))
				}
			}
		}
		for _, id := range []string{"10.0.0.2:7777", "10.0.0.11:7777", "[::1]:7777", "10.0.0.10:7777"} {
			if !p.MayDial(end, Peer{ID: id}) {
				t.Errorf("q=%v: another host %s quarantined", tc.opt, id)
			}
		}
		if g := p.Gate(end, peers[2]); g != GateOpen {
			t.Errorf("Gate = %v: host-group never gates lookups", g)
		}
		if !p.MayDial(end.Add(tc.want), Peer{ID: "10.0.0.1:7779"}) {
			t.Errorf("q=%v: still quarantined at +%v", tc.opt, tc.want)
		}
		if !p.MayDial(end.Add(tc.want+time.Hour), Peer{ID: "10.0.0.1:7777"}) {
			t.Errorf("q=%v: quarantined later", tc.opt)
		}
		// A later end restarts the quarantine from its own time.
		end2 := end.Add(tc.want + time.Minute)
		p.SessionEnded(end2, Peer{ID: "10.0.0.1:7777"}, End{Cause: CauseGoodbye})
		if p.MayDial(end2.Add(tc.want-time.Nanosecond), Peer{ID: "10.0.0.1:1"}) || !p.MayDial(end2.Add(tc.want), Peer{ID: "10.0.0.1:1"}) {
			t.Errorf("q=%v: second quarantine wrong", tc.opt)
		}
	}
	p := mustNew(t, HostGroup, Options{})
	if w := p.Waits(at(0), Peer{ID: "10.0.0.1:7777"}); w != (Waits{}) {
		t.Errorf("Waits = %+v, want none", w)
	}
}
