package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/kvp2p/kvp2p/internal/cpuwait"
	"github.com/kvp2p/kvp2p/internal/node"
)

// kvp2p bench --fleet: the saturation curve of issue 14. N source nodes
// and one consumer node on 127.0.0.1; PD requests of --blocks blocks
// arrive at the consumer as a Poisson stream at each offered rate in
// turn, every request from a source chosen at random, and each is timed
// from its arrival to its load's result (time to hit). The engines are
// cheap and concurrent, as real ones are: a request is a goroutine, the
// sources serve a fixed pool of blocks written before the clock starts
// (no block writing, no page faults of fresh arena memory in the timed
// part), and results are polled by one goroutine per node. Beside the
// curve, in the same run: one load at a time (the single-load figure),
// and N loads at once, one per source (what a node serving N sessions at
// once delivers).

type FleetOptions struct {
	Sources  int
	Blocks   int // per request
	Block    int // bytes per block
	Rates    []float64
	Duration time.Duration // of each offered rate
}

// FleetPoint is one offered rate's outcome.
type FleetPoint struct {
	Rate       float64 `json:"rate"` // requests per second offered
	OfferedMBs float64 `json:"offered_mb_s"`
	DoneMBs    float64 `json:"delivered_mb_s"`
	Hits       int     `json:"hits"`
	Failed     int     `json:"failed"`
	TTHp50ms   float64 `json:"tth_p50_ms"`
	TTHp99ms   float64 `json:"tth_p99_ms"`
	// CPUWait is the share of the point's time during which some task on
	// the machine waited for a CPU (/proc/pressure/cpu; -1: unknown).
	CPUWait float64 `json:"cpu_wait"`
}

type FleetReport struct {
	Sources     int          `json:"sources"`
	Blocks      int          `json:"blocks"`
	BlockBytes  int          `json:"block_bytes"`
	SingleMBs   float64      `json:"single_mb_s"`   // one load at a time
	SingleP50ms float64      `json:"single_p50_ms"` // its time per load
	ParallelMBs float64      `json:"parallel_mb_s"` // one load per source at once
	Curve       []FleetPoint `json:"curve"`
}

type fleet struct {
	o       FleetOptions
	cons    *benchNode
	srcs    []*benchNode
	keys    [][]node.Key // per source: the pool every request loads
	mu      sync.Mutex
	wait    map[uint64]chan node.JobResult
	early   map[uint64]node.JobResult // results polled before their waiter registered
	stopped context.Context           // done once the fleet closes: the pollers return
	stop    context.CancelFunc
	polled  sync.WaitGroup
	seq     int
}

func startFleet(o FleetOptions) (*fleet, error) {
	f := &fleet{o: o, wait: map[uint64]chan node.JobResult{}, early: map[uint64]node.JobResult{}}
	f.stopped, f.stop = context.WithCancel(context.Background())
	// Room for a second of the highest rate in flight, and warm: the first
	// loads touch every slot before the clock starts.
	var err error
	if f.cons, err = startBenchNode(o.Block, f.slots(), nil); err != nil {
		f.stop()
		return nil, err
	}
	for i := range o.Sources {
		s, err := startBenchNode(o.Block, 4*o.Blocks, nil)
		if err != nil {
			f.close()
			return nil, err
		}
		f.srcs = append(f.srcs, s)
		var ks []node.Key
		for b := range o.Blocks {
			k := benchKey(fmt.Sprintf("fleet%d", i), b)
			if err := s.m.PutBlock(k, benchBlock(k, o.Block)); err != nil {
				f.close()
				return nil, err
			}
			ks = append(ks, k)
		}
		f.keys = append(f.keys, ks)
	}
	for _, n := range append([]*benchNode{f.cons}, f.srcs...) {
		f.polled.Add(1)
		go f.poll(n, n == f.cons)
	}
	return f, nil
}

func (f *fleet) close() {
	f.stop()
	f.polled.Wait()
	if f.cons != nil {
		_ = f.cons.stop()
	}
	for _, s := range f.srcs {
		_ = s.stop()
	}
}

// poll takes a node's results as the loop settles them (WaitFinished: a
// result reaches its waiter in the loop turn that settled it, not at the
// next tick of a poll); the consumer's go to their waiters, the sources'
// store results are dropped.
func (f *fleet) poll(n *benchNode, consumer bool) {
	defer f.polled.Done()
	for f.stopped.Err() == nil {
		rs := n.m.WaitFinished(f.stopped)
		if !consumer {
			continue
		}
		f.mu.Lock()
		for _, r := range rs {
			if ch := f.wait[r.Job]; ch != nil {
				delete(f.wait, r.Job)
				ch <- r
			} else {
				f.early[r.Job] = r
			}
		}
		f.mu.Unlock()
	}
}

// load runs one PD request from source s: the source registers and
// stores, the consumer loads. It returns the load's result.
func (f *fleet) load(ctx context.Context, s int, id string) (node.JobResult, error) {
	src := f.srcs[s]
	if err := src.m.NewRequest("p"+id, node.TransferParams{RemoteDecoder: &node.Remote{KVRequestID: id}}); err != nil {
		return node.JobResult{}, err
	}
	defer src.m.RequestFinished("p" + id)
	if _, err := src.m.SubmitStore("p"+id, f.keys[s]); err != nil {
		return node.JobResult{}, err
	}
	if err := f.cons.m.NewRequest("d"+id, node.TransferParams{RemotePrefiller: remoteOf(src, id)}); err != nil {
		return node.JobResult{}, err
	}
	defer f.cons.m.RequestFinished("d" + id)
	ch := make(chan node.JobResult, 1)
	j, err := f.cons.m.SubmitLoad("d"+id, f.keys[s])
	if err != nil {
		return node.JobResult{}, err
	}
	f.mu.Lock() // the poller may have taken the result already: see early
	if r, ok := f.early[j]; ok {
		delete(f.early, j)
		ch <- r
	} else {
		f.wait[j] = ch
	}
	f.mu.Unlock()
	select {
	case r := <-ch:
		return r, nil
	case <-ctx.Done():
		return node.JobResult{}, ctx.Err()
	case <-time.After(time.Minute):
		return node.JobResult{}, errors.New("no load result within a minute")
	}
}

func (f *fleet) nextID() string {
	f.seq++
	return fmt.Sprintf("f%d", f.seq)
}

// warm opens every session and touches the consumer's slots.
func (f *fleet) warm(ctx context.Context) error {
	for s := range f.srcs {
		if err := warmSession(ctx, f.cons, f.srcs[s]); err != nil {
			return err
		}
	}
	for i := 0; i*f.o.Blocks < 2*f.slots(); i++ {
		if r, err := f.load(ctx, i%len(f.srcs), f.nextID()); err != nil || !r.OK {
			return fmt.Errorf("warming: %v %s", err, r.Reason)
		}
	}
	return nil
}

// slots is the consumer's arena: a second of the highest rate in flight.
func (f *fleet) slots() int {
	m := 0.0
	for _, x := range f.o.Rates {
		m = max(m, x)
	}
	return max(64, int(m)*f.o.Blocks)
}

// together runs n loads at once, load i from source i%sources, and
// returns the time until the last result.
func (f *fleet) together(ctx context.Context, n int) (time.Duration, error) {
	start := time.Now()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		id := f.nextID()
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := f.load(ctx, i%len(f.srcs), id)
			if err == nil && !r.OK {
				err = fmt.Errorf("load failed: %s", r.Reason)
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	return time.Since(start), errors.Join(errs...)
}

// offered runs Poisson arrivals at rate for the duration and times every
// request.
func (f *fleet) offered(ctx context.Context, rate float64, rng *rand.Rand) (FleetPoint, error) {
	pt := FleetPoint{Rate: rate, CPUWait: -1}
	cw := cpuwait.Start()
	var mu sync.Mutex
	var tth []time.Duration
	var wg sync.WaitGroup
	var firstErr error
	start := time.Now()
	next := start
	for next.Sub(start) < f.o.Duration {
		if d := time.Until(next); d > 0 {
			select {
			case <-ctx.Done():
				wg.Wait()
				return pt, ctx.Err()
			case <-time.After(d):
			}
		}
		arrived, s, id := next, rng.IntN(len(f.srcs)), f.nextID()
		next = next.Add(time.Duration(rng.ExpFloat64() / rate * float64(time.Second)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := f.load(ctx, s, id)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				if firstErr == nil {
					firstErr = err
				}
			case r.OK:
				pt.Hits++
				tth = append(tth, time.Since(arrived))
			default:
				pt.Failed++
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	if w, ok := cw.Share(); ok {
		pt.CPUWait = w
	}
	bytes := float64(f.o.Blocks*f.o.Block) / 1e6
	pt.OfferedMBs = rate * bytes
	pt.DoneMBs = float64(pt.Hits) * bytes / el.Seconds()
	pt.TTHp50ms, pt.TTHp99ms, _ = Quantiles(tth)
	return pt, firstErr
}

func Fleet(ctx context.Context, o FleetOptions) (*FleetReport, error) {
	f, err := startFleet(o)
	if err != nil {
		return nil, err
	}
	defer f.close()
	if err := f.warm(ctx); err != nil {
		return nil, err
	}
	rep := &FleetReport{Sources: o.Sources, Blocks: o.Blocks, BlockBytes: o.Block}
	bytes := float64(o.Blocks*o.Block) / 1e6
	// One at a time, then one per source at once: the node's share. The
	// two alternate, a round of each, for at least two seconds, so that
	// the machine's noise falls on both alike.
	var single []time.Duration
	var singleSum, par time.Duration
	rounds := 0
	for began := time.Now(); rounds < 3 || time.Since(began) < 2*time.Second; rounds++ {
		for range o.Sources {
			d, err := f.together(ctx, 1)
			if err != nil {
				return nil, err
			}
			single = append(single, d)
			singleSum += d
		}
		d, err := f.together(ctx, o.Sources)
		if err != nil {
			return nil, err
		}
		par += d
	}
	rep.SingleMBs = float64(len(single)) * bytes / singleSum.Seconds()
	rep.SingleP50ms, _, _ = Quantiles(single)
	rep.ParallelMBs = float64(rounds*o.Sources) * bytes / par.Seconds()
	rng := rand.New(rand.NewPCG(1, 2))
	for _, rate := range o.Rates {
		pt, err := f.offered(ctx, rate, rng)
		if err != nil {
			return nil, err
		}
		rep.Curve = append(rep.Curve, pt)
	}
	return rep, nil
}

func PrintFleet(w io.Writer, r *FleetReport) {
	mib := float64(r.Blocks*r.BlockBytes) / (1 << 20)
	fmt.Fprintf(w, "kvp2p bench --fleet: %d sources, 1 consumer, 127.0.0.1; requests of %d blocks of %d bytes (%.1f MiB)\n\n",
		r.Sources, r.Blocks, r.BlockBytes, mib)
	fmt.Fprintf(w, "one load at a time:            %8.1f MB/s (%.1f ms per load, p50)\n", r.SingleMBs, r.SingleP50ms)
	fmt.Fprintf(w, "%2d loads at once, one a source: %8.1f MB/s, %.2f of one at a time\n\n", r.Sources, r.ParallelMBs, r.ParallelMBs/r.SingleMBs)
	fmt.Fprintf(w, "%8s %12s %14s %8s %7s %12s %12s %10s %9s\n", "req/s", "offered_MB/s", "delivered_MB/s", "hits", "failed", "tth_p50_ms", "tth_p99_ms", "of_single", "cpu_wait")
	for _, p := range r.Curve {
		wait := "n/a"
		if p.CPUWait >= 0 {
			wait = fmt.Sprintf("%.0f%%", 100*p.CPUWait)
		}
		fmt.Fprintf(w, "%8.0f %12.1f %14.1f %8d %7d %12s %12s %10.2f %9s\n", p.Rate, p.OfferedMBs, p.DoneMBs, p.Hits, p.Failed,
			FormatMs(p.TTHp50ms), FormatMs(p.TTHp99ms), p.OfferedMBs/r.SingleMBs, wait)
	}
	fmt.Fprintln(w, "\nof_single: offered load as a share of one load at a time; cpu_wait: share of the time some task")
	fmt.Fprintln(w, "on the machine waited for a CPU (/proc/pressure/cpu): near 100% the machine is the limit.")
}
