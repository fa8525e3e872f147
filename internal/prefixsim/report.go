package prefixsim

import (
	"fmt"
	"io"
)

// Print writes r as the table docs/evaluation.md shows.
func (r Result) Print(w io.Writer) {
	c := r.Config
	pct := func(a, b int64) float64 {
		if b == 0 {
			return 0
		}
		return 100 * float64(a) / float64(b)
	}
	mib := func(n int) float64 { return float64(n) / (1 << 20) }
	fmt.Fprintf(w, "fleet      %d pods x %d ranks = %d ranks, round-robin; CPU tier %d blocks of %d tokens per rank\n",
		c.Pods, c.Ranks, c.Pods*c.Ranks, c.ChunksPerRank, c.BlockTokens)
	fmt.Fprintf(w, "workload   %d requests (%d measured after %.0f%% warm-up), %.1f req/s per pod; %d documents of %d-%d tokens, Zipf %.2f; %.0f%% follow-ups, up to %d turns\n",
		c.Requests, r.Requests, 100*c.WarmupFraction, c.RatePerPod, c.Docs, c.DocTokensMin, c.DocTokensMax, c.ZipfS, 100*c.FollowUp, c.MaxTurns)
	fmt.Fprintf(w, "summaries  flushed every %v, used up to %v old\n", c.Interval, c.MaxAge)
	fmt.Fprintf(w, "\n")
	fmt.Fprintf(w, "prompt tokens                    %14d\n", r.PromptTokens)
	fmt.Fprintf(w, "  held by the request's own pod  %14d  %5.1f%%\n", r.LocalTokens, pct(r.LocalTokens, r.PromptTokens))
	fmt.Fprintf(w, "  loadable from a peer (oracle)  %14d  %5.1f%%\n", r.OracleTokens, pct(r.OracleTokens, r.PromptTokens))
	fmt.Fprintf(w, "  loaded from the peer Find named%14d  %5.1f%%\n", r.FoundTokens, pct(r.FoundTokens, r.PromptTokens))
	fmt.Fprintf(w, "found / oracle                   %13.1f%%\n", 100*r.Ratio())
	fmt.Fprintf(w, "asks                             %14d  (%d found nothing, %d fewer blocks than the summary said)\n", r.Asks, r.Empty, r.Short)
	fmt.Fprintf(w, "summary traffic per rank         out %.2f MB/s, in %.2f MB/s (peak %.2f MB/s): %.3f%% of a %.0f Gb/s NIC\n",
		r.OutBps/1e6, r.InBps/1e6, r.PeakInBps/1e6, 100*r.NICShare(), c.NICBitsPerSecond/1e9)
	fmt.Fprintf(w, "a snapshot (one new peer)        %.1f KiB\n", float64(r.SnapshotBytes)/1024)
	fmt.Fprintf(w, "memory per rank                  %.1f MiB of peers' summaries + %.1f MiB own producer\n", mib(r.IndexBytes), mib(r.ProducerBytes))
}
