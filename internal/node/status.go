package node

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/kvp2p/kvp2p/internal/health"
	"github.com/kvp2p/kvp2p/internal/loads"
	"github.com/kvp2p/kvp2p/internal/metrics"
)

// Snapshot is a node's state and counts at one instant (see
// internal/metrics): what the status page, `kvp2p status` and a metrics
// scrape show.
type Snapshot = metrics.Snapshot

// Status returns a snapshot of the node, taken in its loop: the caller
// never reads the node's state itself, and nothing is locked while the
// snapshot is encoded or sent. It fails with ErrClosed once the node
// stopped, or with ctx's error if the loop does not get to it in time (the
// node has not started serving).
func (n *Node) Status(ctx context.Context) (*Snapshot, error) {
	ch := make(chan *Snapshot, 1)
	select {
	case n.calls <- call{f: func(time.Time) { ch <- n.snapshot(time.Now()) }}:
	case <-n.done:
		return nil, ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return <-ch, nil // the loop ran the call before taking anything else
}

// snapshot copies what the table, the policy and the observer hold. It
// runs in the loop.
func (n *Node) snapshot(now time.Time) *Snapshot {
	v := n.tb.View(now)
	s := &Snapshot{
		Node: metrics.Node{
			PeerID: n.cfg.PeerID, FailureDomain: n.cfg.FailureDomain, Policy: cmp.Or(n.cfg.Policy, DefaultPolicy),
			Taken: now, UptimeSec: now.Sub(n.obs.started).Seconds(), MaxPeers: n.tb.MaxPeers(),
			Listening: n.ln != nil && !n.stopping(), EngineExpected: n.sc != nil,
			EngineAttached: n.sc != nil && n.sc.Attached(),
		},
		Requests: v.Requests,
		Counters: n.obs.c.Clone(),
		Hists:    n.obs.h.Clone(),
	}
	s.Counters.ProbesFailed, s.Counters.Ejections = v.Policy.ProbesFailed, v.Policy.Ejections
	r := n.tb.Replacements()
	s.Counters.SessionReplacements, s.Counters.TakeoversRefused = r.Replaced, r.Refused
	s.Counters.ConnsRefused = n.connsRefused()
	if n.find != nil {
		s.Counters.Summaries = n.find.stats.c
		s.Find = n.find.snapshot(now)
	}

	// Domains as the policy sees them; peers with sessions the policy does
	// not know (per-peer keeps no state) go in their own.
	doms := map[string]*metrics.Domain{}
	peerDom := map[string]string{}
	peer := func(dom, id string) *metrics.Peer {
		d := doms[dom]
		if d == nil {
			d = &metrics.Domain{Name: dom, State: health.StateOK}
			doms[dom] = d
		}
		for i := range d.Peers {
			if d.Peers[i].ID == id {
				return &d.Peers[i]
			}
		}
		d.Peers = append(d.Peers, metrics.Peer{ID: id})
		return &d.Peers[len(d.Peers)-1]
	}
	for _, dv := range v.Domains {
		for _, pv := range dv.Peers {
			p := peer(dv.Domain, pv.ID)
			p.Live, p.Probing, p.Faults = pv.Live, pv.Probing, pv.Faults
			p.Delivering = pv.Delivering
			p.EjectedForSec = pv.EjectedFor.Seconds()
			peerDom[pv.ID] = dv.Domain
		}
		if d := doms[dv.Domain]; d != nil {
			d.State = dv.State
		}
	}
	s.Counters.ProbesRenewed = v.Policy.ProbesRenewed // slow, not dead (docs/liveness.md)
	byConn := map[loads.ConnID]loads.SessionView{}
	for _, sv := range v.Sessions {
		byConn[sv.Conn] = sv
		id := sv.Peer
		if id == "" {
			id = "(handshaking)" // inbound, before its Hello named it
		}
		dom, ok := peerDom[id]
		if !ok {
			dom = health.DomainOf(health.Peer{ID: id, Domain: sv.Domain})
		}
		p := peer(dom, id)
		if sv.State == loads.SessionReady {
			p.Live = true
		}
		ss := metrics.Session{
			Conn: uint64(sv.Conn), Outbound: sv.Outbound, State: sv.State, Cause: sv.Cause,
			AgeSec: now.Sub(sv.Since).Seconds(), LastProgressSec: -1, Slow: sv.Slow,
		}
		p.Slow = p.Slow || sv.Slow // slow, not dead (docs/liveness.md)
		if c := n.obs.conns[sv.Conn]; c != nil {
			ss.BytesIn, ss.BytesOut = c.bytesIn, c.bytesOut
			if !c.lastProgress.IsZero() {
				ss.LastProgressSec = now.Sub(c.lastProgress).Seconds()
			}
		}
		p.Sessions = append(p.Sessions, ss)
	}
	for _, d := range doms {
		slices.SortFunc(d.Peers, func(a, b metrics.Peer) int { return cmp.Compare(a.ID, b.ID) })
		s.Domains = append(s.Domains, *d)
	}
	slices.SortFunc(s.Domains, func(a, b metrics.Domain) int { return cmp.Compare(a.Name, b.Name) })
	ids := []string{n.cfg.PeerID}
	for _, d := range s.Domains {
		for _, p := range d.Peers {
			ids = append(ids, p.ID)
		}
	}
	s.Node.Identity = n.identityMode()
	s.Node.SharedHosts = sharedHosts(ids)
	s.Node.Exposure = sameHostExposure(s.Node.Identity, s.Node.SharedHosts)

	for _, j := range v.Jobs {
		if j.Kind != loads.JobLoad {
			s.Stores++
			continue
		}
		l := metrics.Load{Job: j.Job, ReqID: j.ReqID, Blocks: j.Blocks}
		if !j.Submitted.IsZero() {
			l.AgeSec = now.Sub(j.Submitted).Seconds()
		}
		if sv, ok := byConn[j.Conn]; ok {
			l.Peer = sv.Peer
			l.Domain = peerDom[sv.Peer]
			if l.Domain == "" {
				l.Domain = health.DomainOf(health.Peer{ID: sv.Peer, Domain: sv.Domain})
			}
		}
		if o := n.obs.jobs[j.Job]; o != nil {
			l.Bytes = o.bytes
		}
		s.Loads = append(s.Loads, l)
	}
	return s
}

// stopping reports whether Shutdown was asked for.
func (n *Node) stopping() bool {
	select {
	case <-n.stopReq:
		return true
	default:
		return false
	}
}
