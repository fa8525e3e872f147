package loads

import (
	"log/slog"
	"time"

	"github.com/kvp2p/kvp2p/internal/health"
	"github.com/kvp2p/kvp2p/internal/session"
)

// Config is the table's configuration; the session part is shared by every
// session. Validation and defaults live in the root package's Config.
type Config struct {
	Session             session.Config
	Policy              health.Policy
	MaxPeers            int
	IdleTimeout         time.Duration
	UnboundStoreTimeout time.Duration
	ReapedRetention     time.Duration // how long a reaped unbound id is remembered (late fetches)
	ShutdownDrain       time.Duration
	Log                 *slog.Logger
}
