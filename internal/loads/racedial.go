package loads

import (
	"time"

	"github.com/kvp2p/kvp2p/internal/health"
	"github.com/kvp2p/kvp2p/internal/wire"
)

// Racing connect attempts. An outbound attempt still pending after the
// policy's StaleDial is not waited out: a fresh attempt is dialed on the
// next lookup. Two causes look alike from here and want opposite things:
//
//   - a Hello lost to a partition that has healed since sits in TCP's
//     retransmission backoff: only a fresh attempt gets through soon;
//   - a peer whose process is starved of CPU (two vLLM engines spinning on
//     a small machine: 0.3-3 s between runs) answers every Hello late:
//     closing each attempt when the next starts means no handshake ever
//     finishes (20 of 20 loads fell back in one run).
//
// So an attempt the peer's kernel answered (TCP connected: the peer's
// process exists and may only be slow) is not closed when its replacement
// is dialed: both run, and the first to finish its handshake becomes the
// peer's session (attemptReady); the others are closed with
// Goodbye(duplicate), never having been sessions. An attempt no kernel
// answered went into a partition and is closed as before. A racer is
// rejected (see conn.rejected) until it wins: it counts neither against
// max_peers nor as a session the policy hears of, exactly as the attempt
// it used to be replaced by before it was closed.
//
// The producer keeps the first of a dialer's attempts whose Hello it reads
// and refuses the later ones (identified) without a HelloAck (receive), so
// an attempt the producer refused never looks ready here.

// maxAttempts bounds a peer's live connect attempts: the current one and
// maxAttempts-1 racers. Past it, the racer between the oldest and the
// newest is closed: the oldest is the first in the peer's accept queue (a
// slow peer answers it first), the newest the likeliest through a healed
// partition.
const maxAttempts = 3

// race makes c, the peer's current attempt, stale and answered, a racer: it
// keeps running beside the fresh attempt the caller dials next.
func (t *Table) race(now time.Time, c *conn) {
	if c.racing {
		return
	}
	t.log.Info("racing a stale connect attempt with a fresh one", "peer", c.peer, "pending_for", now.Sub(c.s.PendingSince()))
	t.reject(c) // not a session unless it wins (unreject)
	c.racing, c.raced = true, true
	rs := append(t.liveRacers(c.peer), c)
	for len(rs) > maxAttempts-1 {
		drop := rs[len(rs)-2] // keep the oldest and the newest
		t.loseRace(now, drop)
		rs = append(rs[:len(rs)-2], rs[len(rs)-1])
	}
	t.racers[c.peer] = rs
}

// unrace takes back race(c) when no fresh attempt could be dialed
// (shutting down, quarantined, peer cap): c stays the peer's current
// attempt, as it was. It returns nil: the caller's request falls back.
func (t *Table) unrace(c *conn) *conn {
	if c == nil || !c.racing {
		return nil
	}
	c.racing = false
	t.unreject(c)
	t.liveRacers(c.peer) // drops it from the list
	return nil
}

// liveRacer reports whether r races on: a racer still live and pending.
func (r *conn) liveRacer() bool {
	return r.racing && r.st == connLive && r.s.Ended() == health.CauseNone
}

// liveRacers returns peer's racers still pending, oldest first, and drops
// the others from the table's list.
func (t *Table) liveRacers(peer string) []*conn {
	rs := t.racers[peer]
	kept := rs[:0]
	for _, r := range rs {
		if r.liveRacer() {
			kept = append(kept, r)
		}
	}
	clear(rs[len(kept):])
	if len(kept) == 0 {
		delete(t.racers, peer)
		return nil
	}
	t.racers[peer] = kept
	return kept
}

// loseRace closes an attempt that lost (or was dropped from) a race. It
// was never a session: rejected, so the policy does not hear of its end,
// and the peer is told it is a duplicate.
func (t *Table) loseRace(now time.Time, c *conn) {
	c.racing = false
	t.reject(c)
	c.s.Goodbye(now, wire.GoodbyeDuplicate)
	t.touch(c)
}

// unreject undoes reject for a racer that won: it counts again.
func (t *Table) unreject(c *conn) {
	if c.rejected && c.rep != reaped && c.st != connGone {
		t.nLive++
	}
	c.rejected = false
}

// attemptReady settles a race when c, an outbound session, has just
// finished its handshake: a racer that finishes first becomes the peer's
// session in place of the current attempt; the current attempt finishing
// first ends the racers. A racer finishing while the peer already has
// another session (its own dial came up meanwhile) is not needed.
func (t *Table) attemptReady(now time.Time, c *conn) {
	t.log.Debug("connect attempt's handshake finished", "peer", c.peer, "pending_for", now.Sub(c.s.PendingSince()), "racing", c.racing)
	if c.racing { // loseRace or crown ends its racing
		old := t.byPeer[c.peer]
		if old != nil && old != c && old.s.Ended() == health.CauseNone && !(old.s.Outbound() && old.s.Pending()) {
			t.log.Info("a racing connect attempt finished after the peer had a session: closing it", "peer", c.peer)
			t.loseRace(now, c)
			return
		}
		t.log.Info("a racing connect attempt won: it is the peer's session", "peer", c.peer,
			"pending_for", now.Sub(c.s.PendingSince()))
		t.crown(c)
		if old != nil && old != c && old.s.Ended() == health.CauseNone {
			t.loseRace(now, old)
		}
	}
	if t.byPeer[c.peer] == c {
		t.endRace(now, c.peer)
	}
}

// endRace closes peer's racers: a handshake finished, or the policy closed
// the attempt they race with as a dead peer's sibling (reapOne).
func (t *Table) endRace(now time.Time, peer string) {
	for _, r := range t.liveRacers(peer) {
		t.loseRace(now, r)
	}
	delete(t.racers, peer)
}

// promoteRacer: the peer's current attempt c ended (reapOne) before any
// handshake finished. The newest live racer becomes the current attempt,
// so that lookups wait on it rather than dial again.
func (t *Table) promoteRacer(now time.Time, c *conn) {
	if t.shuttingDown || t.byPeer[c.peer] != c || len(t.racers[c.peer]) == 0 {
		return
	}
	rs := t.liveRacers(c.peer)
	if len(rs) == 0 {
		return
	}
	r := rs[len(rs)-1]
	t.racers[c.peer] = rs[:len(rs)-1]
	if len(rs) == 1 {
		delete(t.racers, c.peer)
	}
	t.crown(r)
	t.log.Info("the current connect attempt ended: a racing one takes its place", "peer", c.peer, "conn", r.id)
}

// crown makes racer r its peer's current attempt (or session): it races
// no more and counts again.
func (t *Table) crown(r *conn) {
	r.racing = false
	t.unreject(r)
	t.byPeer[r.peer] = r
}
