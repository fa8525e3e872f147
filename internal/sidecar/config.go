package sidecar

import (
	"fmt"
	"path/filepath"
	"time"
)

// EngineConfig turns a node into an engine's sidecar: the engine API is
// served and the node's slots are the chunks of the engine's region (the
// engine owns the memory; the node config's Slots and BlockBytes must equal
// the region's num_chunks and row_stride). Zero value: off (the node keeps
// its own arena). It is the engine section of `kvp2p serve`'s config
// (internal/config), not part of node.Config: a program that embeds the
// library has no engine API.
type EngineConfig struct {
	// Socket is the engine API's Unix socket path (created mode 0600; a
	// stale socket is removed at start).
	Socket string `yaml:"socket"`
	// Addr optionally also serves the engine API on TCP (host:port). It is
	// unauthenticated: bind it to loopback or a private interface.
	Addr string `yaml:"addr"`
	// RegionDir is where region files must live; default /dev/shm.
	RegionDir string `yaml:"region_dir"`
	// ServeTimeout bounds how long a peer's lookup waits for the engine to
	// pin the keys it asked for (one scheduler step or a few); default 500 ms.
	// An engine starved of CPU (its processes runnable, none stopped, a
	// request in flight) is given up to three more, and the peer is told
	// its lookup is still pending at each (asks.go).
	ServeTimeout time.Duration `yaml:"serve_timeout"`
	// StepTimeout bounds how long an engine with requests in flight may
	// leave the sidecar's probe (an ask with no keys, answered at its next
	// scheduler step) unanswered while peers' PD fetches wait on it: past
	// it the engine's steps are taken for stopped (a hung worker, its
	// process frozen) and those fetches fail, so their decoders fall back
	// instead of waiting for their PD load timeout; default 1 s. An engine
	// whose processes wait for a CPU (starved, none stopped) is given up to
	// three more before it is taken for stopped (stall.go).
	StepTimeout time.Duration `yaml:"step_timeout"`
	// MaxJobs bounds the engine's loads and stores in flight; default 4096.
	MaxJobs int `yaml:"max_jobs"`
}

// Enabled reports whether the node is a sidecar.
func (e EngineConfig) Enabled() bool { return e.Socket != "" || e.Addr != "" }

// WithDefaults returns the config with every zero field filled.
func (e EngineConfig) WithDefaults() EngineConfig {
	if e.RegionDir == "" {
		e.RegionDir = "/dev/shm"
	}
	if e.ServeTimeout == 0 {
		e.ServeTimeout = 500 * time.Millisecond
	}
	if e.StepTimeout == 0 {
		e.StepTimeout = time.Second
	}
	if e.MaxJobs == 0 {
		e.MaxJobs = 4096
	}
	return e
}

// Validate checks the engine settings (none when off) and names the first
// bad field.
func (e EngineConfig) Validate() error {
	if !e.Enabled() {
		return nil
	}
	if e.Socket != "" && !filepath.IsAbs(e.Socket) {
		return fmt.Errorf("kvp2p: config: engine.socket %q: must be an absolute path", e.Socket)
	}
	if e.RegionDir != "" && !filepath.IsAbs(e.RegionDir) {
		return fmt.Errorf("kvp2p: config: engine.region_dir %q: must be an absolute path", e.RegionDir)
	}
	if e.ServeTimeout < 0 || e.ServeTimeout > time.Minute {
		return fmt.Errorf("kvp2p: config: engine.serve_timeout %v: must be 0..1m", e.ServeTimeout)
	}
	if e.StepTimeout < 0 || e.StepTimeout > time.Minute {
		return fmt.Errorf("kvp2p: config: engine.step_timeout %v: must be 0..1m", e.StepTimeout)
	}
	if e.MaxJobs < 0 || e.MaxJobs > 1<<20 {
		return fmt.Errorf("kvp2p: config: engine.max_jobs %d: must be 0..%d", e.MaxJobs, 1<<20)
	}
	return nil
}
