package metrics

import (
	"context"
	"time"
)

// Source returns a node's snapshot; it fails when the node has stopped or
// ctx ends first.
type Source func(ctx context.Context) (*Snapshot, error)

// ScrapeTimeout bounds how long a scrape waits for the node's loop.
const ScrapeTimeout = 2 * time.Second
