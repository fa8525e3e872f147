package scenario

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// Validate checks a Scenario built in code with the same rules Parse
// applies to a file (messages then carry no file or line). It expects
// defaults to be filled in already and does not modify sc.
func (sc *Scenario) Validate() error {
	p := &parser{lines: map[string]int{}, keys: map[string]int{}}
	p.validate(sc)
	if len(p.errs) > 0 {
		return p.errs
	}
	return nil
}

// validate checks what a single field cannot: names that must refer to
// pods, rank ranges, ports that must not collide, times that must fall in
// order inside the run. Messages quote the value and say what was wanted.
func (p *parser) validate(sc *Scenario) {
	if !validName(sc.Name) {
		p.errorf(nil, "name", "%q: want a name of letters, digits, '-', '_' or '.'", sc.Name)
	}
	if sc.Duration <= 0 {
		p.errorf(nil, "duration", "%v: a run must last longer than 0s", sc.Duration)
	}
	pods := p.validatePods(sc)
	p.validateWorkload(sc, pods)
	p.validateFaults(sc, pods)
}

func (p *parser) validatePods(sc *Scenario) map[string]Pod {
	pods := map[string]Pod{}
	if len(sc.Pods) == 0 {
		p.errorf(nil, "pods", "no pods: a scenario needs at least a source and a consumer")
	}
	for i, pod := range sc.Pods {
		path := fmt.Sprintf("pods[%d]", i)
		if !validName(pod.Name) {
			p.errorf(nil, path+".name", "%q: want a name of letters, digits, '-', '_' or '.'", pod.Name)
		} else if _, dup := pods[pod.Name]; dup {
			p.errorf(nil, path+".name", "duplicate pod name %q", pod.Name)
		}
		if pod.Host == "" || strings.ContainsAny(pod.Host, " \t\r\n/") {
			p.errorf(nil, path+".host", "%q: want a host such as 10.0.0.1", pod.Host)
		}
		portsOK := true
		if pod.Ranks < 1 || pod.Ranks > MaxRanks {
			p.errorf(nil, path+".ranks", "%d: want 1..%d ranks", pod.Ranks, MaxRanks)
			portsOK = false
		}
		if pod.BasePort < 1 || pod.BasePort > 65535 {
			p.errorf(nil, path+".base_port", "%d: want a port in 1..65535", pod.BasePort)
			portsOK = false
		} else if portsOK && pod.BasePort+pod.Ranks-1 > 65535 {
			p.errorf(nil, path+".base_port", "%d: its %d ranks would need ports up to %d, beyond 65535", pod.BasePort, pod.Ranks, pod.BasePort+pod.Ranks-1)
			portsOK = false
		}
		if portsOK {
			for _, q := range sc.Pods[:i] {
				if q.Host == pod.Host && q.Name != pod.Name && q.BasePort <= pod.BasePort+pod.Ranks-1 && pod.BasePort <= q.BasePort+q.Ranks-1 {
					p.errorf(nil, path+".base_port", "ports %d-%d on host %s overlap pod %s (ports %d-%d): each rank needs its own host:port",
						pod.BasePort, pod.BasePort+pod.Ranks-1, pod.Host, q.Name, q.BasePort, q.BasePort+q.Ranks-1)
				}
			}
		}
		if pod.Domain != "" && strings.ContainsAny(pod.Domain, " \t\r\n") {
			p.errorf(nil, path+".domain", "%q: a domain must not contain spaces", pod.Domain)
		}
		if _, dup := pods[pod.Name]; !dup && validName(pod.Name) {
			pods[pod.Name] = pod
		}
	}
	return pods
}

func (p *parser) validateWorkload(sc *Scenario, pods map[string]Pod) {
	w := sc.Workload
	switch w.Mode {
	case ModePD, ModeSymmetric, ModeMixed:
	default:
		p.errorf(nil, "workload.mode", "%q: want pd, symmetric or mixed", w.Mode)
	}
	if !(w.Rate > 0) {
		p.errorf(nil, "workload.rate", "%v: want more than 0 requests per second per consumer rank", w.Rate)
	}
	if w.Blocks < 1 || w.Blocks > MaxBlocks {
		p.errorf(nil, "workload.blocks", "%d: want 1..%d blocks per request", w.Blocks, MaxBlocks)
	}
	if w.BlockBytes < 1 || w.BlockBytes > MaxBlockBytes {
		p.errorf(nil, "workload.block_bytes", "%d: want 1..%d (256 MiB) bytes per block", w.BlockBytes, MaxBlockBytes)
	}
	src := p.podList(w.Sources, "workload.sources", pods)
	p.podList(w.Consumers, "workload.consumers", pods)
	for i, name := range w.Consumers {
		if src[name] {
			p.errorf(nil, fmt.Sprintf("workload.consumers[%d]", i), "%q is also a source: a pod is either a source or a consumer", name)
		}
	}
	if w.Start < 0 {
		p.errorf(nil, "workload.start", "negative time %v", w.Start)
	}
	if w.Stop <= w.Start {
		p.errorf(nil, "workload.stop", "%v is not after start %v: the workload would make no requests", w.Stop, w.Start)
	} else if sc.Duration > 0 && w.Stop > sc.Duration {
		p.errorf(nil, "workload.stop", "%v is beyond the run's duration %v", w.Stop, sc.Duration)
	}
}

// podList checks a list of pod names and returns it as a set.
func (p *parser) podList(names []string, path string, pods map[string]Pod) map[string]bool {
	set := map[string]bool{}
	if len(names) == 0 {
		p.errorf(nil, path, "empty: name at least one pod")
	}
	for i, name := range names {
		sub := fmt.Sprintf("%s[%d]", path, i)
		if _, ok := pods[name]; !ok {
			p.errorf(nil, sub, "unknown pod %q (pods: %s)", name, strings.Join(podNames(pods), ", "))
		} else if set[name] {
			p.errorf(nil, sub, "pod %q listed twice", name)
		}
		set[name] = true
	}
	return set
}

func podNames(pods map[string]Pod) []string {
	var out []string
	for n := range pods {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

func (p *parser) validateFaults(sc *Scenario, pods map[string]Pod) {
	for i, f := range sc.Faults {
		path := fmt.Sprintf("faults[%d]", i)
		if f.At < 0 {
			p.errorf(nil, path+".at", "negative time %v", f.At)
		} else if sc.Duration > 0 && f.At > sc.Duration {
			p.errorf(nil, path+".at", "%v is beyond the run's duration %v", f.At, sc.Duration)
		}
		if !slices.Contains(Kinds, f.Kind) {
			var ks []string
			for _, k := range Kinds {
				ks = append(ks, string(k))
			}
			p.errorf(nil, path+".kind", "unknown fault kind %q (want one of: %s)", f.Kind, strings.Join(ks, ", "))
		}
		p.validateTarget(f.Target, path+".target", pods)
		switch {
		case f.Kind == Slow && f.BytesPerSec <= 0:
			p.errorf(nil, path+".bytes_per_sec", "slow needs bytes_per_sec > 0, got %d", f.BytesPerSec)
		case f.Kind != Slow && f.BytesPerSec != 0:
			p.errorf(nil, path+".bytes_per_sec", "only a slow fault takes bytes_per_sec (this is %s)", f.Kind)
		}
		switch {
		case f.Kind == Delay && f.Latency <= 0:
			p.errorf(nil, path+".latency", "delay needs latency > 0, got %v", f.Latency)
		case f.Kind != Delay && f.Latency != 0:
			p.errorf(nil, path+".latency", "only a delay fault takes latency (this is %s)", f.Kind)
		}
	}
	if len(p.errs) == 0 {
		p.validateHeals(sc)
	}
}

func (p *parser) validateTarget(t Target, path string, pods map[string]Pod) {
	pod, ok := pods[t.Pod]
	switch {
	case !ok:
		p.errorf(nil, path, "%q: unknown pod %q (pods: %s)", t, t.Pod, strings.Join(podNames(pods), ", "))
	case t.All:
	case t.First < 0 || t.First > t.Last:
		p.errorf(nil, path, "%q: empty rank range", t)
	case t.Last >= pod.Ranks:
		bad := t.Last
		if t.First >= pod.Ranks {
			bad = t.First
		}
		p.errorf(nil, path, "%q: rank %d out of range (%s has %d ranks)", t, bad, pod.Name, pod.Ranks)
	}
}

// validateHeals rejects a heal that heals nothing: with no lasting fault
// open on any of its ranks at that time it is almost always a fault
// written out of order or aimed at the wrong rank, and would silently make
// the scenario test something else.
func (p *parser) validateHeals(sc *Scenario) {
	order := make([]int, len(sc.Faults))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(sc.Faults[a].At, sc.Faults[b].At) })
	open := map[string]bool{}
	for _, i := range order {
		f := sc.Faults[i]
		ranks := sc.Ranks(f.Target)
		switch {
		case f.Kind == Heal:
			healed := false
			for _, r := range ranks {
				healed = healed || open[r]
				delete(open, r)
			}
			if !healed {
				p.errorf(nil, fmt.Sprintf("faults[%d]", i), "heal of %s at %v heals nothing: no lasting fault is open on it then (is a fault later than its heal?)", f.Target, f.At)
			}
		case !f.Kind.Instant():
			for _, r := range ranks {
				open[r] = true
			}
		}
	}
}

// normalize fills in what validation proved well-defined: "pod/*" gets
// its concrete rank range, and the faults are put in time order (stable,
// so faults at the same instant apply in file order).
func (p *parser) normalize(sc *Scenario) {
	for i := range sc.Faults {
		t := &sc.Faults[i].Target
		if pod, ok := sc.Pod(t.Pod); ok && t.All {
			t.First, t.Last = 0, pod.Ranks-1
		}
	}
	slices.SortStableFunc(sc.Faults, func(a, b Fault) int { return cmp.Compare(a.At, b.At) })
}
