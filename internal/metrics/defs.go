package metrics

import (
	"fmt"
	"strings"

	"github.com/kvp2p/kvp2p/internal/health"
)

// Def is one metric: its documentation and how a Snapshot yields it. The
// docs table and the collector both come from Defs, so they cannot drift.
type Def struct {
	Name   string
	Type   string // counter, gauge or histogram
	Labels []string
	VLLM   string // vLLM's P2P tier metric it maps to (vllm:kv_offload_p2p_...); "" if kvp2p's own
	Help   string
	emit   func(s *Snapshot, m *emitter)
}

// CauseNames are the values of the cause label: every health.Cause that
// ends a session.
func CauseNames() []string {
	var out []string
	for c := health.CauseGoodbye; c.String() != "unknown"; c++ {
		out = append(out, c.String())
	}
	return out
}

// Defs lists every metric a node exports.
func Defs() []Def {
	counter := func(name, vllm, help string, v func(c *Counters) uint64) Def {
		return Def{Name: name, Type: "counter", VLLM: vllm, Help: help,
			emit: func(s *Snapshot, m *emitter) { m.value(float64(v(&s.Counters))) }}
	}
	hist := func(name, vllm, help string, h func(h *Histograms) Hist) Def {
		return Def{Name: name, Type: "histogram", VLLM: vllm, Help: help,
			emit: func(s *Snapshot, m *emitter) { m.hist(h(&s.Hists)) }}
	}
	return []Def{
		counter("kvp2p_lookup_hits_total", "lookup_hits", "Keys a peer answered a Lookup with as held.",
			func(c *Counters) uint64 { return c.LookupHits }),
		counter("kvp2p_lookup_misses_total", "lookup_misses", "Keys a peer answered a Lookup with as not held.",
			func(c *Counters) uint64 { return c.LookupMisses }),
		{Name: "kvp2p_lookup_pending_total", Type: "counter", Labels: []string{"direction"},
			Help: "\"Still pending\" answers to lookups: out (sent as a producer whose engine is starved of CPU, not stopped: the peer's lookup kept waiting) or in (received as a consumer: the lookup's deadline re-armed, within its cap).",
			emit: func(s *Snapshot, m *emitter) {
				m.value(float64(s.Counters.LookupPending.Received), "in")
				m.value(float64(s.Counters.LookupPending.Sent), "out")
			}},
		counter("kvp2p_lookup_pending_ignored_total", "", "\"Still pending\" answers received for no outstanding lookup (answered or abandoned meanwhile, or lookup_timeout off): they changed nothing.",
			func(c *Counters) uint64 { return c.LookupPending.Ignored }),
		hist("kvp2p_lookup_rtt_seconds", "lookup_rtt_seconds", "From a Lookup frame queued to its reply received.",
			func(h *Histograms) Hist { return h.LookupRTT }),
		hist("kvp2p_fetch_rtt_seconds", "fetch_rtt_seconds", "From a Fetch frame queued to the first bytes or Progress of its transfer.",
			func(h *Histograms) Hist { return h.FetchRTT }),
		hist("kvp2p_post_time_seconds", "post_time_seconds", "From a load's submission to its transfer posted on a session's data path.",
			func(h *Histograms) Hist { return h.PostTime }),
		hist("kvp2p_transfer_time_seconds", "transfer_time_seconds", "From a load's transfer posted to its last byte received (successful or not).",
			func(h *Histograms) Hist { return h.TransferTime }),
		hist("kvp2p_transfer_blocks", "num_descriptors", "Blocks per load transfer posted.",
			func(h *Histograms) Hist { return h.TransferBlocks }),
		{Name: "kvp2p_transfer_bytes_total", Type: "counter", Labels: []string{"direction"}, VLLM: "transfer_bytes",
			Help: "Block bytes moved on data paths: in (loads here) or out (served to peers).",
			emit: func(s *Snapshot, m *emitter) {
				m.value(float64(s.Counters.BytesIn), "in")
				m.value(float64(s.Counters.BytesOut), "out")
			}},
		counter("kvp2p_load_failures_total", "load_failures", "Loads that failed (the engine falls back to prefill), timeouts included.",
			func(c *Counters) uint64 { return c.LoadFailures }),
		counter("kvp2p_load_timeouts_total", "load_timeouts", "Loads failed by their load timeout.",
			func(c *Counters) uint64 { return c.LoadTimeouts }),
		counter("kvp2p_loads_over_budget_total", "", "Loads failed early because their source kept them queued behind others past load_start_budget (overload, not a fault: the engine prefills).",
			func(c *Counters) uint64 { return c.LoadsOverBudget }),
		counter("kvp2p_loads_too_slow_total", "", "Loads failed early because, at the rate their bytes arrived, they could not finish within their load timeout (slow, not dead: the session stays, the peer is not suspected; the engine prefills).",
			func(c *Counters) uint64 { return c.LoadsTooSlow }),
		counter("kvp2p_deliberate_fallbacks_total", "", "Loads the consumer failed on purpose, its source alive, because waiting could not beat prefilling (docs/liveness.md): kvp2p_loads_too_slow_total plus kvp2p_loads_over_budget_total.",
			func(c *Counters) uint64 { return c.LoadsTooSlow + c.LoadsOverBudget }),
		{Name: "kvp2p_peers_slow", Type: "gauge",
			Help: "Peers a session to which is slow: a load on it delivers, but at its observed rate would not finish within its load timeout with a 5/4 margin (held a few windows after the last such judgment). Alive, not faulty.",
			emit: func(s *Snapshot, m *emitter) { m.value(float64(s.SlowPeers())) }},
		counter("kvp2p_store_failures_total", "store_failures", "Stores (blocks offered to a remote decoder) that failed, unbound timeouts included.",
			func(c *Counters) uint64 { return c.StoreFailures }),
		counter("kvp2p_unbound_store_timeouts_total", "unbound_store_timeouts", "PD stores no fetch bound within unbound_store_timeout.",
			func(c *Counters) uint64 { return c.UnboundStoreTimeouts }),
		counter("kvp2p_peer_disconnects_total", "peer_disconnects", "Sessions that ended by a fault (conn-reset, heartbeat-timeout, progress-stall, protocol-error).",
			func(c *Counters) uint64 { return c.PeerDisconnects }),
		{Name: "kvp2p_active_sessions", Type: "gauge", VLLM: "active_sessions", Help: "Sessions ready (handshake done, not ended).",
			emit: func(s *Snapshot, m *emitter) { m.value(float64(s.SessionCount("ready"))) }},
		{Name: "kvp2p_inflight_transfers", Type: "gauge", Labels: []string{"kind"}, VLLM: "inflight_transfers",
			Help: "Jobs the node holds: loads in flight (kind=load) and stores waiting for or serving a fetch (kind=store).",
			emit: func(s *Snapshot, m *emitter) {
				m.value(float64(len(s.Loads)), "load")
				m.value(float64(s.Stores), "store")
			}},
		{Name: "kvp2p_session_ends_total", Type: "counter", Labels: []string{"cause"},
			Help: "Sessions ended, by cause (goodbye, handshake-failed, incompatible, conn-reset, heartbeat-timeout, progress-stall, protocol-error).",
			emit: func(s *Snapshot, m *emitter) {
				for _, c := range CauseNames() {
					m.value(float64(s.Counters.SessionEnds[c]), c)
				}
			}},
		{Name: "kvp2p_sessions", Type: "gauge", Labels: []string{"state"},
			Help: "Sessions by state (connecting, ready, ended: its data path not closed yet).",
			emit: func(s *Snapshot, m *emitter) {
				for _, st := range []string{"connecting", "ready", "ended"} {
					m.value(float64(s.SessionCount(st)), st)
				}
			}},
		{Name: "kvp2p_domains", Type: "gauge", Labels: []string{"state"},
			Help: "Known failure domains by state: ok, suspect (being probed after a fault), ejected (a member ejected, or the host quarantined under host-group).",
			emit: func(s *Snapshot, m *emitter) {
				n := map[string]int{}
				for _, d := range s.Domains {
					n[d.State]++
				}
				for _, st := range health.States() {
					m.value(float64(n[st]), st)
				}
			}},
		counter("kvp2p_probes_sent_total", "", "Probes sent over a data path (domain policy: a suspect domain's members, a rank after its fault).",
			func(c *Counters) uint64 { return c.ProbesSent }),
		counter("kvp2p_probes_failed_total", "", "Probes not answered within probe_timeout (their session is closed).",
			func(c *Counters) uint64 { return c.ProbesFailed }),
		counter("kvp2p_probes_renewed_total", "", "Probes not answered within probe_timeout whose data path delivered meanwhile: slow, not dead (renewed, the session kept).",
			func(c *Counters) uint64 { return c.ProbesRenewed }),
		counter("kvp2p_ejections_total", "", "Ejections begun (domain policy: a flapping rank) or host quarantines (host-group).",
			func(c *Counters) uint64 { return c.Ejections }),
		counter("kvp2p_session_replacements_total", "", "Live, ready sessions replaced by a newcomer claiming the same peer id: after the live one failed its probe or ended, or by our own dial to a restarted peer (each is also logged).",
			func(c *Counters) uint64 { return c.SessionReplacements }),
		counter("kvp2p_takeovers_refused_total", "", "Newcomers claiming a live session's peer id refused because the live session answered its probe (a simultaneous dial the peer lost, or someone else claiming the peer).",
			func(c *Counters) uint64 { return c.TakeoversRefused }),
		{Name: "kvp2p_connections_refused_total", Type: "counter", Labels: []string{"stage"},
			Help: "Accepted connections closed before they became a session, by stage: gate (over max_handshakes or max_handshakes_per_source, or evicted to make room), tls (TLS handshake failed), frame (first frame missing, oversized, malformed or not a Hello or DataAttach), identity (the claimed peer id is not what the certificate or source address proves). Garbage on the port is logged at debug only: this is how an operator sees it.",
			emit: func(s *Snapshot, m *emitter) {
				r := s.Counters.ConnsRefused
				m.value(float64(r.Gate), "gate")
				m.value(float64(r.TLS), "tls")
				m.value(float64(r.Frame), "frame")
				m.value(float64(r.Identity), "identity")
			}},
		counter("kvp2p_stalls_detected_total", "", "Sessions the progress watchdog closed: a load's data path carried nothing for stall_timeout.",
			func(c *Counters) uint64 { return c.StallsDetected }),
		counter("kvp2p_failed_load_bytes_total", "", "Bytes received by loads that then failed: transfer work wasted.",
			func(c *Counters) uint64 { return c.FailedLoadBytes }),
		counter("kvp2p_lookup_fallbacks_total", "", "Requests a lookup sent to local prefill (MISS: a failed or ejected peer, a probe or handshake that did not come in time).",
			func(c *Counters) uint64 { return c.LookupFallbacks }),
		{Name: "kvp2p_time_to_fallback_seconds", Type: "histogram", Labels: []string{"via"},
			Help: "How long a request waited before falling back to prefill: via=load from the load's submission to its failure, via=lookup from the request's first RETRY to its MISS (0 if it had none).",
			emit: func(s *Snapshot, m *emitter) {
				m.hist(s.Hists.TimeToFallback, "load")
				m.hist(s.Hists.LookupFallback, "lookup")
			}},
		hist("kvp2p_time_to_hit_seconds", "", "From a load's submission to its success.",
			func(h *Histograms) Hist { return h.TimeToHit }),
		counter("kvp2p_summary_parts_applied_total", "", "Parts of peers' summaries applied (docs/find.md): a snapshot's or a delta's, one or more an interval per peer.",
			func(c *Counters) uint64 { return c.Summaries.Applied }),
		{Name: "kvp2p_summary_parts_refused_total", Type: "counter", Labels: []string{"reason"},
			Help: "Parts of peers' summaries not applied, by reason: gap (not the next part of what the node holds, as after a lost part or a peer's restart: the peer's summary is unused until its next snapshot, at its next session), format (a summary format this node does not read), size (a filter size over the bound), unready (from a connection whose session is not ready), other.",
			emit: func(s *Snapshot, m *emitter) {
				r := s.Counters.Summaries.Refused
				m.value(float64(r.Gap), "gap")
				m.value(float64(r.Format), "format")
				m.value(float64(r.Size), "size")
				m.value(float64(r.Unready), "unready")
				m.value(float64(r.Other), "other")
			}},
		{Name: "kvp2p_summary_bytes_total", Type: "counter", Labels: []string{"direction"},
			Help: "Bytes of Summary frames, as encoded: in (peers' summaries received) or out (this node's, sent to its peers).",
			emit: func(s *Snapshot, m *emitter) {
				m.value(float64(s.Counters.Summaries.BytesIn), "in")
				m.value(float64(s.Counters.Summaries.BytesOut), "out")
			}},
		{Name: "kvp2p_summary_peers", Type: "gauge", Labels: []string{"state"},
			Help: "Peers whose summary the node holds: usable (whole and updated within find.max_age: a request with no source may be sent to it) or unusable (stale, or waiting for a snapshot after a refused part).",
			emit: func(s *Snapshot, m *emitter) {
				m.value(float64(s.Find.PeersUsable), "usable")
				m.value(float64(s.Find.PeersUnusable), "unusable")
			}},
		{Name: "kvp2p_summary_oldest_age_seconds", Type: "gauge",
			Help: "How long ago the least recently updated usable summary was updated (0 with none): at most find.interval plus the connection's latency when every peer keeps up.",
			emit: func(s *Snapshot, m *emitter) { m.value(s.Find.OldestSec) }},
		counter("kvp2p_summary_reports_refused_total", "", "Stored-block reports from the engine (one a step) that the node's summary could not take (a chunk outside the node's slots); each is logged at most once a minute, with this count.",
			func(c *Counters) uint64 { return c.Summaries.ReportsRefused }),
		{Name: "kvp2p_find_members", Type: "gauge",
			Help: "The deployment's members this node keeps a session to for their summaries: find.peers and what find.dns resolved to (this node left out; a member DNS stopped naming stays for find.dns_grace).",
			emit: func(s *Snapshot, m *emitter) { m.value(float64(s.Find.Members)) }},
		counter("kvp2p_find_dns_errors_total", "", "find.dns lookups that failed (not a name without records, which is an empty answer): the members stay as they were.",
			func(c *Counters) uint64 { return c.Summaries.DNSErrors }),
		{Name: "kvp2p_up", Type: "gauge", Help: "1 if the node's loop answered the scrape, 0 if it has stopped or did not answer in time."},
	}
}

// Markdown renders Defs as the docs table.
func Markdown() string {
	var b strings.Builder
	b.WriteString("| name | type | labels | vLLM (`vllm:kv_offload_p2p_…`) | meaning |\n")
	b.WriteString("| --- | --- | --- | --- | --- |\n")
	for _, d := range Defs() {
		labels, vllm := "", ""
		if len(d.Labels) > 0 {
			labels = "`" + strings.Join(d.Labels, "`, `") + "`"
		}
		if d.VLLM != "" {
			vllm = "`" + d.VLLM + "`"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s |\n", d.Name, d.Type, labels, vllm, d.Help)
	}
	return b.String()
}
