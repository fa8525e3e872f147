package prefixsim

import (
	"fmt"
	"time"

	"github.com/kvp2p/kvp2p/internal/summary"
	"github.com/kvp2p/kvp2p/internal/wire"
)

// Result is what a run measured (requests after the warm-up).
type Result struct {
	Config   Config
	Requests int
	// Tokens of the measured prompts: in all, held by the request's own
	// pod, loadable from a peer by the oracle, loaded from the peer Find
	// named.
	PromptTokens, LocalTokens, OracleTokens, FoundTokens int64
	// Asks: requests for which Find named a peer; Empty: asks whose peer
	// held none of the keys asked (a false or stale positive); Short:
	// asks whose peer held fewer than Find expected.
	Asks, Empty, Short int
	// Summary traffic per rank, bytes per second: the mean out (a rank's
	// deltas to each of its peers) and in (its peers' deltas), and the
	// largest in of any interval.
	OutBps, InBps, PeakInBps float64
	// SnapshotBytes: the largest snapshot of a pod at the end (what one
	// new peer costs it to send).
	SnapshotBytes int
	// Memory per node: its peers' summaries and its own producer.
	IndexBytes, ProducerBytes int
	Flushes                   int
}

// Ratio is the found tokens' share of the oracle's.
func (r Result) Ratio() float64 {
	if r.OracleTokens == 0 {
		return 1
	}
	return float64(r.FoundTokens) / float64(r.OracleTokens)
}

// NICShare is the larger of in and out traffic (peak in) as a share of
// the NIC.
func (r Result) NICShare() float64 {
	return max(r.OutBps, r.PeakInBps) * 8 / r.Config.NICBitsPerSecond
}

type fleet struct {
	cfg      Config
	w        *workload
	tiers    []*tier
	prods    []*summary.Producer
	names    []string
	byName   map[string]int
	index    *summary.Index
	holders  map[uint64][]int32 // key → pods holding it, for the oracle
	load     []int              // asks each pod served in the current interval
	memo     []int              // per pod, for the oracle: run+1 at stamp, 0 unknown
	memoAt   []int
	stamp    int
	frameBuf []byte
}

// Run runs cfg.
func Run(cfg Config) (Result, error) {
	if err := cfg.fill(); err != nil {
		return Result{}, err
	}
	f := &fleet{cfg: cfg, w: newWorkload(cfg), index: summary.NewIndex(0), holders: map[uint64][]int32{},
		byName: map[string]int{}, load: make([]int, cfg.Pods), memo: make([]int, cfg.Pods), memoAt: make([]int, cfg.Pods)}
	for p := range cfg.Pods {
		f.tiers = append(f.tiers, newTier(cfg.ChunksPerRank))
		pr, err := summary.NewProducer(cfg.ChunksPerRank, uint64(p)+1)
		if err != nil {
			return Result{}, err
		}
		f.prods = append(f.prods, pr)
		name := fmt.Sprintf("pod-%04d", p)
		f.names = append(f.names, name)
		f.byName[name] = p
		if err := f.deliver(p, pr.Snapshot(), time.Time{}); err != nil {
			return Result{}, err
		}
	}
	res := Result{Config: cfg}
	spacing := time.Duration(float64(time.Second) / (cfg.RatePerPod * float64(cfg.Pods)))
	warm := int(float64(cfg.Requests) * cfg.WarmupFraction)
	var nextFlush time.Duration
	var outBytes, measuredTime float64
	var ks, all []uint64
	var wk []wire.Key
	self := -1
	q := summary.Query{MaxAge: cfg.MaxAge,
		Eligible: func(peer string) bool { return f.byName[peer] != self },
		Load:     func(peer string) int { return f.load[f.byName[peer]] }}
	for j := range cfg.Requests {
		now := time.Duration(j) * spacing
		for now >= nextFlush {
			nextFlush += cfg.Interval
			b, err := f.flush(time.Unix(0, 0).Add(nextFlush))
			if err != nil {
				return Result{}, err
			}
			if j >= warm {
				res.Flushes++
				outBytes += float64(b)
				measuredTime += cfg.Interval.Seconds()
				res.PeakInBps = max(res.PeakInBps, float64(b)/cfg.Interval.Seconds())
			}
		}
		p := j % cfg.Pods
		req := f.w.next()
		ks = f.w.keys(req.s, req.prompt, ks)
		local := f.tiers[p].run(ks, 0)
		if j >= warm {
			res.Requests++
			res.PromptTokens += int64(req.prompt)
			res.LocalTokens += int64(local * cfg.BlockTokens)
		}
		if local < len(ks) {
			oracle := f.oracle(p, ks, local)
			wk = wk[:0]
			for _, k := range ks {
				wk = append(wk, wireKey(k))
			}
			self = p
			q.Keys, q.From, q.Now, q.Start = wk, local, time.Unix(0, 0).Add(now), uint64(j)
			found := 0
			c, ok := f.index.Find(q)
			if ok {
				peer := f.byName[c.Peer]
				found = f.tiers[peer].run(ks, local)
				f.load[peer]++
				if j >= warm {
					res.Asks++
					switch {
					case found == 0:
						res.Empty++
					case local+found < c.Blocks:
						res.Short++
					}
				}
			}
			if j >= warm {
				res.OracleTokens += int64(oracle * cfg.BlockTokens)
				res.FoundTokens += int64(found * cfg.BlockTokens)
			}
		}
		all = f.w.keys(req.s, req.total, all)
		for _, k := range all {
			f.store(p, k)
		}
	}
	if measuredTime > 0 {
		// Every pod sends its delta to each peer; a rank receives every
		// other pod's.
		peers := float64(cfg.Pods - 1)
		res.OutBps = outBytes / float64(cfg.Pods) / measuredTime * peers
		res.InBps = outBytes / measuredTime * peers / float64(cfg.Pods)
	}
	// PeakInBps so far is the fleet's largest interval total: a rank
	// receives all of it but its own share.
	res.PeakInBps *= float64(cfg.Pods-1) / float64(cfg.Pods)
	for _, pr := range f.prods {
		n := 0
		for _, part := range pr.Snapshot() {
			b, err := wire.Append(f.frameBuf[:0], &part)
			if err != nil {
				return Result{}, err
			}
			n += len(b)
		}
		res.SnapshotBytes = max(res.SnapshotBytes, n)
		res.ProducerBytes = max(res.ProducerBytes, pr.Stats().Bytes)
	}
	res.IndexBytes = f.index.Bytes() * (cfg.Pods - 1) / cfg.Pods
	return res, nil
}

// store puts k into pod p's tier and its producer.
func (f *fleet) store(p int, k uint64) {
	chunk, fresh, old, evicted := f.tiers[p].put(k)
	if !fresh {
		return // already held: the producer has it
	}
	if evicted {
		hs := f.holders[old]
		for i, h := range hs {
			if int(h) == p {
				hs[i] = hs[len(hs)-1]
				hs = hs[:len(hs)-1]
				break
			}
		}
		if len(hs) == 0 {
			delete(f.holders, old)
		} else {
			f.holders[old] = hs
		}
	}
	f.holders[k] = append(f.holders[k], int32(p))
	_ = f.prods[p].Store(int(chunk), wireKey(k))
}

// flush publishes every pod's delta into the index, and returns the bytes
// the deltas took on the wire (per receiver).
func (f *fleet) flush(now time.Time) (int, error) {
	total := 0
	for p, pr := range f.prods {
		parts := pr.Flush()
		for i := range parts {
			b, err := wire.Append(f.frameBuf[:0], &parts[i])
			if err != nil {
				return 0, err
			}
			f.frameBuf = b
			total += len(b)
		}
		if err := f.deliver(p, parts, now); err != nil {
			return 0, err
		}
		f.load[p] = 0
	}
	return total, nil
}

func (f *fleet) deliver(p int, parts []wire.Summary, now time.Time) error {
	for i := range parts {
		if err := f.index.Apply(f.names[p], &parts[i], now); err != nil {
			return err
		}
	}
	return nil
}

// oracle is the most blocks, from ks[from] on, that one other pod holds in
// a row: from the longest candidate down, so the first pod that holds
// ks[from:b+1] answers.
func (f *fleet) oracle(p int, ks []uint64, from int) int {
	f.stamp++
	for b := len(ks) - 1; b >= from; b-- {
		for _, h := range f.holders[ks[b]] {
			q := int(h)
			if q == p {
				continue
			}
			if f.memoAt[q] != f.stamp {
				f.memoAt[q], f.memo[q] = f.stamp, f.tiers[q].run(ks, from)
			}
			if f.memo[q] >= b+1-from {
				return b + 1 - from
			}
		}
	}
	return 0
}
