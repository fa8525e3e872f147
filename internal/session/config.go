package session

import (
	"log/slog"
	"time"

	"github.com/kvp2p/kvp2p/internal/store"
	"github.com/kvp2p/kvp2p/internal/wire"
)

// Config is what every session of a node shares. It is read-only after the
// node starts.
type Config struct {
	LocalID     string // our advertised host:port
	Incarnation uint64
	Domain      string
	BlockBytes  uint32
	Fingerprint string
	HashSeed    string
	MaxInflight uint32

	HandshakeTimeout     time.Duration
	HeartbeatInterval    time.Duration
	HeartbeatTimeout     time.Duration
	LoadTimeoutSymmetric time.Duration
	LoadTimeoutPD        time.Duration
	AbortAckTimeout      time.Duration
	LookupTimeout        time.Duration // peer silence while lookups are outstanding; 0 = none
	StoreTimeout         time.Duration // a store job or lookup pin not settled in this time fails
	CancelDrainTimeout   time.Duration // abort: wait this long for the writer to stop before acking anyway
	LookupPendingTimeout time.Duration // producer: hold a key that is still being filled at most this long
	StallTimeout         time.Duration // progress watchdog; 0 = off
	LookupPinTimeout     time.Duration // producer: a lookup's pins no fetch claims go after this; 0 = LoadTimeoutSymmetric
	LookupKeysPerSecond  int           // producer: lookup keys served per second per session; 0 = DefaultLookupKeysPerSecond
	// LoadStartBudget fails a load whose producer said it has the blocks
	// but is sending others first (DataQueued) this long ago, with no
	// payload arrived yet: a hit that late is worth less than a prefill
	// now. Overload, not a fault: the session stays. A PD load waiting for
	// its prefill is not queued. 0 = off.
	LoadStartBudget time.Duration
	// SlowWindow turns on the slow judgment (slow.go): a load whose bytes
	// arrive is judged on its rate over the last one to two windows, once
	// it has delivered for one, and failed deliberately (ReasonSlow) when
	// at that rate it cannot finish within its load timeout. 0 = off.
	SlowWindow time.Duration

	Log *slog.Logger
}

// Blocks is the producer's view of the local block store: the session pins
// what a lookup found and unpins it when the round is settled.
type Blocks interface {
	PinKey(k wire.Key) (store.Slot, bool)
	Unpin(s store.Slot) error
	// Pending reports whether k is being filled right now (a lookup for it
	// waits, at most LookupPendingTimeout).
	Pending(k wire.Key) bool
}

// Verdict is what a lookup tells the scheduler.
type Verdict uint8

const (
	Retry Verdict = iota // not known yet; ask again next step
	Hit
	Miss
)

func (v Verdict) String() string {
	switch v {
	case Hit:
		return "HIT"
	case Miss:
		return "MISS"
	}
	return "RETRY"
}
