package scenario

import (
	"fmt"

	"go.yaml.in/yaml/v3"
)

// This file maps the YAML tree onto the model's types field by field,
// checking shapes and types and filling in defaults. Relations between
// fields (pod names, rank ranges, times) are checked in validate.go once
// the whole file has been read.

func (p *parser) scenario(root *yaml.Node) *Scenario {
	sc := &Scenario{Seed: DefaultSeed}
	m := p.fields(root, "", "name", "duration", "seed", "pods", "workload", "faults")
	if m == nil {
		return sc
	}
	p.require(root, m, "", "name", "duration", "pods", "workload")
	if n := m["name"]; n != nil {
		sc.Name = p.str(n, "name")
	}
	if n := m["duration"]; n != nil {
		sc.Duration = p.duration(n, "duration")
	}
	if n := m["seed"]; n != nil {
		sc.Seed = p.integer(n, "seed")
	}
	if n := m["pods"]; n != nil {
		sc.Pods = p.pods(n)
	}
	sc.Workload = Workload{Mode: DefaultMode, Blocks: DefaultBlocks, BlockBytes: DefaultBlockBytes, Stop: -1}
	if n := m["workload"]; n != nil {
		p.workload(n, &sc.Workload)
	}
	if sc.Workload.Stop == -1 { // not given: the workload runs to the end
		sc.Workload.Stop = sc.Duration
	}
	if n := m["faults"]; n != nil {
		sc.Faults = p.faults(n)
	}
	return sc
}

func (p *parser) pods(n *yaml.Node) []Pod {
	if n.Kind != yaml.SequenceNode {
		p.errorf(n, "pods", "want a list of pods, got %s", kindName(n))
		return nil
	}
	var out []Pod
	for i, c := range n.Content {
		path := fmt.Sprintf("pods[%d]", i)
		p.lines[path] = c.Line
		pod := Pod{BasePort: DefaultBasePort}
		m := p.fields(c, path, "name", "host", "ranks", "base_port", "domain")
		if m != nil {
			p.require(c, m, path, "name", "host", "ranks")
			if v := m["name"]; v != nil {
				pod.Name = p.str(v, path+".name")
			}
			if v := m["host"]; v != nil {
				pod.Host = p.str(v, path+".host")
			}
			if v := m["ranks"]; v != nil {
				pod.Ranks = p.small(v, path+".ranks")
			}
			if v := m["base_port"]; v != nil {
				pod.BasePort = p.small(v, path+".base_port")
			}
			if v := m["domain"]; v != nil {
				pod.Domain = p.str(v, path+".domain")
			}
		}
		out = append(out, pod)
	}
	return out
}

func (p *parser) workload(n *yaml.Node, w *Workload) {
	const path = "workload"
	m := p.fields(n, path, "mode", "rate", "blocks", "block_bytes", "sources", "consumers", "start", "stop")
	if m == nil {
		return
	}
	p.require(n, m, path, "rate", "sources", "consumers")
	if v := m["mode"]; v != nil {
		w.Mode = Mode(p.str(v, path+".mode"))
	}
	if v := m["rate"]; v != nil {
		w.Rate = p.float(v, path+".rate")
	}
	if v := m["blocks"]; v != nil {
		w.Blocks = p.small(v, path+".blocks")
	}
	if v := m["block_bytes"]; v != nil {
		w.BlockBytes = p.small(v, path+".block_bytes")
	}
	if v := m["sources"]; v != nil {
		w.Sources = p.names(v, path+".sources")
	}
	if v := m["consumers"]; v != nil {
		w.Consumers = p.names(v, path+".consumers")
	}
	if v := m["start"]; v != nil {
		w.Start = p.duration(v, path+".start")
	}
	if v := m["stop"]; v != nil {
		w.Stop = p.duration(v, path+".stop")
		if w.Stop < 0 {
			p.errorf(v, path+".stop", "negative time %v", w.Stop)
		}
	}
}

func (p *parser) faults(n *yaml.Node) []Fault {
	if n.Kind != yaml.SequenceNode {
		p.errorf(n, "faults", "want a list of faults, got %s", kindName(n))
		return nil
	}
	var out []Fault
	for i, c := range n.Content {
		path := fmt.Sprintf("faults[%d]", i)
		p.lines[path] = c.Line
		f := Fault{Line: c.Line}
		m := p.fields(c, path, "at", "kind", "target", "bytes_per_sec", "latency")
		if m != nil {
			p.require(c, m, path, "at", "kind", "target")
			if v := m["at"]; v != nil {
				f.At = p.duration(v, path+".at")
			}
			if v := m["kind"]; v != nil {
				f.Kind = FaultKind(p.str(v, path+".kind"))
			}
			if v := m["target"]; v != nil {
				if s, ok := p.scalar(v, path+".target"); ok {
					t, err := ParseTarget(s)
					if err != nil {
						p.errorf(v, path+".target", "%v", err)
					}
					f.Target = t
				}
			}
			if v := m["bytes_per_sec"]; v != nil {
				f.BytesPerSec = p.integer(v, path+".bytes_per_sec")
			}
			if v := m["latency"]; v != nil {
				f.Latency = p.duration(v, path+".latency")
			}
		}
		out = append(out, f)
	}
	return out
}
