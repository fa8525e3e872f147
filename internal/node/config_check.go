package node

import (
	"errors"
	"fmt"
	"time"

	"github.com/kvp2p/kvp2p/internal/loads"
)

// ErrMachine is wrapped by a config error that names more than the
// machine has (an arena over its physical memory): the command exits with
// its own code for it, since no retry with the same config can succeed.
var ErrMachine = errors.New("beyond this machine")

// MaxSlots bounds slots so that the store's per-slot index stays small
// (and slots x block_bytes is computed without overflow).
const MaxSlots = 1 << 26

// checkSizes checks the arena against its bounds and the machine.
// physMem is the machine's memory in bytes (0: unknown, not checked).
func (c *Config) checkSizes(physMem uint64) error {
	bb := c.BlockBytes
	if bb == 0 {
		bb = DefaultBlockBytes
	}
	slots := c.Slots
	if slots == 0 {
		slots = DefaultSlots
	}
	if slots > MaxSlots {
		return fmt.Errorf("kvp2p: config: slots %d: at most %d", slots, MaxSlots)
	}
	arena := uint64(slots) * uint64(bb) // < 2^26 * 2^28: no overflow
	if arena > maxArena {
		return fmt.Errorf("kvp2p: config: slots %d x block_bytes %d: arena over %d GiB", slots, bb, maxArena>>30)
	}
	if physMem > 0 && arena > physMem {
		return fmt.Errorf("kvp2p: config: slots %d x block_bytes %d = %d MiB arena, over this machine's %d MiB of memory: %w",
			slots, bb, arena>>20, physMem>>20, ErrMachine)
	}
	return nil
}

// timerFloor is the shortest any timer that is on may be: the loop's
// resolution. A shorter one fires on every tick.
const timerFloor = tickEvery

// handshakeFloor: a handshake (a dial, TLS, two frames each way) cannot
// finish faster than this even on loopback under load; a shorter timeout
// resets every connection.
const handshakeFloor = 100 * time.Millisecond

// timerRule is one relation the merged timers (preset plus overrides) must
// keep; on reports whether it applies (a timer that is off relates to
// nothing).
type timerRule struct {
	what string
	on   func(t *loads.Timers) bool
	ok   func(t *loads.Timers) bool
}

// timerRules is the one table of relations between timers.
func timerRules() []timerRule {
	always := func(*loads.Timers) bool { return true }
	return []timerRule{
		{"handshake_timeout must be at least 100ms", always,
			func(t *loads.Timers) bool { return t.HandshakeTimeout >= handshakeFloor }},
		{"heartbeat_timeout must be longer than heartbeat_interval (idle sessions would die as faults)", always,
			func(t *loads.Timers) bool { return t.HeartbeatTimeout > t.HeartbeatInterval }},
		{"stall_timeout must be longer than progress_interval (every queued load would stall)",
			func(t *loads.Timers) bool { return t.StallTimeout > 0 },
			func(t *loads.Timers) bool { return t.StallTimeout > t.ProgressInterval }},
		{"probe_timeout must be shorter than stall_timeout (a probe answers before the watchdog decides)",
			func(t *loads.Timers) bool { return t.ProbeTimeout > 0 && t.StallTimeout > 0 },
			func(t *loads.Timers) bool { return t.ProbeTimeout < t.StallTimeout }},
		{"lookup_timeout must be longer than heartbeat_interval (a quiet, healthy peer pings within it)",
			func(t *loads.Timers) bool { return t.LookupTimeout > 0 },
			func(t *loads.Timers) bool { return t.LookupTimeout > t.HeartbeatInterval }},
		{"ejection_cap must not be shorter than ejection_base", always,
			func(t *loads.Timers) bool { return t.EjectionCap >= t.EjectionBase }},
		{"load_timeout_pd and load_timeout_symmetric must be longer than stall_timeout",
			func(t *loads.Timers) bool { return t.StallTimeout > 0 },
			func(t *loads.Timers) bool {
				return t.LoadTimeoutPD > t.StallTimeout && t.LoadTimeoutSymmetric > t.StallTimeout
			}},
	}
}

// checkTimers checks every merged timer against its floor, then the
// relations between them.
func (c *Config) checkTimers() error {
	d := *c
	if d.Policy == "" {
		d.Policy = DefaultPolicy
	}
	t := d.timers()
	for _, f := range (&Timers{}).durations(&t) { // dst points into t
		if v := *f.dst; v != 0 && v < timerFloor {
			return fmt.Errorf("kvp2p: config: timers.%s %v: must be 0 (preset) or at least %v", f.name, v, timerFloor)
		}
	}
	for _, r := range timerRules() {
		if r.on(&t) && !r.ok(&t) {
			return fmt.Errorf("kvp2p: config: timers: %s (heartbeat %v/%v, progress %v, stall %v, probe %v, lookup %v, handshake %v)",
				r.what, t.HeartbeatInterval, t.HeartbeatTimeout, t.ProgressInterval, t.StallTimeout, t.ProbeTimeout,
				t.LookupTimeout, t.HandshakeTimeout)
		}
	}
	return nil
}
