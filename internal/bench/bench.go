package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kvp2p/kvp2p/internal/node"
	"github.com/kvp2p/kvp2p/internal/percentile"
	"github.com/kvp2p/kvp2p/internal/proccpu"
	"github.com/kvp2p/kvp2p/internal/report"
)

// Options are what kvp2p bench measures; its flags fill them.
type Options struct {
	Bytes   int64 // of one load; rounded up to whole blocks
	Block   int   // bytes per block
	Runs    int   // interleaved runs of each measurement
	Lookups int   // lookup round trips per run
	// LookupRate > 0 paces the lookups: round trip i starts no earlier than
	// i/LookupRate s after the run's first (the wait is not timed). 0: back
	// to back, which runs into the producer's control-message limit (10,000
	// messages/s per connection, two per lookup) once its burst is spent.
	LookupRate float64
	TLS        bool // also load between two nodes with mutual TLS (tls.go)
	FanIn      int  // > 0: also N producers into one consumer at once, against N raw streams (fanin.go)
}

// Report is what bench prints; with --json, one object.
type Report struct {
	Bytes       int64   `json:"bytes"` // per load, rounded up to whole blocks
	BlockBytes  int     `json:"block_bytes"`
	Runs        int     `json:"runs"`
	LookupRate  float64 `json:"lookup_rate,omitempty"` // --lookup-rate; 0: back to back
	KVP2PMBps   float64 `json:"kvp2p_mb_s"`            // medians over the runs
	RawMBps     float64 `json:"raw_mb_s"`
	Ratio       float64 `json:"ratio"` // median of the runs' kvp2p/raw
	LookupP50us float64 `json:"lookup_p50_us"`
	LookupP99us float64 `json:"lookup_p99_us"`       // over every round trip of every run
	LookupsPerS float64 `json:"lookups_per_s"`       // median over the runs, one lookup at a time
	TLSMBps     float64 `json:"tls_mb_s,omitempty"`  // --tls: kvp2p load over mutual TLS
	TLSRatio    float64 `json:"tls_ratio,omitempty"` // --tls: median of the runs' TLS/plain kvp2p
	// --tls: process CPU per GB of the TLS loads; of AES-128-GCM sealing
	// and opening the same bytes alone (tls.go, aeadRig); and the TLS/plain
	// ratio a CPU-bound machine allows at best, plain/(plain + AEAD).
	TLSCPUsPerGB  float64 `json:"tls_cpu_s_per_gb,omitempty"`
	AEADCPUsPerGB float64 `json:"aead_cpu_s_per_gb,omitempty"`
	TLSCeiling    float64 `json:"tls_ceiling,omitempty"`
	// A plain TCP ping-pong of 64 bytes on the same loopback, interleaved
	// with the lookups (as many round trips per run), and the lookup's
	// quantiles over the ping-pong's.
	PingP50us      float64 `json:"ping_p50_us"`
	PingP99us      float64 `json:"ping_p99_us"`
	LookupPerPing  float64 `json:"lookup_per_ping_p50"`
	LookupPerPing9 float64 `json:"lookup_per_ping_p99"`
	// Process CPU seconds (user + system; both ends run in this process)
	// per GB moved, over all runs: kvp2p's load and the raw copy.
	KVP2PCPUsPerGB float64 `json:"kvp2p_cpu_s_per_gb,omitempty"`
	RawCPUsPerGB   float64 `json:"raw_cpu_s_per_gb,omitempty"`
	// --fanin N: N producers into one consumer at once, Bytes split among
	// them (FanInBytes in all), against N raw TCP streams into one receiver.
	FanInSources   int     `json:"fanin_sources,omitempty"`
	FanInBytes     int64   `json:"fanin_bytes,omitempty"`
	FanInMBps      float64 `json:"fanin_mb_s,omitempty"` // medians over the runs
	FanInRawMBps   float64 `json:"fanin_raw_mb_s,omitempty"`
	FanInRatio     float64 `json:"fanin_ratio,omitempty"` // median of the runs' kvp2p/raw
	FanInCPUsPerGB float64 `json:"fanin_cpu_s_per_gb,omitempty"`
	FanInRawCPU    float64 `json:"fanin_raw_cpu_s_per_gb,omitempty"`
	PerRun         []RunMs `json:"per_run"`
}

type RunMs struct {
	KVP2PMBps   float64 `json:"kvp2p_mb_s"`
	RawMBps     float64 `json:"raw_mb_s"`
	Ratio       float64 `json:"ratio"`
	LookupP50us float64 `json:"lookup_p50_us"`
	LookupsPerS float64 `json:"lookups_per_s"`
	TLSMBps     float64 `json:"tls_mb_s,omitempty"`
	TLSRatio    float64 `json:"tls_ratio,omitempty"`
	FanInRatio  float64 `json:"fanin_ratio,omitempty"`
}

// cpuMeter sums wall and process CPU time around measured calls.
type cpuMeter struct {
	wall, cpu time.Duration
	ok        bool
}

func (c *cpuMeter) time(f func() (time.Duration, error)) (time.Duration, error) {
	c0, ok0 := proccpu.Used()
	t, err := f()
	c1, ok1 := proccpu.Used()
	c.wall += t
	if ok0 && ok1 {
		c.cpu, c.ok = c.cpu+c1-c0, true
	}
	return t, err
}

// perGB is CPU seconds per GB for bytes moved per call over calls; 0 when
// the CPU time is unknown.
func (c *cpuMeter) perGB(bytes int64, calls int) float64 {
	if !c.ok || calls == 0 {
		return 0
	}
	return c.cpu.Seconds() / (float64(bytes) * float64(calls) / 1e9)
}

type benchNode struct {
	n      *node.Node
	m      *node.Manager
	served chan error
}

// startBenchNode starts a node on a loopback port; mkTLS, if set, makes
// its TLS config for its peer id (a rank's certificate names its port).
func startBenchNode(block, slots int, mkTLS func(peerID string) (node.TLSConfig, error)) (*benchNode, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	var tc node.TLSConfig
	if mkTLS != nil {
		if tc, err = mkTLS(ln.Addr().String()); err != nil {
			ln.Close()
			return nil, err
		}
	}
	n, err := node.New(node.Config{PeerID: ln.Addr().String(), BlockBytes: block, Slots: slots, HashSeed: "bench", TLS: tc})
	if err != nil {
		ln.Close()
		return nil, err
	}
	b := &benchNode{n: n, m: n.Manager(), served: make(chan error, 1)}
	go func() { b.served <- n.Serve(ln) }()
	return b, nil
}

func (b *benchNode) stop() error {
	b.n.Close()
	return <-b.served
}

func benchBlock(k node.Key, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = k[i%len(k)] ^ byte(i>>8)
	}
	return b
}

func benchKey(prefix string, i int) node.Key {
	var k node.Key
	copy(k[:], fmt.Sprintf("%s/%d", prefix, i))
	return k
}

func remoteOf(n *benchNode, kv string) *node.Remote {
	host, port, _ := net.SplitHostPort(n.n.PeerID())
	p, _ := strconv.Atoi(port)
	return &node.Remote{KVRequestID: kv, RemoteHost: host, RemotePort: p}
}

// Run runs the interleaved measurements.
func Run(ctx context.Context, o Options, stderr io.Writer) (*Report, error) {
	blocks := int((o.Bytes + int64(o.Block) - 1) / int64(o.Block))
	size := int64(blocks) * int64(o.Block)
	prod, err := startBenchNode(o.Block, max(blocks, 16), nil)
	if err != nil {
		return nil, err
	}
	defer prod.stop()
	cons, err := startBenchNode(o.Block, max(blocks, 16), nil)
	if err != nil {
		return nil, err
	}
	defer cons.stop()
	keys := make([]node.Key, blocks)
	for i := range keys {
		keys[i] = benchKey("bench", i)
		if err := prod.m.PutBlock(keys[i], benchBlock(keys[i], o.Block)); err != nil {
			return nil, err
		}
	}
	if err := warmSession(ctx, cons, prod); err != nil {
		return nil, err
	}
	raw, err := newRawPair(size)
	if err != nil {
		return nil, err
	}
	defer raw.close()
	ping, err := newRawPing()
	if err != nil {
		return nil, err
	}
	defer ping.close()

	// One untimed round first: the arenas and buffers get their pages, the
	// connections their windows.
	if _, err := loadOnce(ctx, prod, cons, keys, "warm"); err != nil {
		return nil, err
	}
	if _, err := raw.copyOnce(); err != nil {
		return nil, err
	}
	var tp *tlsPair
	var aead *aeadRig
	if o.TLS {
		if tp, err = newTLSPair(ctx, o.Block, keys); err != nil {
			return nil, err
		}
		defer tp.close()
		if aead, err = newAEADRig(); err != nil {
			return nil, err
		}
	}

	var fi *fanIn
	var rfi *rawFanIn
	var fanSize int64
	if o.FanIn > 0 {
		if blocks < o.FanIn {
			return nil, fmt.Errorf("--fanin %d: the load has only %d blocks to share", o.FanIn, blocks)
		}
		fanSize = int64(blocks/o.FanIn*o.FanIn) * int64(o.Block)
		if fi, err = newFanIn(ctx, o.FanIn, blocks, o.Block); err != nil {
			return nil, fmt.Errorf("fan-in: %w", err)
		}
		defer fi.close()
		if rfi, err = newRawFanIn(o.FanIn, fanSize, o.Block); err != nil {
			return nil, err
		}
		defer rfi.close()
		if _, err := fi.once(ctx); err != nil {
			return nil, err
		}
		if _, err := rfi.copyOnce(); err != nil {
			return nil, err
		}
	}

	rep := &Report{Bytes: size, BlockBytes: o.Block, Runs: o.Runs, LookupRate: o.LookupRate}
	var kv, rw, ratios, rates, allRTT, allPing, tlsMB, tlsRatios []float64
	var fkv, frw, fratios []float64
	var kvCPU, rawCPU, fkvCPU, frawCPU, tlsCPU, aeadCPU cpuMeter
	for run := range o.Runs {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		t, err := kvCPU.time(func() (time.Duration, error) { return loadOnce(ctx, prod, cons, keys, fmt.Sprintf("r%d", run)) })
		if err != nil {
			return nil, err
		}
		k := float64(size) / t.Seconds() / 1e6
		t, err = rawCPU.time(raw.copyOnce)
		if err != nil {
			return nil, err
		}
		r := float64(size) / t.Seconds() / 1e6
		rtts, el, err := lookupRuns(ctx, prod, cons, keys, o.Lookups, run, o.LookupRate)
		if err != nil {
			return nil, err
		}
		rate := float64(o.Lookups) / el.Seconds()
		pings, err := ping.rounds(o.Lookups)
		if err != nil {
			return nil, err
		}
		allPing = append(allPing, pings...)
		allRTT = append(allRTT, rtts...)
		kv, rw, ratios, rates = append(kv, k), append(rw, r), append(ratios, k/r), append(rates, rate)
		pr := RunMs{KVP2PMBps: k, RawMBps: r, Ratio: k / r, LookupP50us: percentile.Of(rtts, 50), LookupsPerS: rate}
		if tp != nil {
			t, err := tlsCPU.time(func() (time.Duration, error) { return loadOnce(ctx, tp.prod, tp.cons, keys, fmt.Sprintf("r%d", run)) })
			if err != nil {
				return nil, fmt.Errorf("tls: %w", err)
			}
			if _, err := aeadCPU.time(func() (time.Duration, error) { return aead.once(size) }); err != nil {
				return nil, err
			}
			pr.TLSMBps = float64(size) / t.Seconds() / 1e6
			pr.TLSRatio = pr.TLSMBps / k
			tlsMB, tlsRatios = append(tlsMB, pr.TLSMBps), append(tlsRatios, pr.TLSRatio)
		}
		if fi != nil {
			t, err := fkvCPU.time(func() (time.Duration, error) { return fi.once(ctx) })
			if err != nil {
				return nil, err
			}
			a := float64(fanSize) / t.Seconds() / 1e6
			if t, err = frawCPU.time(rfi.copyOnce); err != nil {
				return nil, err
			}
			r := float64(fanSize) / t.Seconds() / 1e6
			pr.FanInRatio = a / r
			fkv, frw, fratios = append(fkv, a), append(frw, r), append(fratios, a/r)
		}
		rep.PerRun = append(rep.PerRun, pr)
	}
	rep.KVP2PCPUsPerGB, rep.RawCPUsPerGB = kvCPU.perGB(size, o.Runs), rawCPU.perGB(size, o.Runs)
	if fi != nil {
		if err := fi.check(o.Block); err != nil {
			return nil, err
		}
		rep.FanInSources, rep.FanInBytes = o.FanIn, fanSize
		rep.FanInMBps, rep.FanInRawMBps, rep.FanInRatio = percentile.Of(fkv, 50), percentile.Of(frw, 50), percentile.Of(fratios, 50)
		rep.FanInCPUsPerGB, rep.FanInRawCPU = fkvCPU.perGB(fanSize, o.Runs), frawCPU.perGB(fanSize, o.Runs)
	}
	if tp != nil {
		rep.TLSMBps, rep.TLSRatio = percentile.Of(tlsMB, 50), percentile.Of(tlsRatios, 50)
		rep.TLSCPUsPerGB, rep.AEADCPUsPerGB = tlsCPU.perGB(size, o.Runs), aeadCPU.perGB(size, o.Runs)
		if rep.KVP2PCPUsPerGB > 0 && rep.AEADCPUsPerGB > 0 {
			rep.TLSCeiling = rep.KVP2PCPUsPerGB / (rep.KVP2PCPUsPerGB + rep.AEADCPUsPerGB)
		}
	}
	// The bytes of the last load are the blocks' own.
	for _, k := range []node.Key{keys[0], keys[len(keys)-1]} {
		if got, ok := cons.m.ReadBlock(k); !ok || !bytes.Equal(got, benchBlock(k, o.Block)) {
			return nil, fmt.Errorf("block %x was not loaded intact", k[:4])
		}
	}
	rep.KVP2PMBps, rep.RawMBps, rep.Ratio = percentile.Of(kv, 50), percentile.Of(rw, 50), percentile.Of(ratios, 50)
	rep.LookupP50us, rep.LookupP99us = percentile.Of(allRTT, 50), percentile.Of(allRTT, 99)
	rep.LookupsPerS = percentile.Of(rates, 50)
	rep.PingP50us, rep.PingP99us = percentile.Of(allPing, 50), percentile.Of(allPing, 99)
	rep.LookupPerPing, rep.LookupPerPing9 = rep.LookupP50us/rep.PingP50us, rep.LookupP99us/rep.PingP99us
	return rep, nil
}

// warmSession opens the consumer's session to the producer: a PD lookup is
// HIT once it is ready.
func warmSession(ctx context.Context, cons, prod *benchNode) error {
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; ; i++ {
		id := fmt.Sprintf("warm-%d", i)
		if err := cons.m.NewRequest(id, node.TransferParams{RemotePrefiller: remoteOf(prod, id)}); err != nil {
			return err
		}
		v := cons.m.Lookup(id, benchKey("warm", 0))
		cons.m.RequestFinished(id)
		if v == node.Hit {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("no session between the bench nodes within 10 s")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
}

// waitJob waits on m until job's result (Manager.WaitFinished: no polls,
// so the load is timed to the loop turn that settled it).
func waitJob(ctx context.Context, m *node.Manager, job uint64) (node.JobResult, error) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for {
		for _, r := range m.WaitFinished(ctx) {
			if r.Job == job {
				return r, nil
			}
		}
		if err := ctx.Err(); err != nil {
			return node.JobResult{}, fmt.Errorf("job %d: no result: %w", job, err)
		}
	}
}

// loadOnce times one PD load of keys: SubmitStore and SubmitLoad to both
// results.
func loadOnce(ctx context.Context, prod, cons *benchNode, keys []node.Key, kv string) (time.Duration, error) {
	start := time.Now()
	prod.m.NewRequest("p"+kv, node.TransferParams{RemoteDecoder: &node.Remote{KVRequestID: kv}})
	sj, err := prod.m.SubmitStore("p"+kv, keys)
	if err != nil {
		return 0, err
	}
	cons.m.NewRequest("d"+kv, node.TransferParams{RemotePrefiller: remoteOf(prod, kv)})
	lj, err := cons.m.SubmitLoad("d"+kv, keys)
	if err != nil {
		return 0, err
	}
	r, err := waitJob(ctx, cons.m, lj)
	if err != nil {
		return 0, err
	}
	if !r.OK {
		return 0, fmt.Errorf("load failed: %s", r.Reason)
	}
	if r, err = waitJob(ctx, prod.m, sj); err != nil {
		return 0, err
	} else if !r.OK {
		return 0, fmt.Errorf("store failed: %s", r.Reason)
	}
	el := time.Since(start)
	cons.m.RequestFinished("d" + kv)
	prod.m.RequestFinished("p" + kv)
	return el, nil
}

// lookupRuns times n symmetric lookup round trips, one at a time: Lookup
// (RETRY), EndStep, then LookupWait parked in the node's loop until HIT (the
// way an engine that has nothing else to do waits; polling Lookup instead
// queues a hop into the loop ahead of the reply). It returns each round trip
// in µs and the time for all n, request setup and teardown included.
func lookupRuns(ctx context.Context, prod, cons *benchNode, keys []node.Key, n, run int, rate float64) ([]float64, time.Duration, error) {
	rtts := make([]float64, 0, n)
	start := time.Now()
	for i := range n {
		if i%64 == 0 && ctx.Err() != nil {
			return nil, 0, ctx.Err()
		}
		if rate > 0 {
			if wait := time.Until(start.Add(time.Duration(float64(i) / rate * float64(time.Second)))); wait > 0 {
				time.Sleep(wait) // pacing, before the round trip's clock starts
			}
		}
		id := fmt.Sprintf("l%d-%d", run, i)
		k := keys[i%len(keys)]
		if err := cons.m.NewRequest(id, node.TransferParams{RemoteKVSource: remoteOf(prod, id)}); err != nil {
			return nil, 0, err
		}
		t0 := time.Now()
		v := cons.m.Lookup(id, k)
		cons.m.EndStep()
		if v == node.Retry {
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			v = cons.m.LookupWait(wctx, id, k)
			cancel()
			if v == node.Retry {
				if ctx.Err() != nil {
					return nil, 0, ctx.Err()
				}
				return nil, 0, errors.New("lookup still RETRY after 10 s")
			}
		}
		if v != node.Hit {
			return nil, 0, fmt.Errorf("lookup of a held block: %v", v)
		}
		rtts = append(rtts, float64(time.Since(t0).Nanoseconds())/1e3)
		cons.m.RequestFinished(id)
	}
	return rtts, time.Since(start), nil
}

// rawPair copies size bytes over one plain TCP connection on 127.0.0.1.
type rawPair struct {
	ln       net.Listener
	wc       net.Conn
	src, dst []byte
	next     chan struct{} // a round starts: the reader may fill dst
	got      chan error    // a round ended (dst is the writer's again)
	chunk    int
}

func newRawPair(size int64) (*rawPair, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &rawPair{ln: ln, src: make([]byte, size), dst: make([]byte, size), next: make(chan struct{}), got: make(chan error), chunk: 256 << 10}
	for i := range p.src {
		p.src[i] = byte(i >> 8)
	}
	go p.read()
	if p.wc, err = net.Dial("tcp", ln.Addr().String()); err != nil {
		close(p.next)
		ln.Close()
		for range p.got {
		}
		return nil, err
	}
	return p, nil
}

func (p *rawPair) read() {
	defer close(p.got)
	rc, err := p.ln.Accept()
	if err != nil {
		p.got <- err
		return
	}
	defer rc.Close()
	for range p.next {
		_, err := io.ReadFull(rc, p.dst)
		p.got <- err
		if err != nil {
			return
		}
	}
}

func (p *rawPair) copyOnce() (time.Duration, error) {
	start := time.Now()
	p.next <- struct{}{}
	for off := 0; off < len(p.src); off += p.chunk {
		if _, err := p.wc.Write(p.src[off:min(off+p.chunk, len(p.src))]); err != nil {
			return 0, err
		}
	}
	if err, ok := <-p.got; !ok || err != nil {
		return 0, fmt.Errorf("raw copy: %v", err)
	}
	el := time.Since(start)
	if !bytes.Equal(p.src[:4096], p.dst[:4096]) {
		return 0, errors.New("raw copy: bytes differ")
	}
	return el, nil
}

func (p *rawPair) close() {
	close(p.next)
	p.wc.Close()
	p.ln.Close()
	for range p.got {
	}
}

func Print(w io.Writer, r *Report) {
	fmt.Fprintf(w, "kvp2p bench: %s per load in %d blocks of %d bytes, 127.0.0.1, %d interleaved runs\n\n",
		sizeString(r.Bytes), r.Bytes/int64(r.BlockBytes), r.BlockBytes, r.Runs)
	fmt.Fprintf(w, "%-6s %12s %12s %10s %15s %12s\n", "run", "kvp2p_MB/s", "raw_MB/s", "kvp2p/raw", "lookup_p50_us", "lookups/s")
	for i, x := range r.PerRun {
		fmt.Fprintf(w, "%-6d %12.1f %12.1f %10.3f %15.1f %12.0f\n", i+1, x.KVP2PMBps, x.RawMBps, x.Ratio, x.LookupP50us, x.LookupsPerS)
	}
	fmt.Fprintf(w, "%-6s %12.1f %12.1f %10.3f %15.1f %12.0f\n\n", "median", r.KVP2PMBps, r.RawMBps, r.Ratio, r.LookupP50us, r.LookupsPerS)
	fmt.Fprintf(w, "load:   kvp2p %.1f MB/s, raw TCP %.1f MB/s, kvp2p/raw %.3f (median of per-run ratios)\n", r.KVP2PMBps, r.RawMBps, r.Ratio)
	paced := ""
	if r.LookupRate > 0 {
		paced = fmt.Sprintf(", paced at %.0f/s", r.LookupRate)
	}
	fmt.Fprintf(w, "lookup: p50 %.1f µs, p99 %.1f µs round trip, %.0f lookups/s one at a time%s\n", r.LookupP50us, r.LookupP99us, r.LookupsPerS, paced)
	fmt.Fprintf(w, "ping:   raw TCP %d-byte ping-pong p50 %.1f µs, p99 %.1f µs; lookup/ping p50 %.1fx, p99 %.1fx\n",
		pingBytes, r.PingP50us, r.PingP99us, r.LookupPerPing, r.LookupPerPing9)
	if r.KVP2PCPUsPerGB > 0 {
		fmt.Fprintf(w, "cpu:    kvp2p %.3f CPU-s/GB, raw TCP %.3f CPU-s/GB (process CPU, both ends, per GB moved)\n", r.KVP2PCPUsPerGB, r.RawCPUsPerGB)
	}
	if r.FanInSources > 0 {
		fmt.Fprintf(w, "fan-in: %d sources into one consumer, %s in all: kvp2p %.1f MB/s, %d raw TCP streams %.1f MB/s, kvp2p/raw %.3f (median; runs %s)\n",
			r.FanInSources, sizeString(r.FanInBytes), r.FanInMBps, r.FanInSources, r.FanInRawMBps, r.FanInRatio, perRun(r.PerRun, func(x RunMs) float64 { return x.FanInRatio }))
		if r.FanInCPUsPerGB > 0 {
			fmt.Fprintf(w, "fan-in cpu: kvp2p %.3f CPU-s/GB, raw TCP %.3f CPU-s/GB\n", r.FanInCPUsPerGB, r.FanInRawCPU)
		}
	}
	if r.TLSMBps > 0 {
		fmt.Fprintf(w, "tls:    kvp2p over mutual TLS %.1f MB/s, TLS/plain %.3f (median; runs %s)\n", r.TLSMBps, r.TLSRatio, perRun(r.PerRun, func(x RunMs) float64 { return x.TLSRatio }))
		if r.TLSCPUsPerGB > 0 {
			fmt.Fprintf(w, "tls cpu: %.3f CPU-s/GB (plain %.3f, plain/TLS %.3f); AES-128-GCM seal+open alone %.3f CPU-s/GB, so TLS/plain <= %.3f while the CPU is the limit\n",
				r.TLSCPUsPerGB, r.KVP2PCPUsPerGB, r.KVP2PCPUsPerGB/r.TLSCPUsPerGB, r.AEADCPUsPerGB, r.TLSCeiling)
		}
	}
}

func sizeString(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

// Quantiles returns the p50, p99 and max of ds in milliseconds (nearest
// rank), zero when empty.
func Quantiles(ds []time.Duration) (p50, p99, mx float64) {
	if len(ds) == 0 {
		return 0, 0, 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	at := func(p float64) float64 { return toMs(s[percentile.Index(len(s), p)]) }
	return at(50), at(99), toMs(s[len(s)-1])
}

func toMs(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// FormatMs prints milliseconds as the scenario reports do (one decimal
// below 100, none above): it is report.FormatMs.
func FormatMs(v float64) string { return report.FormatMs(v) }

// perRun lists one ratio of every run, as printed after a median.
func perRun(runs []RunMs, ratio func(RunMs) float64) string {
	per := make([]string, len(runs))
	for i, x := range runs {
		per[i] = fmt.Sprintf("%.3f", ratio(x))
	}
	return strings.Join(per, " ")
}
