package node

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/kvp2p/kvp2p/internal/health"
	"github.com/kvp2p/kvp2p/internal/identity"
	"github.com/kvp2p/kvp2p/internal/loads"
)

// Config configures a Node. The zero value of every field means its
// default; Validate reports the first bad field by name.
type Config struct {
	// PeerID is the node's advertised, routable host:port (vLLM's
	// host:base_port+dp_rank). Required.
	PeerID string `yaml:"peer_id"`
	// FailureDomain names what fails with this node (a pod UID, a node
	// name); empty means the node is its own domain.
	FailureDomain string `yaml:"failure_domain"`
	// Policy is the failure policy: domain (kvp2p's, the default), per-peer
	// (vLLM main) or host-group (vLLM PR #64678).
	Policy string `yaml:"policy"`

	BlockBytes  int    `yaml:"block_bytes"` // bytes per block; default 262144
	Slots       int    `yaml:"slots"`       // arena size in blocks; default 1024
	ChunkBytes  int    `yaml:"chunk_bytes"` // data-path chunk; default 262144
	Fingerprint string `yaml:"fingerprint"` // layout fingerprint; empty is compatible with anything
	HashSeed    string `yaml:"hash_seed"`   // must match the peers'
	Incarnation uint64 `yaml:"incarnation"` // default: picked at start

	// Timers; zero means the policy preset's value (docs/design.md §5).
	Timers Timers `yaml:"timers"`

	// Find shares summaries of what the node can serve with its peers
	// and finds sources no request names (find.go).
	Find FindConfig `yaml:"find"`

	// TLS turns on mutual TLS for every connection (internal/identity).
	TLS TLSConfig `yaml:"tls"`
	// TrustClaimedHost accepts, on plain TCP, a Hello or DataAttach whose
	// peer id names a host other than the connection's source address
	// (NAT, or the demo's labelled hosts on 127.0.0.1). Off by default:
	// without TLS the source address is the only proof of who speaks, and
	// it proves the host, not the rank: off, a process on a peer's host
	// can still pose as that peer while it has no live session here; on,
	// any process that reaches the port can. The node logs which at start
	// (docs/security.md, "Trust model"). Ignored under TLS, where the
	// certificate must name the rank.
	TrustClaimedHost bool `yaml:"trust_claimed_host"`
	// Limits bound what peers can make the node hold.
	Limits Limits `yaml:"limits"`

	// Dial maps a peer id to the address to dial; default: the peer id.
	// The demo uses it to run "hosts" on 127.0.0.1.
	Dial func(peerID string) string `yaml:"-"`
	// WrapAccepted, if set, wraps every accepted connection after its TLS
	// handshake, before its first frame: the demo's frame-level fault
	// injection sees plaintext frames even on a TLS fleet.
	WrapAccepted func(net.Conn) net.Conn `yaml:"-"`
	// Log receives structured logs; default: discard.
	Log *slog.Logger `yaml:"-"`
}

// Timers are the node's timers; zero means the preset's value.
type Timers struct {
	HeartbeatInterval    time.Duration `yaml:"heartbeat_interval"`
	HeartbeatTimeout     time.Duration `yaml:"heartbeat_timeout"`
	ProgressInterval     time.Duration `yaml:"progress_interval"`
	StallTimeout         time.Duration `yaml:"stall_timeout"`     // negative: watchdog off
	LoadStartBudget      time.Duration `yaml:"load_start_budget"` // negative: off
	LoadTimeoutSymmetric time.Duration `yaml:"load_timeout_symmetric"`
	LoadTimeoutPD        time.Duration `yaml:"load_timeout_pd"`
	AbortAckTimeout      time.Duration `yaml:"abort_ack_timeout"`
	HandshakeTimeout     time.Duration `yaml:"handshake_timeout"`
	LookupTimeout        time.Duration `yaml:"lookup_timeout"` // negative: none
	IdleTimeout          time.Duration `yaml:"idle_timeout"`
	UnboundStoreTimeout  time.Duration `yaml:"unbound_store_timeout"`
	HostQuarantine       time.Duration `yaml:"host_quarantine"`
	ShutdownDrain        time.Duration `yaml:"shutdown_drain"`
	ProbeTimeout         time.Duration `yaml:"probe_timeout"`
	ConnectWait          time.Duration `yaml:"connect_wait"`
	EjectionBase         time.Duration `yaml:"ejection_base"`
	EjectionCap          time.Duration `yaml:"ejection_cap"`
	MaxEjectionPercent   int           `yaml:"max_ejection_percent"`
	MaxPeers             int           `yaml:"max_peers"`
}

// Limits bound what connections can make the node hold; zero means the
// default.
type Limits struct {
	// MaxHandshakes caps accepted connections that are not a session yet
	// (TLS handshake, first frame, a Hello waiting for its data
	// connection); default 128. At it (or at the per-source cap, half of
	// it per /24 or /64, or three quarters of it for sources with no
	// recent handshake) a new connection evicts the oldest one (gate.go).
	MaxHandshakes int `yaml:"max_handshakes"`
	// MaxHandshakesPerSource is the same cap per source address; default 32.
	MaxHandshakesPerSource int `yaml:"max_handshakes_per_source"`
	// MaxFrameMemory bounds, across all sessions, the memory held for
	// control frames larger than a reader's 64 KiB streaming buffer
	// (frames.go); default 16 MiB. A frame over what is left ends its
	// session.
	MaxFrameMemory int64 `yaml:"max_frame_memory"`
}

// Defaults for the non-timer fields.
const (
	DefaultPolicy     = health.Domain
	DefaultBlockBytes = 256 << 10
	DefaultSlots      = 1024
	DefaultChunkBytes = 256 << 10
	// MinChunkBytes is the smallest chunk_bytes a node takes.
	MinChunkBytes = 4 << 10

	DefaultMaxHandshakes          = 128
	DefaultMaxHandshakesPerSource = 32
	DefaultMaxFrameMemory         = 16 << 20
)

// Validate checks the config and names the first bad field.
func (c *Config) Validate() error { return c.validate(physicalMemory()) }

// ValidateWithSidecar is Validate for a node built by NewWithSidecar: its
// slots are the engine's region, the engine's memory (checked when it
// attaches), so the arena is not held against this machine's.
func ValidateWithSidecar(c Config) error { return c.validate(0) }

// validate is Validate against physMem bytes of memory (0: not checked).
func (c *Config) validate(physMem uint64) error {
	if err := c.TLS.validate(); err != nil {
		return err
	}
	if c.Limits.MaxFrameMemory < 0 {
		return fmt.Errorf("kvp2p: config: limits: max_frame_memory %d: must not be negative", c.Limits.MaxFrameMemory)
	}
	if c.Limits.MaxHandshakes < 0 || c.Limits.MaxHandshakesPerSource < 0 {
		return fmt.Errorf("kvp2p: config: limits: max_handshakes %d, max_handshakes_per_source %d: must not be negative",
			c.Limits.MaxHandshakes, c.Limits.MaxHandshakesPerSource)
	}
	if c.PeerID == "" {
		return errors.New("kvp2p: config: peer_id is required (host:port)")
	}
	if h, p, err := net.SplitHostPort(c.PeerID); err != nil {
		return fmt.Errorf("kvp2p: config: peer_id %q: %v", c.PeerID, err)
	} else if n, err := strconv.Atoi(p); err != nil || n <= 0 || n > 65535 {
		return fmt.Errorf("kvp2p: config: peer_id %q: port must be 1-65535", c.PeerID)
	} else if h == "" {
		// Peers dial the peer id, so it needs a host.
		return fmt.Errorf("kvp2p: config: peer_id %q: host is required", c.PeerID)
	}
	if c.Policy != "" {
		if _, err := health.New(c.Policy, health.Options{}); err != nil {
			return fmt.Errorf("kvp2p: config: policy: %v", err)
		}
	}
	switch {
	case c.BlockBytes < 0 || c.BlockBytes > 256<<20:
		return fmt.Errorf("kvp2p: config: block_bytes %d: must be 1..%d", c.BlockBytes, 256<<20)
	case c.Slots < 0:
		return fmt.Errorf("kvp2p: config: slots %d: must be positive", c.Slots)
	case c.ChunkBytes != 0 && (c.ChunkBytes < MinChunkBytes || c.ChunkBytes > 4<<20):
		// A frame per few bytes is no configuration anyone means: a 1-byte
		// chunk_bytes once made every load of a test harness crawl.
		return fmt.Errorf("kvp2p: config: chunk_bytes %d: must be %d..%d (blocks smaller than chunk_bytes go in one frame)", c.ChunkBytes, MinChunkBytes, 4<<20)
	case c.Timers.MaxPeers < 0:
		return fmt.Errorf("kvp2p: config: timers.max_peers %d: must be positive", c.Timers.MaxPeers)
	case c.Timers.MaxEjectionPercent < 0 || c.Timers.MaxEjectionPercent > 100:
		return fmt.Errorf("kvp2p: config: timers.max_ejection_percent %d: must be 0..100", c.Timers.MaxEjectionPercent)
	}
	if err := c.Find.validate(); err != nil {
		return err
	}
	if err := c.checkSizes(physMem); err != nil {
		return err
	}
	var preset loads.Timers
	for _, d := range c.Timers.durations(&preset) {
		if *d.src < 0 && !d.negOff {
			return fmt.Errorf("kvp2p: config: timers.%s %v: must not be negative", d.name, *d.src)
		}
	}
	return c.checkTimers()
}

// maxArena bounds slots x block_bytes so that a typo is a config error,
// not an out-of-memory crash.
const maxArena = 1 << 40

// withDefaults returns the config with every zero field filled.
func (c Config) withDefaults() Config {
	if c.Policy == "" {
		c.Policy = DefaultPolicy
	}
	if c.BlockBytes == 0 {
		c.BlockBytes = DefaultBlockBytes
	}
	if c.Slots == 0 {
		c.Slots = DefaultSlots
	}
	if c.ChunkBytes == 0 {
		c.ChunkBytes = DefaultChunkBytes
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.Limits.MaxHandshakes == 0 {
		c.Limits.MaxHandshakes = DefaultMaxHandshakes
	}
	if c.Limits.MaxHandshakesPerSource == 0 {
		c.Limits.MaxHandshakesPerSource = DefaultMaxHandshakesPerSource
	}
	if c.Limits.MaxFrameMemory == 0 {
		c.Limits.MaxFrameMemory = DefaultMaxFrameMemory
	}
	if c.Dial == nil {
		c.Dial = func(id string) string { return id }
	}
	return c
}

// timerField ties one configured timer to the preset's field it overrides.
type timerField struct {
	name   string
	src    *time.Duration // configured; zero: keep the preset
	dst    *time.Duration // in the preset
	negOff bool           // a negative value means "off" (0 in the preset)
}

// durations lists every duration timer once, for validation and merging.
func (o *Timers) durations(t *loads.Timers) []timerField {
	return []timerField{
		{"heartbeat_interval", &o.HeartbeatInterval, &t.HeartbeatInterval, false},
		{"heartbeat_timeout", &o.HeartbeatTimeout, &t.HeartbeatTimeout, false},
		{"progress_interval", &o.ProgressInterval, &t.ProgressInterval, false},
		{"stall_timeout", &o.StallTimeout, &t.StallTimeout, true},
		{"load_start_budget", &o.LoadStartBudget, &t.LoadStartBudget, true},
		{"load_timeout_symmetric", &o.LoadTimeoutSymmetric, &t.LoadTimeoutSymmetric, false},
		{"load_timeout_pd", &o.LoadTimeoutPD, &t.LoadTimeoutPD, false},
		{"abort_ack_timeout", &o.AbortAckTimeout, &t.AbortAckTimeout, false},
		{"handshake_timeout", &o.HandshakeTimeout, &t.HandshakeTimeout, false},
		{"lookup_timeout", &o.LookupTimeout, &t.LookupTimeout, true},
		{"idle_timeout", &o.IdleTimeout, &t.IdleTimeout, false},
		{"unbound_store_timeout", &o.UnboundStoreTimeout, &t.UnboundStoreTimeout, false},
		{"host_quarantine", &o.HostQuarantine, &t.HostQuarantine, false},
		{"shutdown_drain", &o.ShutdownDrain, &t.ShutdownDrain, false},
		{"probe_timeout", &o.ProbeTimeout, &t.ProbeTimeout, false},
		{"connect_wait", &o.ConnectWait, &t.ConnectWait, false},
		{"ejection_base", &o.EjectionBase, &t.EjectionBase, false},
		{"ejection_cap", &o.EjectionCap, &t.EjectionCap, false},
	}
}

// timers merges the configured timers over the policy's preset.
func (c Config) timers() loads.Timers {
	t := loads.PresetTimers(c.Policy)
	o := c.Timers
	for _, f := range o.durations(&t) {
		switch {
		case *f.src < 0 && f.negOff:
			*f.dst = 0
		case *f.src != 0:
			*f.dst = *f.src
		}
	}
	if o.MaxEjectionPercent != 0 {
		t.MaxEjectionPercent = o.MaxEjectionPercent
	}
	if o.MaxPeers != 0 {
		t.MaxPeers = o.MaxPeers
	}
	return t
}

// TLSConfig turns on mutual TLS (TLS 1.3) on every control and data
// connection. Either all three files are set or none; without them the
// node speaks plain TCP (and checks claimed hosts against source
// addresses instead, see Config.TrustClaimedHost). A peer's certificate
// must name the whole peer id it claims, as a URI SAN (RankURI) or a
// SPIFFE id ending in /kvp2p/host/port; internal/identity documents the
// trust model and what TLS costs (docs/security.md for operators).
type TLSConfig struct {
	CertFile string `yaml:"cert_file"` // PEM certificate chain of this node
	KeyFile  string `yaml:"key_file"`  // PEM private key of CertFile
	CAFile   string `yaml:"ca_file"`   // PEM CA bundle peers' certificates must chain to
	// AllowPeers, if not empty, admits only certificates with a SAN (DNS
	// name, IP or URI, e.g. a SPIFFE id) matching one of these
	// comma-separated patterns (path.Match syntax:
	// "*.pod.cluster.local,spiffe://prod/kvp2p/*").
	AllowPeers string `yaml:"allow_peers"`
}

// Enabled reports whether TLS is configured.
func (c TLSConfig) Enabled() bool { return identity.Config(c).Enabled() }

func (c TLSConfig) validate() error { return identity.Config(c).Validate() }

// RankURI is the URI SAN that names a rank in its certificate:
// kvp2p://host:port, the whole peer id.
func RankURI(peerID string) string { return identity.RankURI(peerID) }
