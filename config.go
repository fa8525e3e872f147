package kvp2p

import (
	"log/slog"
	"net"
	"time"

	"github.com/kvp2p/kvp2p/internal/identity"
	"github.com/kvp2p/kvp2p/internal/node"
)

// Config configures a Node. The zero value of every field means its
// default; Validate reports the first bad field by name.
type Config struct {
	// PeerID is the node's advertised, routable host:port (vLLM's
	// host:base_port+dp_rank). Required.
	PeerID string `yaml:"peer_id"`
	// Listen is the address to bind; default PeerID.
	Listen string `yaml:"listen"`
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

	// Engine configures the engine sidecar (the gRPC engine API, with the
	// engine's shared-memory region as the node's slots). The kvp2p
	// command wires it (kvp2p serve); NewNode refuses it, so that a
	// program that embeds the library links no gRPC. The field is here so
	// that a kvp2p.yaml loads into this type unchanged.
	Engine EngineConfig `yaml:"engine"`

	// MetricsAddr is where `kvp2p serve` serves /metrics, /status.json,
	// the status page (/), /healthz and /readyz, e.g. 127.0.0.1:9464.
	// Empty: off. The library itself opens no listener for it (see
	// Node.Status).
	MetricsAddr string `yaml:"metrics_addr"`
	// TLS turns on mutual TLS for every connection (TLSConfig).
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
	// recent handshake) a new connection evicts the oldest one (internal/node).
	MaxHandshakes int `yaml:"max_handshakes"`
	// MaxHandshakesPerSource is the same cap per source address; default 32.
	MaxHandshakesPerSource int `yaml:"max_handshakes_per_source"`
	// MaxFrameMemory bounds, across all sessions, the memory held for
	// control frames larger than a reader's 64 KiB streaming buffer
	// (internal/node); default 16 MiB. A frame over what is left ends its
	// session.
	MaxFrameMemory int64 `yaml:"max_frame_memory"`
}

// EngineConfig turns a node into an engine's sidecar: the engine API is
// served and the node's slots are the chunks of the engine's region (the
// engine owns the memory; Slots and BlockBytes must equal the region's
// num_chunks and row_stride). Zero value: off (the node keeps its own arena).
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
	ServeTimeout time.Duration `yaml:"serve_timeout"`
	// StepTimeout bounds how long an engine with requests in flight may
	// leave the sidecar's probe (an ask with no keys, answered at its next
	// scheduler step) unanswered while peers' PD fetches wait on it: past
	// it the engine's steps are taken for stopped (a hung worker, its
	// process frozen) and those fetches fail, so their decoders fall back
	// instead of waiting for their PD load timeout; default 1 s.
	StepTimeout time.Duration `yaml:"step_timeout"`
	// MaxJobs bounds the engine's loads and stores in flight; default 4096.
	MaxJobs int `yaml:"max_jobs"`
}

// Enabled reports whether the engine sidecar is configured.
func (e EngineConfig) Enabled() bool { return node.EngineConfig(e).Enabled() }

// Defaults for the non-timer fields.
const (
	DefaultPolicy     = node.DefaultPolicy
	DefaultBlockBytes = node.DefaultBlockBytes
	DefaultSlots      = node.DefaultSlots
	DefaultChunkBytes = node.DefaultChunkBytes
	MinChunkBytes     = node.MinChunkBytes // the smallest chunk_bytes a node takes

	DefaultMaxHandshakes          = node.DefaultMaxHandshakes
	DefaultMaxHandshakesPerSource = node.DefaultMaxHandshakesPerSource
	DefaultMaxFrameMemory         = node.DefaultMaxFrameMemory
)

// ErrMachine is wrapped by a config error that names more than the
// machine has (an arena over its physical memory): no retry with the same
// config can succeed.
var ErrMachine = node.ErrMachine

// Validate checks the config and names the first bad field.
func (c *Config) Validate() error {
	nc := c.node()
	return nc.Validate()
}

// node converts the config to the node's own type, field by field; the
// nested types convert directly (TestConfigMirrorsNode keeps the two
// shapes equal).
func (c Config) node() node.Config {
	return node.Config{
		PeerID: c.PeerID, Listen: c.Listen, FailureDomain: c.FailureDomain, Policy: c.Policy,
		BlockBytes: c.BlockBytes, Slots: c.Slots, ChunkBytes: c.ChunkBytes,
		Fingerprint: c.Fingerprint, HashSeed: c.HashSeed, Incarnation: c.Incarnation,
		Timers: node.Timers(c.Timers), Engine: node.EngineConfig(c.Engine),
		MetricsAddr: c.MetricsAddr, TLS: node.TLSConfig(c.TLS), TrustClaimedHost: c.TrustClaimedHost,
		Limits: node.Limits(c.Limits), Dial: c.Dial, WrapAccepted: c.WrapAccepted, Log: c.Log,
	}
}

// TLSConfig turns on mutual TLS (TLS 1.3) on every control and data
// connection. Either all three files are set or none; without them the
// node speaks plain TCP (and checks claimed hosts against source
// addresses instead, see Config.TrustClaimedHost). A peer's certificate
// must name the whole peer id it claims, as a URI SAN (RankURI) or a
// SPIFFE id ending in /kvp2p/host/port; docs/security.md has the trust
// model, internal/identity what TLS costs.
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

// RankURI is the URI SAN that names a rank in its certificate:
// kvp2p://host:port, the whole peer id.
func RankURI(peerID string) string { return identity.RankURI(peerID) }
