package loads

import (
	"time"

	"github.com/kvp2p/kvp2p/internal/health"
	"github.com/kvp2p/kvp2p/internal/session"
)

// Timers are the knobs docs/design.md §5 lists; a policy's preset fills them.
type Timers struct {
	HeartbeatInterval    time.Duration
	HeartbeatTimeout     time.Duration
	ProgressInterval     time.Duration
	StallTimeout         time.Duration // 0 = watchdog off
	LoadStartBudget      time.Duration // 0 = off; see session.Config
	SlowWindow           time.Duration // 0 = off; see session.Config
	LoadTimeoutSymmetric time.Duration
	LoadTimeoutPD        time.Duration
	AbortAckTimeout      time.Duration
	HandshakeTimeout     time.Duration
	LookupTimeout        time.Duration // 0 = none
	IdleTimeout          time.Duration
	UnboundStoreTimeout  time.Duration
	StoreTimeout         time.Duration
	CancelDrainTimeout   time.Duration
	LookupPendingTimeout time.Duration
	ProbeTimeout         time.Duration
	ConnectWait          time.Duration
	EjectionBase         time.Duration
	EjectionCap          time.Duration
	HostQuarantine       time.Duration
	ShutdownDrain        time.Duration
	MaxEjectionPercent   int
	MaxPeers             int
}

// KVP2PTimers are docs/design.md's defaults.
func KVP2PTimers() Timers {
	return Timers{
		HeartbeatInterval: 500 * time.Millisecond, HeartbeatTimeout: 2 * time.Second,
		ProgressInterval: 100 * time.Millisecond, StallTimeout: time.Second,
		LoadStartBudget:      2 * time.Second,
		SlowWindow:           500 * time.Millisecond,
		LoadTimeoutSymmetric: 10 * time.Second, LoadTimeoutPD: 30 * time.Second,
		AbortAckTimeout: 5 * time.Second, HandshakeTimeout: 5 * time.Second,
		LookupTimeout: time.Second, IdleTimeout: 300 * time.Second,
		UnboundStoreTimeout: 60 * time.Second, StoreTimeout: 30 * time.Second,
		// The producer acks an abort it cannot drain before the consumer gives up on it.
		CancelDrainTimeout: 3 * time.Second, LookupPendingTimeout: 5 * time.Second,
		ProbeTimeout: 250 * time.Millisecond, ConnectWait: 250 * time.Millisecond,
		EjectionBase: 10 * time.Second, EjectionCap: 300 * time.Second,
		HostQuarantine: 10 * time.Second, ShutdownDrain: 3 * time.Second,
		MaxEjectionPercent: 50, MaxPeers: 128,
	}
}

// VLLMTimers are the reference's own timers, kept by the per-peer and
// host-group presets so that comparisons are honest: ZMQ heartbeats 2 s /
// 10 s, a 30 s handshake, a 10 s abort-ack, no lookup deadline and no
// progress watchdog.
func VLLMTimers() Timers {
	t := KVP2PTimers()
	t.HeartbeatInterval, t.HeartbeatTimeout = 2*time.Second, 10*time.Second
	t.StallTimeout = 0
	t.LoadStartBudget = 0 // vLLM has none: a queued load waits for its load timeout
	t.SlowWindow = 0      // nor a slow judgment: a slow load waits for its load timeout
	t.AbortAckTimeout = 10 * time.Second
	t.CancelDrainTimeout = 10 * time.Second
	t.HandshakeTimeout = 30 * time.Second
	t.LookupTimeout = 0
	t.ProbeTimeout, t.ConnectWait = 0, 0
	return t
}

// PresetTimers returns the timers of a policy's preset.
func PresetTimers(policy string) Timers {
	switch policy {
	case health.PerPeer, health.HostGroup:
		return VLLMTimers()
	}
	return KVP2PTimers()
}

// Identity is what a node advertises.
type Identity struct {
	LocalID     string
	Incarnation uint64
	Domain      string
	BlockBytes  uint32
	Fingerprint string
	HashSeed    string
}

// BuildConfig assembles a table config from an identity, timers and a policy.
func BuildConfig(id Identity, t Timers, p health.Policy) Config {
	return Config{
		Session: session.Config{
			LocalID: id.LocalID, Incarnation: id.Incarnation, Domain: id.Domain,
			BlockBytes: id.BlockBytes, Fingerprint: id.Fingerprint, HashSeed: id.HashSeed,
			MaxInflight:       1024,
			HandshakeTimeout:  t.HandshakeTimeout,
			HeartbeatInterval: t.HeartbeatInterval, HeartbeatTimeout: t.HeartbeatTimeout,
			LoadTimeoutSymmetric: t.LoadTimeoutSymmetric, LoadTimeoutPD: t.LoadTimeoutPD,
			AbortAckTimeout: t.AbortAckTimeout, LookupTimeout: t.LookupTimeout,
			StoreTimeout: t.StoreTimeout, CancelDrainTimeout: t.CancelDrainTimeout,
			LookupPendingTimeout: t.LookupPendingTimeout, StallTimeout: t.StallTimeout,
			LoadStartBudget: t.LoadStartBudget, SlowWindow: t.SlowWindow,
		},
		Policy:              p,
		MaxPeers:            t.MaxPeers,
		IdleTimeout:         t.IdleTimeout,
		UnboundStoreTimeout: t.UnboundStoreTimeout,
		ReapedRetention:     10 * time.Minute,
		ShutdownDrain:       t.ShutdownDrain,
	}
}

// PolicyOptions are the policy knobs of a set of timers.
func PolicyOptions(t Timers) health.Options {
	return health.Options{
		HostQuarantine: t.HostQuarantine, ProbeTimeout: t.ProbeTimeout, ConnectWait: t.ConnectWait,
		EjectionBase: t.EjectionBase, EjectionCap: t.EjectionCap, MaxEjectionPercent: t.MaxEjectionPercent,
		SilenceWindow: t.StallTimeout, // a delivering rank is judged as a load's watchdog judges it
	}
}
