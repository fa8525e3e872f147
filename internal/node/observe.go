package node

import (
	"strings"
	"time"

	"github.com/kvp2p/kvp2p/internal/datapath"
	"github.com/kvp2p/kvp2p/internal/health"
	"github.com/kvp2p/kvp2p/internal/loads"
	"github.com/kvp2p/kvp2p/internal/metrics"
	"github.com/kvp2p/kvp2p/internal/session"
	"github.com/kvp2p/kvp2p/internal/wire"
)

// maxTimed bounds the lookups and transfers the observer times at once: a
// peer that never answers must not grow it without end. Past it, new ones
// go untimed (their counts are still kept).
const maxTimed = 1 << 16

// observer counts what the node does, for metrics and status. It is owned
// by the loop: every method runs there, and a snapshot copies it out.
// It watches the actions the loop performs and the events it feeds the
// table; it decides nothing.
type observer struct {
	started time.Time
	c       metrics.Counters
	h       metrics.Histograms
	conns   map[loads.ConnID]*connObs
	jobs    map[uint64]*jobObs // loads whose transfer was posted, until settled and received
	lookups map[lookupKey]time.Time
}

type connObs struct {
	bytesIn, bytesOut uint64
	lastProgress      time.Time
}

type jobObs struct {
	conn     loads.ConnID
	fetchAt  time.Time // Fetch queued; zero once its first data arrived
	postedAt time.Time // the data path was told to expect it
	bytes    uint64    // received so far
	settled  bool      // the table published its result
	received bool      // its data path ended it
}

type lookupKey struct {
	conn  loads.ConnID
	req   string
	round uint64
}

func newObserver(now time.Time) *observer {
	return &observer{
		started: now, c: metrics.Counters{SessionEnds: map[string]uint64{}}, h: metrics.NewHistograms(),
		conns: map[loads.ConnID]*connObs{}, jobs: map[uint64]*jobObs{}, lookups: map[lookupKey]time.Time{},
	}
}

func (o *observer) conn(id loads.ConnID) *connObs {
	c := o.conns[id]
	if c == nil {
		c = &connObs{}
		o.conns[id] = c
	}
	return c
}

// action sees an action before the loop performs it.
func (o *observer) action(now time.Time, a loads.Action, byPolicy bool) {
	switch a.Kind {
	case loads.ActSend:
		switch m := a.Msg.(type) {
		case *wire.Lookup:
			if len(o.lookups) < maxTimed {
				o.lookups[lookupKey{a.Conn, m.ReqID, m.Round}] = now
			}
		case *wire.LookupPending:
			o.c.LookupPending.Sent++
		case *wire.Fetch:
			if j := o.job(m.Job, a.Conn); j != nil {
				j.fetchAt = now
			}
		}
	case loads.ActData:
		switch a.Op.Kind {
		case session.OpExpect:
			if j := o.job(a.Op.Job, a.Conn); j != nil && j.postedAt.IsZero() {
				j.postedAt = now
				o.h.TransferBlocks.Observe(float64(len(a.Op.Slots)))
			}
		case session.OpProbe:
			o.c.ProbesSent++
		}
	case loads.ActClose:
		o.c.SessionEnds[a.Cause.String()]++
		if a.Cause.IsFault() {
			o.c.PeerDisconnects++
		}
		if a.Cause == health.CauseProgressStall && !byPolicy {
			o.c.StallsDetected++
		}
		for k := range o.lookups {
			if k.conn == a.Conn {
				delete(o.lookups, k)
			}
		}
	}
}

// job returns the transfer record of a load, creating it; nil past maxTimed.
func (o *observer) job(id uint64, conn loads.ConnID) *jobObs {
	j := o.jobs[id]
	if j == nil {
		if len(o.jobs) >= maxTimed {
			return nil
		}
		j = &jobObs{conn: conn}
		o.jobs[id] = j
	}
	return j
}

// received sees a control message from a session.
func (o *observer) received(now time.Time, conn loads.ConnID, m wire.Message) {
	if _, ok := m.(*wire.LookupPending); ok {
		o.c.LookupPending.Received++
		return
	}
	r, ok := m.(*wire.LookupResp)
	if !ok {
		return
	}
	for _, hit := range r.Hits {
		if hit {
			o.c.LookupHits++
		} else {
			o.c.LookupMisses++
		}
	}
	k := lookupKey{conn, r.ReqID, r.Round}
	if at, ok := o.lookups[k]; ok {
		o.h.LookupRTT.Observe(now.Sub(at).Seconds())
		delete(o.lookups, k)
	}
}

// data sees a data-path event.
func (o *observer) data(now time.Time, conn loads.ConnID, ev datapath.Event) {
	switch e := ev.(type) {
	case datapath.RecvProgress:
		o.progress(now, conn, e.Job, e.Bytes)
	case datapath.RecvEnd:
		o.progress(now, conn, e.Job, e.Bytes)
		if j := o.jobs[e.Job]; j != nil {
			if !j.postedAt.IsZero() {
				o.h.TransferTime.Observe(now.Sub(j.postedAt).Seconds())
			}
			j.received = true
			o.maybeForget(e.Job, j)
		}
	case datapath.SendEnd:
		o.c.BytesOut += e.Bytes
		c := o.conn(conn)
		c.bytesOut += e.Bytes
		c.lastProgress = now
	case datapath.ProbeAck:
		o.c.ProbesAcked++
	case datapath.Closed:
		// Nothing of this data path is in flight any more, and the
		// session is ended: forget it.
		delete(o.conns, conn)
		for id, j := range o.jobs {
			if j.conn == conn {
				j.received = true
				o.maybeForget(id, j)
			}
		}
	}
}

// progress accounts a job's bytes so far (RecvProgress and RecvEnd carry
// the job's running total).
func (o *observer) progress(now time.Time, conn loads.ConnID, job, total uint64) {
	c := o.conn(conn)
	c.lastProgress = now
	j := o.jobs[job]
	if j == nil {
		return
	}
	if !j.fetchAt.IsZero() {
		o.h.FetchRTT.Observe(now.Sub(j.fetchAt).Seconds())
		j.fetchAt = time.Time{}
	}
	if total > j.bytes {
		d := total - j.bytes
		j.bytes = total
		o.c.BytesIn += d
		c.bytesIn += d
	}
}

func (o *observer) maybeForget(id uint64, j *jobObs) {
	if j.settled && j.received {
		delete(o.jobs, id)
	}
}

// JobSettled implements loads.Observer (called in the loop).
func (o *observer) JobSettled(r loads.JobResult, submitted time.Time) {
	now := time.Now()
	age := 0.0
	if !submitted.IsZero() {
		age = now.Sub(submitted).Seconds()
	}
	j := o.jobs[r.Job]
	switch r.Kind {
	case loads.JobLoad:
		if j != nil && !j.postedAt.IsZero() && !submitted.IsZero() {
			o.h.PostTime.Observe(j.postedAt.Sub(submitted).Seconds())
		}
		if r.OK {
			o.c.LoadsOK++
			if j != nil {
				o.h.TimeToHit.Observe(age) // a load with nothing to move is no hit worth timing
			}
		} else {
			o.c.LoadFailures++
			o.c.FailedLoadBytes += r.Bytes
			switch {
			case strings.HasPrefix(r.Reason, "load timed out"):
				o.c.LoadTimeouts++
			case r.Reason == session.ReasonStartBudget:
				o.c.LoadsOverBudget++
			case r.Reason == session.ReasonSlow:
				o.c.LoadsTooSlow++
			}
			o.h.TimeToFallback.Observe(age)
		}
		if j != nil {
			j.settled = true
			o.maybeForget(r.Job, j)
		}
	case loads.JobStore:
		if r.OK {
			o.c.StoresOK++
		} else {
			o.c.StoreFailures++
			if r.Reason == loads.ReasonUnboundTimeout {
				o.c.UnboundStoreTimeouts++
			}
		}
	}
}

// LookupFellBack implements loads.Observer (called in the loop).
func (o *observer) LookupFellBack(_ string, waited time.Duration) {
	o.c.LookupFallbacks++
	o.h.LookupFallback.Observe(waited.Seconds())
}

// LookupPendingIgnored implements loads.Observer (called in the loop).
func (o *observer) LookupPendingIgnored() { o.c.LookupPending.Ignored++ }

var _ loads.Observer = (*observer)(nil)
