package health

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// propModel drives a domain policy the way the table does, with random
// events, and checks the policy's decisions against what it was told.
type propModel struct {
	t     *testing.T
	r     *rand.Rand
	d     *domainPolicy
	now   time.Time
	peers []Peer
	live  map[string]bool
	// outstanding probes as decided: peer -> seq, deadline
	seq     map[string]uint64
	by      map[string]time.Time
	lastSeq uint64
	stale   []uint64 // seqs no longer outstanding
	log     []string
}

func (m *propModel) failf(format string, a ...any) {
	m.t.Helper()
	tail := m.log
	if len(tail) > 30 {
		tail = tail[len(tail)-30:]
	}
	for _, l := range tail {
		m.t.Log(l)
	}
	m.t.Fatalf(format, a...)
}

func (m *propModel) forget(id string) {
	if s, ok := m.seq[id]; ok {
		m.stale = append(m.stale, s)
	}
	delete(m.seq, id)
	delete(m.by, id)
}

func (m *propModel) ended(p Peer, e End) {
	m.t.Helper()
	e.WasUp = m.live[p.ID]
	m.log = append(m.log, fmt.Sprintf("%v end %s %+v", m.now.Sub(t0), p.ID, e))
	if out := m.d.SessionEnded(m.now, p, e); out != nil {
		m.failf("SessionEnded closed %v", out)
	}
	m.live[p.ID] = false
	m.forget(p.ID)
	m.decisions(false)
}

func (m *propModel) randomEnd() End {
	return End{Cause: allCauses[m.r.IntN(len(allCauses))], Restart: m.r.IntN(8) == 0, LoadsFailed: m.r.IntN(3)}
}

// decisions takes and checks what the policy decided after one call;
// fromTick says whether that call was Tick.
func (m *propModel) decisions(fromTick bool) {
	m.t.Helper()
	var closes []Peer
	for _, dc := range actions(m.d.TakeDecisions()) {
		m.log = append(m.log, fmt.Sprintf("  -> %+v", dc))
		ph := m.d.peers[dc.Peer]
		if ph == nil {
			m.failf("decision for unknown peer: %+v", dc)
		}
		switch dc.Kind {
		case DecideProbe:
			if fromTick {
				m.failf("Tick probed: %+v", dc)
			}
			if !m.live[dc.Peer] {
				m.failf("probe of a dead session: %+v", dc)
			}
			// A probe is part of a suspect domain's round, or a rank's own
			// re-check after its fault (or half-open after an ejection).
			if ph.probeRound != m.d.suspect(m.now, m.d.domains[ph.domain]) && ph.probeRound {
				m.failf("round probe in a domain that is not suspect: %+v", dc)
			}
			if !ph.probeRound && !ph.mustProbe && !ph.halfOpen {
				m.failf("probe of a rank that is neither suspect nor re-checking: %+v", dc)
			}
			if dc.Seq <= m.lastSeq {
				m.failf("probe seq %d not above %d", dc.Seq, m.lastSeq)
			}
			m.lastSeq = dc.Seq
			// A new probe of a peer supersedes its outstanding one (a new
			// fault, a new epoch): one outstanding per peer (checked below).
			m.forget(dc.Peer)
			m.seq[dc.Peer] = dc.Seq
			m.by[dc.Peer] = m.now.Add(m.d.opt.ProbeTimeout)
		case DecideClose:
			by, ok := m.by[dc.Peer]
			if !fromTick || !ok || m.now.Before(by) || dc.Cause != CauseProgressStall {
				m.failf("close without a probe timeout: %+v (from tick %v, probe %v, deadline %v)", dc, fromTick, ok, by.Sub(t0))
			}
			m.forget(dc.Peer)
			if m.live[dc.Peer] {
				closes = append(closes, ph.peer)
			}
		default:
			m.failf("unknown decision %+v", dc)
		}
	}
	m.invariants()
	if fromTick {
		for id, by := range m.by {
			if !m.now.Before(by) {
				m.failf("probe of %s past its deadline %v not closed", id, by.Sub(t0))
			}
		}
	}
	// The table closes what the policy decided, and reports the ends.
	for _, p := range closes {
		m.ended(p, End{Cause: CauseProgressStall, LoadsFailed: m.r.IntN(2)})
	}
}

func (m *propModel) invariants() {
	m.t.Helper()
	if err := m.d.check(); err != nil {
		m.failf("check: %v", err)
	}
	if len(m.seq) != len(m.d.probes) {
		m.failf("%d probes decided and outstanding, policy holds %d", len(m.seq), len(m.d.probes))
	}
	for id, s := range m.seq {
		if m.d.probes[s] != id {
			m.failf("probe %d of %s not held", s, id)
		}
	}
	ejected := 0
	for _, dh := range m.d.domains {
		for _, ph := range dh.members {
			if m.now.Before(ph.ejectedUntil) {
				ejected++
				break
			}
		}
	}
	allowed := max(1, m.d.opt.MaxEjectionPercent*len(m.d.domains)/100)
	if ejected > allowed {
		m.failf("%d domains ejected of %d known, at most %d allowed", ejected, len(m.d.domains), allowed)
	}
}

func (m *propModel) step() {
	m.t.Helper()
	p := m.peers[m.r.IntN(len(m.peers))]
	switch k := m.r.IntN(100); {
	case k < 20: // time passes, timers run
		switch j := m.r.IntN(10); {
		case j < 6:
			m.now = m.now.Add(time.Duration(m.r.IntN(300)) * time.Millisecond)
		case j < 9:
			m.now = m.now.Add(m.d.opt.ProbeTimeout) // exactly on deadlines
		default:
			m.now = m.now.Add(time.Duration(m.r.IntN(20000)) * time.Millisecond)
		}
		m.log = append(m.log, fmt.Sprintf("%v tick", m.now.Sub(t0)))
		m.d.Tick(m.now)
		m.decisions(true)
	case k < 35: // a session comes up (inbound, or after MayDial)
		if m.live[p.ID] {
			return
		}
		if m.r.IntN(2) == 0 {
			q := p
			if m.r.IntN(3) == 0 {
				q.Domain = "" // a request that names no domain, as the table passes it
			}
			ok := m.d.MayDial(m.now, q)
			m.log = append(m.log, fmt.Sprintf("%v maydial %s %q = %v", m.now.Sub(t0), q.ID, q.Domain, ok))
			m.decisions(false)
			if !ok {
				return
			}
		}
		m.log = append(m.log, fmt.Sprintf("%v up %s", m.now.Sub(t0), p.ID))
		m.d.SessionUp(m.now, p)
		m.live[p.ID] = true
		m.decisions(false)
	case k < 55:
		if m.live[p.ID] {
			m.ended(p, m.randomEnd())
		}
	case k < 70: // a probe answers
		if len(m.seq) == 0 {
			return
		}
		var id string
		for _, q := range m.peers {
			if _, ok := m.seq[q.ID]; ok && (id == "" || m.r.IntN(2) == 0) {
				id = q.ID
			}
		}
		p = m.d.peers[id].peer
		s := m.seq[id]
		right := m.r.IntN(4) != 0
		if !right {
			switch {
			case len(m.stale) > 0 && m.r.IntN(2) == 0:
				s = m.stale[m.r.IntN(len(m.stale))]
			default:
				s += 1 + uint64(m.r.IntN(3))
			}
		}
		m.log = append(m.log, fmt.Sprintf("%v ack %s %d (right %v)", m.now.Sub(t0), id, s, right))
		m.d.ProbeAck(m.now, p, s)
		if right {
			m.forget(id)
		}
		m.decisions(false)
	case k < 85:
		if !m.live[p.ID] {
			return
		}
		g := m.d.Gate(m.now, p)
		m.log = append(m.log, fmt.Sprintf("%v gate %s = %v", m.now.Sub(t0), p.ID, g))
		m.decisions(false)
	default:
		ok := m.r.IntN(3) != 0
		m.log = append(m.log, fmt.Sprintf("%v load %s ok %v", m.now.Sub(t0), p.ID, ok))
		m.d.LoadDone(m.now, p, ok)
		m.decisions(false)
	}
}

func TestDomainProperty(t *testing.T) {
	seeds, steps := 200, 3000
	if testing.Short() {
		seeds = 30
	}
	for seed := range seeds {
		r := rand.New(rand.NewPCG(uint64(seed), 0x6b767032))
		opt := Options{
			ProbeTimeout:       time.Duration(50+r.IntN(300)) * time.Millisecond,
			EjectionBase:       time.Duration(1+r.IntN(3)) * time.Second,
			EjectionCap:        time.Duration(4+r.IntN(20)) * time.Second,
			MaxEjectionPercent: []int{10, 25, 50, 100}[r.IntN(4)],
			FlapThreshold:      1 + r.IntN(3),
			SuspectHold:        time.Duration(r.IntN(3000)) * time.Millisecond,
		}
		pol, err := New(Domain, opt)
		if err != nil {
			t.Fatal(err)
		}
		m := &propModel{
			t: t, r: r, d: pol.(*domainPolicy), now: t0,
			peers: []Peer{
				{ID: "10.0.0.1:1", Domain: "d0"}, {ID: "10.0.0.1:2", Domain: "d0"}, {ID: "10.0.0.1:3", Domain: "d0"},
				{ID: "10.0.0.2:1", Domain: "d1"}, {ID: "10.0.0.2:2", Domain: "d1"},
				{ID: "10.0.0.3:1", Domain: "d2"},
				{ID: "10.0.0.4:1"}, {ID: "10.0.0.4:2"},
			},
			live: map[string]bool{}, seq: map[string]uint64{}, by: map[string]time.Time{},
		}
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
			m.t = t
			for range steps {
				m.step()
			}
		})
		if t.Failed() {
			return
		}
	}
}
