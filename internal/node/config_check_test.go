package node

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestConfigRefusesNonsense is finding 8: sizes beyond the machine and
// timers below their floor or against the timers they relate to were
// accepted (and then panicked, ran out of memory, or reset every
// connection). Each row is refused with a message naming the field.
func TestConfigRefusesNonsense(t *testing.T) {
	ms := time.Millisecond
	for _, tt := range []struct {
		name string
		mut  func(*Config)
		want string
	}{
		{"huge slots, default block_bytes", func(c *Config) { c.Slots = 1 << 40 }, "slots 1099511627776: at most"},
		{"slots x block_bytes overflows", func(c *Config) { c.Slots, c.BlockBytes = 1<<26, 256<<20 }, "arena over 1024 GiB"},
		{"handshake 1ns", func(c *Config) { c.Timers.HandshakeTimeout = 1 }, "timers.handshake_timeout 1ns"},
		{"handshake under its floor", func(c *Config) { c.Timers.HandshakeTimeout = 50 * ms }, "handshake_timeout must be at least 100ms"},
		{"heartbeat timeout under interval", func(c *Config) { c.Timers.HeartbeatTimeout = 400 * ms }, "heartbeat_timeout must be longer than heartbeat_interval"},
		{"heartbeat timeout equal to interval", func(c *Config) { c.Timers.HeartbeatInterval, c.Timers.HeartbeatTimeout = time.Second, time.Second }, "heartbeat_timeout must be longer"},
		{"stall under progress", func(c *Config) { c.Timers.StallTimeout = 50 * ms }, "stall_timeout must be longer than progress_interval"},
		{"probe not under stall", func(c *Config) { c.Timers.ProbeTimeout = 2 * time.Second }, "probe_timeout must be shorter than stall_timeout"},
		{"lookup under heartbeat interval", func(c *Config) { c.Timers.LookupTimeout = 200 * ms }, "lookup_timeout must be longer than heartbeat_interval"},
		{"ejection cap under base", func(c *Config) { c.Timers.EjectionCap = 5 * time.Second }, "ejection_cap must not be shorter"},
		{"load timeout under stall", func(c *Config) { c.Timers.LoadTimeoutSymmetric = 500 * ms }, "longer than stall_timeout"},
		{"chunk_bytes 1", func(c *Config) { c.ChunkBytes = 1 }, "chunk_bytes 1: must be 4096..4194304"},
		{"chunk_bytes over 4 MiB", func(c *Config) { c.ChunkBytes = 4<<20 + 1 }, "chunk_bytes 4194305: must be"},
		{"abort ack 1ms", func(c *Config) { c.Timers.AbortAckTimeout = ms }, "timers.abort_ack_timeout 1ms"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := Config{PeerID: "127.0.0.1:7600"}
			tt.mut(&c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

// TestConfigRelationsUseThePreset: relations are checked on the merged
// timers, so a value fine under one preset can be refused under another,
// and a watchdog that is off relates to nothing.
func TestConfigRelationsUseThePreset(t *testing.T) {
	ok := []Config{
		{PeerID: "127.0.0.1:1"},
		{PeerID: "127.0.0.1:1", Policy: "per-peer"},
		{PeerID: "127.0.0.1:1", Policy: "host-group"},
		// vLLM presets: heartbeat interval 2 s, so 3 s is a valid timeout.
		{PeerID: "127.0.0.1:1", Policy: "per-peer", Timers: Timers{HeartbeatTimeout: 3 * time.Second}},
		// Watchdog off: the probe has nothing to be shorter than.
		{PeerID: "127.0.0.1:1", Timers: Timers{StallTimeout: -1, ProbeTimeout: 5 * time.Second}},
	}
	for _, c := range ok {
		if err := c.Validate(); err != nil {
			t.Errorf("%+v: %v", c.Timers, err)
		}
	}
	// 1 s is a valid timeout under domain (500 ms interval), not under
	// per-peer (2 s interval).
	bad := Config{PeerID: "127.0.0.1:1", Policy: "per-peer", Timers: Timers{HeartbeatTimeout: time.Second}}
	if err := bad.Validate(); err == nil {
		t.Error("heartbeat_timeout 1s under per-peer's 2s interval accepted")
	}
}

// TestArenaOverMachineMemory: an arena over the machine's memory is
// refused with ErrMachine (the command exits 3 for it), unless the engine
// owns the memory (a sidecar's node: ValidateWithSidecar).
func TestArenaOverMachineMemory(t *testing.T) {
	c := Config{PeerID: "127.0.0.1:1", Slots: 8192} // 2 GiB with the default block
	if err := c.checkSizes(1 << 30); !errors.Is(err, ErrMachine) {
		t.Fatalf("checkSizes over 1 GiB = %v, want ErrMachine", err)
	}
	if err := c.checkSizes(4 << 30); err != nil {
		t.Fatalf("checkSizes under 4 GiB = %v", err)
	}
	if err := c.checkSizes(0); err != nil {
		t.Fatalf("unknown memory: %v", err)
	}
	if err := c.validate(1 << 30); !errors.Is(err, ErrMachine) {
		t.Fatalf("validate over 1 GiB = %v, want ErrMachine", err)
	}
	// 512 GiB: over this machine's memory, unless it has more.
	big := Config{PeerID: "127.0.0.1:1", Slots: 1 << 21}
	if mem := physicalMemory(); mem > 0 && mem < 512<<30 {
		if err := big.Validate(); !errors.Is(err, ErrMachine) {
			t.Fatalf("Validate of a 512 GiB arena on %d MiB = %v, want ErrMachine", mem>>20, err)
		}
	}
	if err := ValidateWithSidecar(big); err != nil {
		t.Fatalf("engine-owned memory checked against the machine: %v", err)
	}
}
