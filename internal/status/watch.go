package status

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

// WatchOptions are `kvp2p status`'s output flags.
type WatchOptions struct {
	JSON  bool          // the snapshot as JSON (one object a line with Watch)
	Watch bool          // refresh until ctx ends
	Every time.Duration // the refresh interval with Watch
}

// Watch is `kvp2p status`: it fetches the snapshot of the node whose
// metrics address is target and prints it, once or, with Watch, every
// Every until ctx ends (a failed fetch is reported to stderr and retried:
// a node restarting).
func Watch(ctx context.Context, client *http.Client, target string, o WatchOptions, stdout, stderr io.Writer) error {
	once := func() error {
		s, err := Fetch(ctx, client, target)
		if err != nil {
			return err
		}
		if o.JSON {
			enc := json.NewEncoder(stdout)
			if !o.Watch {
				enc.SetIndent("", "  ")
			}
			return enc.Encode(s) // with --watch: one object per line
		}
		if o.Watch {
			fmt.Fprint(stdout, "\033[H\033[2J") // clear the terminal
		}
		return WriteText(stdout, s)
	}
	if !o.Watch {
		return once()
	}
	tick := time.NewTicker(o.Every)
	defer tick.Stop()
	for {
		if err := once(); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			fmt.Fprintf(stderr, "kvp2p status: %v\n", err) // a node restarting: keep asking
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}
