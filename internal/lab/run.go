package lab

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/kvp2p/kvp2p/internal/report"
	"github.com/kvp2p/kvp2p/internal/scenario"
	"github.com/kvp2p/kvp2p/internal/workload"
)

const (
	tick         = 5 * time.Millisecond  // the engines' step, as the demo's
	prefillDelay = 20 * time.Millisecond // arrival to the PD store, as the simulator's
	warmup       = time.Second
	startWait    = 15 * time.Second // a process's socket must answer within this
	// unboundStore is the lab's unbound_store_timeout (default 1 m): a PD
	// store no decoder fetched (its request fell back) holds its chunks
	// this long, and the drain must outlast it to tell such a store from
	// a leaked one. It only matters for stores never fetched.
	unboundStore = 10 * time.Second
	drainMax     = unboundStore + 5*time.Second // after the run: jobs and pins must come back within this
	stopGrace    = 5 * time.Second
)

// Options of one lab run.
type Options struct {
	Bin        string    // the kvp2p binary the ranks run (`kvp2p serve`)
	BlockBytes int       // bytes per block; 0: the scenario's
	Keep       bool      // leave the namespaces and processes up at the end
	Progress   io.Writer // a line every few seconds; nil: none
	LogLevel   string    // the processes' --log-level; default info
	// EvidenceDir: where a run with false fallbacks keeps its logs and
	// those requests' records (keepEvidence); "" is the package's
	// EvidenceDir, "-" keeps nothing.
	EvidenceDir string

	soak *soakState // Soak's checks; nil: none
}

// rank is one scenario rank: its process, its engine, its faults.
type rank struct {
	id    string
	pod   scenario.Pod
	r     int
	ns    string
	addr  string
	port  int
	slots int
	// metricsPort is the serve's /metrics on the loopback of its host's
	// namespace: outside the rank's own port, so no fault touches it.
	metricsPort int
	cfg         string
	sock        string
	region      string
	logPath     string
	hn          *hostNet

	consumer bool
	p        *proc   // nil while crashed
	eng      *engine // the current incarnation's engine; nil while crashed
	stalled  bool
	refusing bool // its serve was told (SIGUSR2) to refuse handshakes
}

type run struct {
	sc     *scenario.Scenario
	policy string
	opt    Options
	block  int
	dir    string
	hosts  *Hosts
	nets   map[string]*hostNet
	ranks  []*rank
	byID   map[string]*rank
	cons   []*rank
	srcs   []*rank
	wl     *workload.Engine
	zero   time.Time
	faults []scenario.Fault
	want   []byte
	got    []byte
	olds   []*engine // engines of incarnations that are gone, closed at the end
	soak   *soakState
	steps  stepLog
	// issued is when the driver handed each request to its consumer's
	// sidecar: its arrival, plus however late the driver ran.
	issued map[string]time.Duration
	sym    map[string]bool // symmetric requests (their lookups are batched)
}

// Run runs scenario sc under policy on real processes in network
// namespaces and reports it. The caller holds the lock (Acquire). Unless
// opt.Keep, everything made is removed before Run returns, whatever
// happens (an error, ctx's end).
func Run(ctx context.Context, sc *scenario.Scenario, policy string, opt Options) (res report.Run, err error) {
	if err := CheckKinds(sc); err != nil {
		return res, err
	}
	r := &run{sc: sc, policy: policy, opt: opt, block: opt.BlockBytes, nets: map[string]*hostNet{}, byID: map[string]*rank{}, soak: opt.soak,
		issued: map[string]time.Duration{}, sym: map[string]bool{}}
	if r.block <= 0 {
		r.block = sc.Workload.BlockBytes
	}
	r.want, r.got = make([]byte, r.block), make([]byte, r.block)
	defer func() {
		if opt.Keep && err == nil {
			r.closeEngines()
			return
		}
		r.teardown()
	}()
	if err := r.setup(); err != nil {
		return res, err
	}
	if err := r.warm(ctx); err != nil {
		return res, err
	}
	if r.soak != nil {
		r.gorBaseline(ctx)
	}
	r.zero = time.Now()
	load0 := loadAvg()
	r.progress("t=0 at %s; load average %s", r.zero.UTC().Format("15:04:05.000"), load0)
	if err := r.loop(ctx); err != nil {
		return res, err
	}
	r.progress("%s; load average %s at t=0, %s at the end", r.steps.summary(), load0, loadAvg())
	r.progress("%s", issueLag(r.sc, r.policy, r.wl.Requests(), r.issued))
	leaked := r.finish(ctx)
	if r.soak != nil {
		r.gorSettle(ctx)
	}
	recs := r.wl.Requests()
	rep := report.Compute(sc, policy, recs, leaked)
	r.keepEvidence(recs)
	return report.Run{Policy: policy, Requests: recs, Report: rep}, nil
}

func (r *run) setup() error {
	var hosts []string
	for _, p := range r.sc.Pods {
		if !slices.Contains(hosts, p.Host) {
			hosts = append(hosts, p.Host)
		}
	}
	var err error
	if r.hosts, err = MakeHosts(hosts); err != nil {
		return err
	}
	r.dir = filepath.Join(StateDir, "run-"+r.sc.Name+"-"+r.policy)
	for _, d := range []string{r.dir, RegionDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	ports := map[string][]int{}
	w := r.sc.Workload
	for _, p := range r.sc.Pods {
		for i := range p.Ranks {
			id := scenario.RankID(p.Name, i)
			if len(r.ranks) >= metricsPorts {
				return fmt.Errorf("more than %d ranks: the lab runs at most %d", metricsPorts, metricsPorts)
			}
			name := strings.ReplaceAll(id, "/", "-")
			rk := &rank{id: id, pod: p, r: i, ns: r.hosts.NS(p.Host), addr: r.hosts.Addr(p.Host), port: p.BasePort + i,
				cfg: filepath.Join(r.dir, name+".yaml"), sock: filepath.Join(r.dir, name+".sock"),
				region: filepath.Join(RegionDir, r.sc.Name+"-"+r.policy+"-"+name+".mmap"), logPath: filepath.Join(r.dir, name+".log"),
				metricsPort: MetricsBase + len(r.ranks)}
			switch {
			case slices.Contains(w.Consumers, p.Name):
				// Room for every load a per-peer run can leave waiting out
				// its 30 s timeout; the file is sparse and only chunks in
				// flight are ever touched.
				rk.slots = min(16384, max(1024, int(w.Rate*float64(w.Blocks)*35)))
				r.cons = append(r.cons, rk)
				rk.consumer = true
			default:
				rk.slots = 2048
				if slices.Contains(w.Sources, p.Name) {
					r.srcs = append(r.srcs, rk)
				}
			}
			r.ranks = append(r.ranks, rk)
			r.byID[id] = rk
			ports[p.Host] = append(ports[p.Host], rk.port)
		}
	}
	for host, ps := range ports {
		if r.nets[host], err = newHostNet(r.hosts.NS(host), ps); err != nil {
			return err
		}
	}
	for _, rk := range r.ranks {
		rk.hn = r.nets[rk.pod.Host]
		if err := r.writeConfig(rk); err != nil {
			return err
		}
		if err := r.start(rk); err != nil {
			return err
		}
	}
	cfg := workload.Config{Workload: w, Seed: uint64(r.sc.Seed), PrefillDelay: prefillDelay, BlockBytes: r.block}
	for _, rk := range r.cons {
		cfg.Consumers = append(cfg.Consumers, rk.id)
	}
	for _, rk := range r.srcs {
		cfg.Sources = append(cfg.Sources, r.target(rk))
	}
	r.wl, err = workload.New(cfg, r)
	r.faults = slices.Clone(r.sc.Faults)
	slices.SortStableFunc(r.faults, func(a, b scenario.Fault) int { return int(a.At - b.At) })
	return err
}

// target is the rank as its consumers' requests name it: its lab address.
func (r *run) target(rk *rank) workload.Source {
	return workload.Source{ID: rk.id, Host: rk.addr, Port: rk.port, Domain: rk.pod.Domain}
}

func (r *run) writeConfig(rk *rank) error {
	y := fmt.Sprintf(`# kvp2p lab: %s of scenario %s under %s
peer_id: "%s:%d"
failure_domain: %q
policy: %s
block_bytes: %d
slots: %d
hash_seed: "kvp2p-lab"
metrics_addr: "127.0.0.1:%d"
timers:
  unbound_store_timeout: %v
engine:
  socket: %q
  region_dir: %q
`, rk.id, r.sc.Name, r.policy, rk.addr, rk.port, rk.pod.Domain, r.policy, r.block, rk.slots, rk.metricsPort, unboundStore, rk.sock, RegionDir)
	return os.WriteFile(rk.cfg, []byte(y), 0o600)
}

// start makes the rank a new incarnation: an empty region, a new process,
// an engine attached to it.
func (r *run) start(rk *rank) error {
	f, err := os.OpenFile(rk.region, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	err = f.Truncate(int64(rk.slots) * int64(r.block)) // sparse
	f.Close()
	if err != nil {
		return err
	}
	if rk.p, err = startServe(r.opt.Bin, rk.ns, rk.cfg, rk.logPath, cmp.Or(r.opt.LogLevel, "info")); err != nil {
		return err
	}
	rk.eng, err = attachEngine(rk.id, rk.sock, rk.region, rk.slots, r.block, time.Now().Add(startWait))
	if err != nil {
		if rk.p.exited() {
			err = fmt.Errorf("%w (the process exited; see %s)", err, rk.logPath)
		}
		return err
	}
	return nil
}

// crash kills the rank's process; its engine sees its sidecar gone.
func (r *run) crash(rk *rank) {
	if rk.p != nil {
		rk.p.kill()
		rk.p = nil
	}
	if rk.eng != nil {
		rk.eng.sidecarGone()
		r.olds = append(r.olds, rk.eng)
		rk.eng = nil
	}
	rk.stalled = false
	rk.refusing = false // a new process starts accepting handshakes
}

func (r *run) closeEngines() {
	for _, e := range r.olds {
		e.close()
	}
	r.olds = nil
	for _, rk := range r.ranks {
		if rk.eng != nil {
			rk.eng.close()
			rk.eng = nil
		}
	}
}

// keepEvidence keeps the logs of a run with false fallbacks before the
// teardown removes them, and says where (a failure to keep them is said
// too, but does not fail the run).
func (r *run) keepEvidence(recs []report.Request) {
	root := cmp.Or(r.opt.EvidenceDir, EvidenceDir)
	false_ := report.FalseFallbacks(r.sc, recs)
	if root == "-" || len(false_) == 0 {
		return
	}
	if !r.opt.Keep {
		r.stopProcs() // their logs complete
	}
	dst, err := keepEvidence(root, r.dir, r.sc, r.policy, false_, time.Now())
	if err != nil {
		r.progress("%d false fallbacks; keeping their evidence failed: %v", len(false_), err)
		return
	}
	r.progress("%d false fallbacks: the processes' logs and those requests' records are kept in %s", len(false_), dst)
}

// teardown stops every process and removes everything the run made.
func (r *run) teardown() {
	r.closeEngines()
	r.stopProcs()
	_ = Clean()
}

// stopProcs stops every rank's process that still runs.
func (r *run) stopProcs() {
	for _, rk := range r.ranks {
		if rk.p != nil {
			rk.p.stop(stopGrace)
			rk.p = nil
		}
	}
}

// Consumer and Source make the run the workload's Fleet.
func (r *run) Consumer(i int) workload.Node { return r.nodeOf(r.cons[i]) }
func (r *run) Source(j int) workload.Node   { return r.nodeOf(r.srcs[j]) }

func (r *run) nodeOf(rk *rank) workload.Node {
	if rk.eng == nil {
		return nil
	}
	return node{r: r, rk: rk, e: rk.eng}
}

func (r *run) now() time.Duration { return time.Since(r.zero) }

// progress writes one line of the run's progress, if asked for.
func (r *run) progress(format string, args ...any) {
	if r.opt.Progress != nil {
		fmt.Fprintf(r.opt.Progress, "  %s %s: %s\n", r.sc.Name, r.policy, fmt.Sprintf(format, args...))
	}
}
