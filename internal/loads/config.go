package loads

import (
	"log/slog"
	"time"

	"github.com/kvp2p/kvp2p/internal/health"
	"github.com/kvp2p/kvp2p/internal/session"
	"github.com/kvp2p/kvp2p/internal/wire"
)

// Config is the table's configuration; the session part is shared by every
// session. Validation and defaults live in internal/node's Config.
type Config struct {
	Session             session.Config
	Policy              health.Policy
	MaxPeers            int
	IdleTimeout         time.Duration
	UnboundStoreTimeout time.Duration
	ReapedRetention     time.Duration // how long a reaped unbound id is remembered (late fetches)
	ShutdownDrain       time.Duration
	Log                 *slog.Logger
	// ProbeBeforeReplace: how long an inbound newcomer that would replace
	// a live, ready session (a new incarnation, or the simultaneous-dial
	// tie-break) waits while the live session is probed (hold.go). Zero:
	// replace at once (tests of the bare table only; the node always sets
	// it).
	ProbeBeforeReplace time.Duration

	// ExternalSlots: the store's slots are chunks of an engine's memory
	// (store.NewIndex). A successful load then gives its slots back (Free:
	// the engine's again) instead of committing them to the index, and
	// loads go only into the slots the engine names (SubmitLoadInto).
	ExternalSlots bool
	// Resolver, when set, is asked whether a key a peer looked up that is
	// not in the store may still come (the engine is asked to pin it): the
	// lookup then waits for it as for a key being filled.
	Resolver Resolver
	// Observer, when set, hears every job result (metrics).
	Observer Observer
	// CheckTimers (tests): on every Tick, compare each session's queued
	// deadlines with a fresh computation (a full scan); TimerError
	// reports the first queued deadline found later than the real one.
	CheckTimers bool
}

// Resolver finds blocks the store does not hold yet. Pending is called in
// the table's goroutine and must not block: it may start a request (the
// node asks its engine) and answer true while that is outstanding. asker
// names the session whose peer looked k up (its ConnID), so that what
// the resolver may ask is shared among peers.
type Resolver interface {
	Pending(asker uint64, k wire.Key) bool
}
