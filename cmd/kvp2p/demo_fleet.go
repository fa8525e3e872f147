package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/kvp2p/kvp2p"
)

// report has exactly design.md §7's fields.
type report struct {
	Scenario       string `json:"scenario"`
	Policy         string `json:"policy"`
	Requests       int    `json:"requests"`
	Hits           int    `json:"hits"`
	Fallbacks      int    `json:"fallbacks"`
	Affected       int    `json:"affected"`
	FalseFallbacks int    `json:"false_fallbacks"`
	Stuck          int    `json:"stuck"`
	TTFms          ttf    `json:"ttf_ms"`
	CorruptLoads   int    `json:"corrupt_loads"`
	LeakedSlots    int    `json:"leaked_slots"`
	BytesLoaded    uint64 `json:"bytes_loaded"`
	ttfs           []float64
}

type ttf struct {
	P50 float64 `json:"p50"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

type demoNode struct {
	name  string // pod/rank
	id    string // advertised label host:port
	node  *kvp2p.Node
	m     *kvp2p.Manager
	fl    *faultListener
	serve chan error
	// fault windows: [from, to) in time since start; to zero = open
	faultFrom, faultTo time.Duration
}

type demoReq struct {
	id       string
	src      *demoNode
	keys     []kvp2p.Key
	arrived  time.Duration
	job      uint64
	loading  bool
	resolved bool
	hit      bool
	at       time.Duration // resolution time
}

// runFleet runs the built-in scenario under one policy and reports it.
func runFleet(ctx context.Context, policy string, o demoOpts) (*report, error) {
	addrs := map[string]string{}
	var nodes []*demoNode
	mk := func(name, id, domain string) (*demoNode, error) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		addrs[id] = ln.Addr().String()
		n, err := kvp2p.NewNode(kvp2p.Config{
			PeerID: id, Listen: ln.Addr().String(), FailureDomain: domain, Policy: policy,
			BlockBytes: o.block, Slots: 512, HashSeed: "demo",
			Dial: func(p string) string {
				if a, ok := addrs[p]; ok {
					return a
				}
				return p
			},
			Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		})
		if err != nil {
			ln.Close()
			return nil, err
		}
		d := &demoNode{name: name, id: id, node: n, m: n.Manager(), fl: newFaultListener(ln), serve: make(chan error, 1)}
		go func() { d.serve <- n.Serve(d.fl) }()
		nodes = append(nodes, d)
		return d, nil
	}
	var srcA, srcB []*demoNode
	for r := 0; r < 8; r++ {
		d, err := mk(fmt.Sprintf("src-a/%d", r), "10.0.0.1:"+strconv.Itoa(7777+r), "pod-a")
		if err != nil {
			return nil, err
		}
		srcA = append(srcA, d)
	}
	for r := 0; r < 2; r++ {
		d, err := mk(fmt.Sprintf("src-b/%d", r), "10.0.0.1:"+strconv.Itoa(8777+r), "pod-b")
		if err != nil {
			return nil, err
		}
		srcB = append(srcB, d)
	}
	dst, err := mk("dst/0", "10.0.0.2:7777", "")
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, d := range nodes {
			d.node.Close()
			<-d.serve
		}
	}()
	sources := append(append([]*demoNode{}, srcA...), srcB...)
	start := time.Now()
	since := func() time.Duration { return time.Since(start) }

	// Warm every session first, so that the run measures faults, not the
	// cold handshake (per-peer and host-group answer MISS while one is pending).
	warm(dst, sources)

	rep := &report{Scenario: "crash+pod-partial", Policy: policy}
	var reqs []*demoReq
	byJob := map[uint64]*demoReq{}
	step := 5 * time.Millisecond
	interval := time.Duration(float64(time.Second) / o.rate)
	next := 500 * time.Millisecond
	crashed, parted := false, false
	seq := 0
	end := o.run + o.settle
	for since() < end {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		now := since()
		if !crashed && now >= o.crashAt {
			crashed = true
			srcB[0].faultFrom = now
			srcB[0].node.Close() // the process is gone: its connections reset
		}
		if !parted && now >= o.partAt {
			parted = true
			srcA[0].faultFrom, srcA[0].faultTo = now, now // a reset is an instant
			srcA[0].fl.resetAll()
			for _, d := range srcA[1:] {
				d.faultFrom = now
				d.fl.blackholeData(true)
			}
		}
		for now >= next && next < o.run {
			seq++
			src := sources[seq*7%len(sources)]
			r := &demoReq{id: fmt.Sprintf("r%d", seq), src: src, arrived: now}
			for i := 0; i < o.blocks; i++ {
				r.keys = append(r.keys, demoKey(policy+r.id, i))
			}
			// The prefill engine computes and stores the blocks first.
			kv := "kv-" + r.id
			if src.m.NewRequest(r.id, kvp2p.TransferParams{RemoteDecoder: &kvp2p.Remote{KVRequestID: kv}}) == nil {
				for _, k := range r.keys {
					_ = src.m.PutBlock(k, demoBlock(k, o.block))
				}
				_, _ = src.m.SubmitStore(r.id, r.keys)
				src.m.RequestFinished(r.id)
				src.m.PollFinished()
			}
			host, port, _ := net.SplitHostPort(src.id)
			p, _ := strconv.Atoi(port)
			_ = dst.m.NewRequest(r.id, kvp2p.TransferParams{RemotePrefiller: &kvp2p.Remote{KVRequestID: kv, RemoteHost: host, RemotePort: p}})
			reqs = append(reqs, r)
			next += interval
		}
		// One engine step on the consumer.
		for _, r := range reqs {
			if r.resolved || r.loading {
				continue
			}
			switch dst.m.Lookup(r.id, r.keys[0]) {
			case kvp2p.Hit:
				r.job, _ = dst.m.SubmitLoad(r.id, r.keys)
				r.loading = true
				byJob[r.job] = r
			case kvp2p.Miss:
				resolve(dst, r, false, since())
			}
		}
		dst.m.EndStep()
		for _, res := range dst.m.PollFinished() {
			r := byJob[res.Job]
			if r == nil || r.resolved {
				continue
			}
			ok := res.OK
			if ok {
				rep.BytesLoaded += res.Bytes
				for _, k := range r.keys {
					got, found := dst.m.ReadBlock(k)
					if !found || !bytes.Equal(got, demoBlock(k, o.block)) {
						rep.CorruptLoads++
						ok = false
						break
					}
				}
			}
			resolve(dst, r, ok, since())
		}
		time.Sleep(step)
	}
	// Heal, then stop every node in order and count what each still holds.
	for _, d := range srcA[1:] {
		d.faultTo = since()
		d.fl.blackholeData(false)
	}
	for _, d := range nodes {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_ = d.node.Shutdown(sctx)
		cancel()
		st, err := d.node.FinalStats()
		if err != nil {
			return nil, fmt.Errorf("%s: %v", d.name, err)
		}
		rep.LeakedSlots += st.Filling + st.Pinned
	}
	for _, r := range reqs {
		rep.Requests++
		affected := r.src.faultFrom > 0 && r.src.faultFrom <= r.endOr(end) &&
			(r.src.faultTo == 0 || r.src.faultTo == r.src.faultFrom || r.arrived < r.src.faultTo)
		if r.src.faultTo == r.src.faultFrom && r.src.faultFrom > 0 {
			affected = r.arrived <= r.src.faultFrom && r.endOr(end) >= r.src.faultFrom
		}
		if affected {
			rep.Affected++
		}
		switch {
		case !r.resolved:
			rep.Stuck++
		case r.hit:
			rep.Hits++
		default:
			rep.Fallbacks++
			if !affected {
				rep.FalseFallbacks++
			} else {
				from := max(r.src.faultFrom, r.arrived)
				rep.ttfs = append(rep.ttfs, float64((r.at-from).Microseconds())/1000)
			}
		}
	}
	s := sortedCopy(rep.ttfs)
	rep.TTFms = ttf{P50: percentile(s, 0.5), P99: percentile(s, 0.99)}
	if len(s) > 0 {
		rep.TTFms.Max = s[len(s)-1]
	}
	return rep, nil
}

func (r *demoReq) endOr(end time.Duration) time.Duration {
	if r.resolved {
		return r.at
	}
	return end
}

func resolve(dst *demoNode, r *demoReq, hit bool, at time.Duration) {
	r.resolved, r.hit, r.at = true, hit, at
	dst.m.RequestFinished(r.id)
}

// warm opens a session from dst to every source and waits until each is ready.
func warm(dst *demoNode, sources []*demoNode) {
	deadline := time.Now().Add(5 * time.Second)
	for i, s := range sources {
		host, port, _ := net.SplitHostPort(s.id)
		p, _ := strconv.Atoi(port)
		for n := 0; time.Now().Before(deadline); n++ {
			id := fmt.Sprintf("warm-%d-%d", i, n)
			_ = dst.m.NewRequest(id, kvp2p.TransferParams{RemotePrefiller: &kvp2p.Remote{KVRequestID: id, RemoteHost: host, RemotePort: p}})
			v := dst.m.Lookup(id, kvp2p.Key{})
			dst.m.RequestFinished(id)
			if v == kvp2p.Hit {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

func printTable(w io.Writer, reps []*report) {
	fmt.Fprintf(w, "%-18s %-11s %8s %5s %9s %8s %6s %5s %9s %9s %9s %7s %6s %11s\n",
		"scenario", "policy", "requests", "hits", "fallbacks", "affected", "false", "stuck",
		"ttf_p50", "ttf_p99", "ttf_max", "corrupt", "leaked", "bytes")
	for _, r := range reps {
		fmt.Fprintf(w, "%-18s %-11s %8d %5d %9d %8d %6d %5d %8.0fms %8.0fms %8.0fms %7d %6d %11d\n",
			r.Scenario, r.Policy, r.Requests, r.Hits, r.Fallbacks, r.Affected, r.FalseFallbacks, r.Stuck,
			r.TTFms.P50, r.TTFms.P99, r.TTFms.Max, r.CorruptLoads, r.LeakedSlots, r.BytesLoaded)
	}
}
