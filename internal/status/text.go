package status

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/kvp2p/kvp2p/internal/metrics"
)

// WriteText renders s for a terminal: the node, its domains with their
// peers and sessions, loads in flight, and the counts that explain
// fallbacks.
func WriteText(w io.Writer, s *metrics.Snapshot) error {
	ready := "ready"
	if !s.Node.Ready() {
		ready = "NOT READY"
	}
	dom := s.Node.FailureDomain
	if dom == "" {
		dom = "(own)"
	}
	fmt.Fprintf(w, "node %s  domain %s  policy %s  up %s  %s\n", s.Node.PeerID, dom, s.Node.Policy, Dur(s.Node.UptimeSec), ready)
	if s.Node.Exposure != "" {
		fmt.Fprintf(w, "IDENTITY (%s): %s\n", s.Node.Identity, s.Node.Exposure)
	} else if s.Node.Identity != "" {
		fmt.Fprintf(w, "identity %s\n", s.Node.Identity)
	}
	c := s.Counters
	fmt.Fprintf(w, "fallbacks at lookup %d  loads ok %d  failed %d (timeouts %d)  stores ok %d  failed %d (unbound %d)  lookups hit %d miss %d\n",
		c.LookupFallbacks, c.LoadsOK, c.LoadFailures, c.LoadTimeouts, c.StoresOK, c.StoreFailures, c.UnboundStoreTimeouts, c.LookupHits, c.LookupMisses)
	fmt.Fprintf(w, "probes sent %d failed %d  ejections %d  stalls %d  peer disconnects %d  bytes in %s out %s\n",
		c.ProbesSent, c.ProbesFailed, c.Ejections, c.StallsDetected, c.PeerDisconnects, Bytes(c.BytesIn), Bytes(c.BytesOut))
	fmt.Fprintf(w, "peers slow %d  deliberate fallbacks %d (too slow %d, over start budget %d)\n",
		s.SlowPeers(), c.LoadsTooSlow+c.LoadsOverBudget, c.LoadsTooSlow, c.LoadsOverBudget)
	if ttf := s.Hists.Fallbacks(); ttf.Count > 0 {
		fmt.Fprintf(w, "time to fallback: %d, p50 %s, p99 %s\n", ttf.Count, Dur(ttf.Quantile(0.5)), Dur(ttf.Quantile(0.99)))
	}
	var ends []string
	for _, cause := range metrics.CauseNames() {
		if n := c.SessionEnds[cause]; n > 0 {
			ends = append(ends, fmt.Sprintf("%s %d", cause, n))
		}
	}
	if len(ends) > 0 {
		fmt.Fprintf(w, "session ends: %s\n", strings.Join(ends, ", "))
	}

	fmt.Fprintf(w, "\nDOMAINS (%d)\n", len(s.Domains))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "DOMAIN\tSTATE\tPEER\tSESSION\tSTATE\tAGE\tIN\tOUT\tLAST PROGRESS")
	for _, d := range s.Domains {
		fmt.Fprintf(tw, "%s\t%s\t\t\t\t\t\t\t\n", d.Name, strings.ToUpper(d.State))
		for _, p := range d.Peers {
			var notes []string
			if p.EjectedForSec > 0 {
				notes = append(notes, "ejected "+Dur(p.EjectedForSec)+" left")
			}
			if p.Probing {
				notes = append(notes, "probing")
			}
			if p.Delivering {
				notes = append(notes, "delivering (slow, not dead)")
			}
			if p.Slow {
				notes = append(notes, "slow (too slow for a load's deadline)")
			}
			if p.Faults > 0 {
				notes = append(notes, fmt.Sprintf("%d faults", p.Faults))
			}
			if len(p.Sessions) == 0 {
				notes = append(notes, "no session")
			}
			fmt.Fprintf(tw, "\t\t%s\t%s\t\t\t\t\t\n", p.ID, strings.Join(notes, ", "))
			for _, x := range p.Sessions {
				dir := "in"
				if x.Outbound {
					dir = "out"
				}
				state := x.State
				if x.Cause != "" {
					state += " (" + x.Cause + ")"
				}
				if x.Slow {
					state += ", slow"
				}
				fmt.Fprintf(tw, "\t\t\t#%d %s\t%s\t%s\t%s\t%s\t%s\n", x.Conn, dir, state, Dur(x.AgeSec),
					Bytes(x.BytesIn), Bytes(x.BytesOut), Dur(x.LastProgressSec))
			}
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	fmt.Fprintf(w, "\nLOADS IN FLIGHT (%d)\n", len(s.Loads))
	if len(s.Loads) > 0 {
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "JOB\tREQUEST\tPEER\tDOMAIN\tAGE\tBLOCKS\tRECEIVED")
		for _, l := range s.Loads {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d\t%s\n", l.Job, l.ReqID, l.Peer, l.Domain, Dur(l.AgeSec), l.Blocks, Bytes(l.Bytes))
		}
		return tw.Flush()
	}
	return nil
}
