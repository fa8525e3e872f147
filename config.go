package kvp2p

import "github.com/kvp2p/kvp2p/internal/node"

// Config configures a Node: its peer id and failure domain, the failure
// policy, the store's geometry, timers, TLS and limits. The zero value of
// every field means its default; Validate reports the first bad field by
// name. The fields carry the yaml names of a kvp2p.yaml's node settings;
// its listen, engine and metrics_addr are `kvp2p serve`'s own: Node.Serve
// takes the caller's listener, and the engine API and the metrics endpoint
// are not this package's. It is the
// node's own config type, so nothing is copied or converted on the way in;
// `go doc github.com/kvp2p/kvp2p/internal/node.Config` documents each field.
type Config = node.Config

type (
	// Timers are the node's timers; zero means the failure policy's
	// preset (docs/design.md §5).
	Timers = node.Timers
	// Limits bound what connections can make the node hold; zero means
	// the default.
	Limits = node.Limits
	// TLSConfig turns on mutual TLS (TLS 1.3) on every control and data
	// connection: all three files or none (docs/security.md).
	TLSConfig = node.TLSConfig
	// FindConfig turns on finding sources no request names: summaries of
	// what each node can serve, shared with its peers (docs/find.md).
	FindConfig = node.FindConfig
)

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

// RankURI is the URI SAN that names a rank in its certificate:
// kvp2p://host:port, the whole peer id.
func RankURI(peerID string) string { return node.RankURI(peerID) }
