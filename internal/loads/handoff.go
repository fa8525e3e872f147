package loads

import (
	"time"

	"github.com/kvp2p/kvp2p/internal/health"
)

// A PD hand-off is a producer request's blocks parked for its decoder.
// Who may fetch them:
//
//   - When remote_decoder names the decoder (remote_host and remote_port,
//     its peer id), only a session of that peer may: a fetch by any other
//     peer is refused at once (its load fails within one round trip) and
//     nothing is bound to it, so the blocks stay for the decoder. A fetch
//     that came before the request named its decoder (a decoder-first
//     hand-off) and was bound to another peer is unbound when the request
//     arrives.
//   - When it names only the kv_request_id, the id is a capability: the
//     first session to fetch it holds it, and a fetch of the same id by
//     another session while that one lives is refused at once and logged
//     with both peers, so that the decoder that lost it fails within a
//     round trip and says why, rather than wait for its load timeout. The
//     id must then be unguessable (minCapabilityID); a shorter one is
//     logged once.
//
// A session's peer id is what its handshake proved (the source address
// under plain TCP, the certificate's rank under mTLS), so naming the
// decoder is as strong as the transport's identity (docs/security.md).

// minCapabilityID is the shortest kv_request_id an unnamed hand-off
// should carry: 16 characters hold 64 random bits in hex, which an
// attacker cannot guess within a store timeout at any fetch rate the
// quotas allow. vLLM's request ids carry a 128-bit uuid.
const minCapabilityID = 16

// named records a producer request's decoder, and unbinds a fetch that
// came first from another peer.
func (t *Table) named(now time.Time, d *dest) {
	if d == nil || d.kvID == "" {
		return
	}
	if d.peer == "" {
		if len(d.kvID) < minCapabilityID && !t.shortIDSaid {
			t.shortIDSaid = true
			t.log.Warn("a hand-off names no decoder and its kv_request_id is short: any peer that guesses it may fetch its blocks (name the decoder in remote_decoder's remote_host and remote_port, or use ids of 16 or more random characters); said once",
				"kv_req", d.kvID, "len", len(d.kvID))
		}
		return
	}
	t.decoders[d.kvID] = d.peer
	if c := t.bound[d.kvID]; c != nil && canonPeer(c.peer) != d.peer {
		t.log.Warn("hand-off fetched by a peer that is not its decoder: refused", "kv_req", d.kvID, "peer", c.peer, "decoder", d.peer)
		delete(t.bound, d.kvID)
		c.s.FinishProducer(now, d.kvID)
		t.touch(c)
	}
}

// mayBind reports whether c's fetch of kvID may bind it; if not, the
// fetch is refused at once.
func (t *Table) mayBind(now time.Time, c *conn, kvID string) bool {
	if want := t.decoders[kvID]; want != "" && canonPeer(c.peer) != want {
		t.log.Warn("hand-off fetched by a peer that is not its decoder: refused", "kv_req", kvID, "peer", c.peer, "decoder", want)
		c.s.FinishProducer(now, kvID)
		return false
	}
	if b := t.bound[kvID]; b != nil && b != c && b.s.Ended() == health.CauseNone {
		t.log.Warn("hand-off fetched by a second peer while the first holds it: refused (name the decoder in remote_decoder to keep it for the right one)",
			"kv_req", kvID, "peer", c.peer, "holder", b.peer)
		c.s.FinishProducer(now, kvID)
		return false
	}
	return true
}
