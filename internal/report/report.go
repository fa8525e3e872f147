package report

import (
	"cmp"
	"encoding/json"
	"slices"
	"time"

	"github.com/kvp2p/kvp2p/internal/percentile"
	"github.com/kvp2p/kvp2p/internal/scenario"
)

// Windows derives, from the fault timeline, the intervals during which
// each rank had a fault that makes its requests "affected" (docs/design.md §7;
// FaultKind.CountsAsFault). Instant kinds give From == To; a lasting one
// stays open until a heal of that rank (To = heal time) or forever
// (To = -1). A heal ends every open window of every rank it targets.
// The result is ordered by From, then by rank within one fault's target.
//
// The windows are the ground truth a policy is judged against: they come
// from the scenario, never from what the policy under test believed.
func Windows(sc *scenario.Scenario) []Window {
	faults := slices.Clone(sc.Faults) // Parse sorts them; a Scenario built in code may not
	slices.SortStableFunc(faults, func(a, b scenario.Fault) int { return cmp.Compare(a.At, b.At) })
	var out []Window
	open := map[string][]int{} // rank -> indices into out still open
	for _, f := range faults {
		for _, r := range sc.Ranks(f.Target) {
			switch {
			case f.Kind == scenario.Heal:
				for _, i := range open[r] {
					out[i].To = f.At
				}
				delete(open, r)
			case !f.Kind.CountsAsFault():
			case f.Kind.Instant():
				out = append(out, Window{Rank: r, Kind: f.Kind, From: f.At, To: f.At})
			default:
				open[r] = append(open[r], len(out))
				out = append(out, Window{Rank: r, Kind: f.Kind, From: f.At, To: -1})
			}
		}
	}
	return out
}

// FaultIndex holds the fault windows by rank and by domain, and classifies
// requests against them (affected, collateral); shared by Compute and SVG
// so that the picture and the numbers can never disagree.
type FaultIndex struct {
	byRank   map[string][]Window // each ordered by From
	byDomain map[string][]Window // windows of the ranks of each named domain, ordered by From
	domainOf map[string]string   // rank -> its pod's domain ("" : its own)
	end      time.Duration       // a stuck request lives until here
}

func NewFaultIndex(sc *scenario.Scenario) FaultIndex {
	j := FaultIndex{byRank: map[string][]Window{}, byDomain: map[string][]Window{}, domainOf: map[string]string{}, end: sc.Duration}
	for _, p := range sc.Pods {
		for r := range p.Ranks {
			j.domainOf[scenario.RankID(p.Name, r)] = p.Domain
		}
	}
	for _, w := range Windows(sc) {
		j.byRank[w.Rank] = append(j.byRank[w.Rank], w)
		if d := j.domainOf[w.Rank]; d != "" {
			j.byDomain[d] = append(j.byDomain[d], w)
		}
	}
	for _, m := range []map[string][]Window{j.byRank, j.byDomain} {
		for _, ws := range m {
			slices.SortStableFunc(ws, func(a, b Window) int { return cmp.Compare(a.From, b.From) })
		}
	}
	return j
}

// LifeEnd is when a request stopped depending on its source.
func (j FaultIndex) LifeEnd(r Request) time.Duration {
	if r.Outcome == Stuck {
		return max(j.end, r.Arrived)
	}
	return r.Resolved
}

// overlaps returns the earliest of ws (ordered by From) that overlaps r's
// life [Arrived, end], bounds included, skipping the windows of skip.
func (j FaultIndex) overlaps(r Request, ws []Window, skip string) (Window, bool) {
	end := j.LifeEnd(r)
	for _, w := range ws {
		if w.From > end {
			break
		}
		if w.Rank != skip && (w.To < 0 || w.To >= r.Arrived) {
			return w, true
		}
	}
	return Window{}, false
}

// Affected reports whether any window of r's source, or of r's consumer,
// overlaps r's life [Arrived, end], bounds included: a fault at the very
// instant a request arrives, or an instant fault at the moment it
// resolves, counts. It also returns the earliest such window, from which
// time to fallback is taken. A consumer's fault counts because it is the
// request's own engine and sidecar that had it (a frozen or crashed
// consumer): a fallback then is not false. No built-in scenario but
// frozen faults a consumer.
func (j FaultIndex) Affected(r Request) (Window, bool) {
	w, ok := j.overlaps(r, j.byRank[r.Source], "")
	if r.Consumer == "" || r.Consumer == r.Source {
		return w, ok
	}
	if c, cok := j.overlaps(r, j.byRank[r.Consumer], ""); cok && (!ok || c.From < w.From) {
		return c, true
	}
	return w, ok
}

// collateral reports whether another rank of r's source's failure domain
// had a fault while r was alive. A rank without a domain has no siblings.
func (j FaultIndex) collateral(r Request) bool {
	d := j.domainOf[r.Source]
	if d == "" {
		return false
	}
	_, ok := j.overlaps(r, j.byDomain[d], r.Source)
	return ok
}

// sample is one time in a statistic; censored: the request was still
// unresolved at the end, so the time is a lower bound.
type sample struct {
	ms       float64
	censored bool
}

// isFalse: a fallback no fault touched (affected false) and the consumer
// did not choose (Deliberate): what the report counts as false.
func isFalse(r Request, affected bool) bool {
	return r.Outcome == Fallback && !affected && !r.Deliberate
}

// FalseFallbacks returns the requests Compute counts as false fallbacks,
// so that a run with some can say which (the fault lab keeps their logs).
func FalseFallbacks(sc *scenario.Scenario, reqs []Request) []Request {
	j := NewFaultIndex(sc)
	var out []Request
	for _, r := range reqs {
		if _, hit := j.Affected(r); isFalse(r, hit) {
			out = append(out, r)
		}
	}
	return out
}

// Compute reduces one run's request records to docs/design.md §7's report.
// leakedSlots is measured by the runner (slots still reserved after the
// run has drained) and is passed through; so are the slot counts measured
// while running (PeakSlots, OrphanSlots), which the runner sets itself.
//
// Censoring: a stuck request counts in the time statistics with its time
// so far at the run's end, marked censored: in ttf_ms from its source's
// or consumer's fault (or its arrival, if later) when it was affected, else
// in tth_ms (and tth_healthy_ms, and tth_domain_ms) from its arrival.
// Dropping it instead would make a policy that never resolves a request
// look faster than one that does.
func Compute(sc *scenario.Scenario, policy string, reqs []Request, leakedSlots int) Report {
	rep := Report{Scenario: sc.Name, Policy: policy, Requests: len(reqs), LeakedSlots: leakedSlots,
		PeakSlots: -1, OrphanSlots: -1} // until the driver measures them
	j := NewFaultIndex(sc)
	var ttf, tth, tthDom, tthHealthy []sample
	for _, r := range reqs {
		w, hit := j.Affected(r)
		if hit {
			rep.Affected++
		}
		// From the fault, or from the request's arrival if it came later:
		// the time the engine was kept waiting by the fault.
		sinceFault := func(end time.Duration) float64 { return ms(max(end-max(w.From, r.Arrived), 0)) }
		switch r.Outcome {
		case Hit:
			rep.Hits++
			rep.BytesLoaded += r.Bytes
			s := sample{ms: ms(max(r.Resolved-r.Arrived, 0))}
			tth = append(tth, s)
			if !hit {
				tthHealthy = append(tthHealthy, s)
			}
			if j.collateral(r) {
				tthDom = append(tthDom, s)
			}
		case Fallback:
			rep.Fallbacks++
			if r.Deliberate {
				// Waiting could not beat prefilling: the consumer's choice
				// on a rank that was alive, not a false fallback. If a
				// fault overlapped it, it still took that long.
				rep.DeliberateFallbacks++
			}
			if isFalse(r, hit) {
				rep.FalseFallbacks++
			}
			if !hit {
				break
			}
			ttf = append(ttf, sample{ms: sinceFault(r.Resolved)})
		case Stuck:
			rep.Stuck++
			rep.Censored++
			end := j.LifeEnd(r)
			if hit {
				ttf = append(ttf, sample{ms: sinceFault(end), censored: true})
				break
			}
			s := sample{ms: ms(end - r.Arrived), censored: true}
			tth = append(tth, s)
			tthHealthy = append(tthHealthy, s) // not affected: the case above broke out
			if j.collateral(r) {
				tthDom = append(tthDom, s)
			}
		}
		if r.Corrupt {
			rep.CorruptLoads++
		}
	}
	rep.TTFms, rep.TTHms, rep.TTHDomainMs, rep.TTHHealthyMs = summarise(ttf), summarise(tth), summarise(tthDom), summarise(tthHealthy)
	return rep
}

// summarise sorts samples and takes their percentiles. Among equal times a
// resolved sample sorts first, so a percentile is marked censored only
// when it cannot be anything but a lower bound.
func summarise(ss []sample) TTF {
	slices.SortFunc(ss, func(a, b sample) int {
		if c := cmp.Compare(a.ms, b.ms); c != 0 {
			return c
		}
		switch {
		case a.censored == b.censored:
			return 0
		case b.censored:
			return -1
		}
		return 1
	})
	out := TTF{N: len(ss)}
	for _, s := range ss {
		if s.censored {
			out.Censored++
		}
	}
	if len(ss) == 0 {
		return out
	}
	at := func(p float64) (float64, bool) {
		s := ss[percentile.Index(len(ss), p)]
		return s.ms, s.censored
	}
	out.P50, out.P50Censored = at(50)
	out.P99, out.P99Censored = at(99)
	out.Max, out.MaxCensored = at(100)
	return out
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// JSON is the report as one line of JSON with docs/design.md §7's field names,
// for `--json` output (one object per line per scenario and policy).
func (r Report) JSON() ([]byte, error) { return json.Marshal(r) }
