package lab

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kvp2p/kvp2p/internal/drive"
	"github.com/kvp2p/kvp2p/internal/report"
	"github.com/kvp2p/kvp2p/internal/scenario"
)

// The soak: a mixed workload for a long time with random faults from the
// whole list the lab makes, checked as it runs.

const (
	// soakTail is the time after the workload stops for every request to
	// resolve: the PD load timeout (30 s) and some.
	soakTail = 40 * time.Second
	// soakMaxAge: a request unresolved this long is older than its
	// timeouts allow (the PD load timeout is the longest, 30 s).
	soakMaxAge = 35 * time.Second
	// soakMaxAnon bounds a process's own memory (RssAnon: its heap and
	// stacks, not the engine's shared region it maps).
	soakMaxAnon = 512 << 20
	// soakMaxThreads bounds a process's OS threads.
	soakMaxThreads = 256
	// soakMaxGoroutines bounds a process's goroutines at every check (a
	// consumer of the soak's fleet holds about 60); the end check holds
	// them to what they were at the start (see goroutines.go).
	soakMaxGoroutines = 2048
	soakCheckEvery    = 5 * time.Second
)

// soakKinds are the fault kinds the soak draws from: every one the lab
// makes.
var soakKinds = []scenario.FaultKind{scenario.Crash, scenario.Stall, scenario.Blackhole, scenario.BlackholeData,
	scenario.CloseControl, scenario.Slow, scenario.Restart, scenario.GoodbyeIdle, scenario.RefuseHandshake}

// SoakScenario is the soak's scenario for d: the pods of pod-partial (a
// partial-failure pod, a co-located instance, two consumers), a mixed
// workload until d-40s, and a random fault every 3-8 s on a random source
// rank (sometimes the whole pod), each lasting fault healed 2-6 s later.
// The same seed gives the same timeline.
func SoakScenario(d time.Duration, seed int64) (*scenario.Scenario, error) {
	if d < soakTail+20*time.Second {
		return nil, fmt.Errorf("soak of %v: at least %v (the last %v only drain)", d, soakTail+20*time.Second, soakTail)
	}
	sc := &scenario.Scenario{
		Name: "soak", Duration: d, Seed: seed,
		Pods: []scenario.Pod{
			{Name: "src-a", Host: "10.0.0.1", Ranks: 8, BasePort: 7777, Domain: "pod-a"},
			{Name: "src-b", Host: "10.0.0.1", Ranks: 2, BasePort: 8777, Domain: "pod-b"},
			{Name: "dst", Host: "10.0.0.2", Ranks: 2, BasePort: 7777},
		},
		Workload: scenario.Workload{Mode: scenario.ModeMixed, Rate: 20, Blocks: 8, BlockBytes: 65536,
			Sources: []string{"src-a", "src-b"}, Consumers: []string{"dst"}, Stop: d - soakTail},
	}
	rng := rand.New(rand.NewPCG(uint64(seed), 0x50a6))
	free := map[string]time.Duration{} // rank -> when its last fault is healed
	span := func(a, b int) time.Duration { return time.Duration(a+rng.IntN(b-a+1)) * time.Second }
	for at := 5 * time.Second; at < d-soakTail; at += span(3, 8) {
		k := soakKinds[rng.IntN(len(soakKinds))]
		var tg scenario.Target
		if rng.IntN(5) == 0 {
			tg = scenario.Target{Pod: "src-a", All: true}
		} else {
			p := sc.Pods[rng.IntN(2)]
			r := rng.IntN(p.Ranks)
			tg = scenario.Target{Pod: p.Name, First: r, Last: r}
		}
		ranks := sc.Ranks(tg)
		busy := false
		for _, id := range ranks {
			busy = busy || free[id] > at
		}
		if busy {
			continue
		}
		f := scenario.Fault{At: at, Kind: k, Target: tg}
		if k == scenario.Slow {
			f.BytesPerSec = 8 << 20
		}
		sc.Faults = append(sc.Faults, f)
		end := at + time.Second
		if !k.Instant() {
			end = at + span(2, 6)
			sc.Faults = append(sc.Faults, scenario.Fault{At: end, Kind: scenario.Heal, Target: tg})
		}
		for _, id := range ranks {
			free[id] = end + time.Second
		}
	}
	slices.SortStableFunc(sc.Faults, func(a, b scenario.Fault) int { return cmp.Compare(a.At, b.At) })
	return sc, nil
}

// soakState is what the soak's checks keep.
type soakState struct {
	violations []string
	old        map[string]bool  // requests already reported too old
	maxAnon    map[string]int64 // rank -> largest RssAnon seen
	maxThreads map[string]int
	maxGor     map[string]int       // rank -> most goroutines seen
	gorStart   map[string]gorSample // rank -> its scrape at time 0
	gorEnd     map[string]gorSample // rank -> its last scrape, after the drain
}

func newSoakState() *soakState {
	return &soakState{old: map[string]bool{}, maxAnon: map[string]int64{}, maxThreads: map[string]int{},
		maxGor: map[string]int{}, gorStart: map[string]gorSample{}, gorEnd: map[string]gorSample{}}
}

func (s *soakState) violate(format string, args ...any) {
	s.violations = append(s.violations, fmt.Sprintf(format, args...))
}

// check is the soak's continuous check, every soakCheckEvery: no request
// older than its timeouts allow, every process's memory, threads and
// goroutines bounded.
func (r *run) check(ctx context.Context, now time.Duration) {
	s := r.soak
	for _, q := range r.wl.Requests() {
		if q.Outcome == report.Stuck && now-q.Arrived > soakMaxAge && !s.old[q.ID] {
			s.old[q.ID] = true
			s.violate("t=%v: request %s (source %s) unresolved for %v, longer than its timeouts allow",
				now.Truncate(time.Millisecond), q.ID, q.Source, (now - q.Arrived).Truncate(time.Millisecond))
		}
	}
	for _, rk := range r.ranks {
		if rk.p == nil || rk.p.exited() {
			continue
		}
		anon, threads, err := procStatus(rk.p.pid())
		if err != nil {
			continue // exiting
		}
		if anon > s.maxAnon[rk.id] {
			s.maxAnon[rk.id] = anon
		}
		s.maxThreads[rk.id] = max(s.maxThreads[rk.id], threads)
		if anon > soakMaxAnon {
			s.violate("t=%v: %s RssAnon %d MiB, over %d MiB", now.Truncate(time.Second), rk.id, anon>>20, soakMaxAnon>>20)
		}
		if threads > soakMaxThreads {
			s.violate("t=%v: %s has %d threads, over %d", now.Truncate(time.Second), rk.id, threads, soakMaxThreads)
		}
		if rk.stalled {
			continue // stopped: nothing answers
		}
		g, err := scrape(ctx, rk.ns, rk.metricsPort)
		if err != nil {
			continue // a blackhole's drop does not reach the loopback, but a process may be busy or exiting
		}
		s.maxGor[rk.id] = max(s.maxGor[rk.id], g.goroutines)
		if g.goroutines > soakMaxGoroutines {
			s.violate("t=%v: %s has %d goroutines, over %d", now.Truncate(time.Second), rk.id, g.goroutines, soakMaxGoroutines)
		}
	}
}

// gorBaseline scrapes every rank at time 0, after the warm-up: every
// consumer has its sessions, nothing is in flight. A rank that cannot be
// scraped is a violation: the end check could not judge it.
func (r *run) gorBaseline(ctx context.Context) {
	for _, rk := range r.ranks {
		g, err := scrape(ctx, rk.ns, rk.metricsPort)
		if err != nil {
			r.soak.violate("t=0: cannot count %s's goroutines: %v", rk.id, err)
			continue
		}
		r.soak.gorStart[rk.id] = g
		r.soak.maxGor[rk.id] = max(r.soak.maxGor[rk.id], g.goroutines)
	}
}

// gorSettle is the leak check, after the drain (faults healed, nothing in
// flight): every rank's goroutines beyond its sessions' must be back to
// what they were at time 0, give or take leakSlack. Sessions closing (a
// heartbeat timeout) still hold theirs for a while, so it scrapes until
// every rank passes or settleMax has gone by; what is still over then
// grew over the run: a leak. A rank restarted during the run is held to
// its first incarnation's count, as its process runs the same code with
// the same peers.
func (r *run) gorSettle(ctx context.Context) {
	s := r.soak
	deadline := time.Now().Add(settleMax)
	for {
		over := gorOver(s.gorStart, s.gorEnd)
		for _, rk := range r.ranks {
			if _, ok := s.gorStart[rk.id]; !ok || rk.p == nil || (len(s.gorEnd) > 0 && !over[rk.id]) {
				continue
			}
			if g, err := scrape(ctx, rk.ns, rk.metricsPort); err == nil {
				s.gorEnd[rk.id] = g
			}
		}
		over = gorOver(s.gorStart, s.gorEnd)
		if len(over) == 0 || time.Now().After(deadline) || drive.Sleep(ctx, 500*time.Millisecond) != nil {
			break
		}
	}
	for _, rk := range r.ranks {
		st, ok := s.gorStart[rk.id]
		if !ok || rk.p == nil {
			continue // not counted at the start, or not running now
		}
		end, ok := s.gorEnd[rk.id]
		switch {
		case !ok:
			s.violate("end: cannot count %s's goroutines after the drain", rk.id)
		case gorLeaked(st, end):
			s.violate("end: %s has %d goroutines with %d sessions after the drain, %d with %d at the start: %d more than its sessions explain (a leak)",
				rk.id, end.goroutines, end.sessions, st.goroutines, st.sessions, end.own()-st.own())
		}
	}
}

// gorLeaked is the leak rule: a process's goroutines beyond its sessions'
// grew by more than leakSlack from start to end.
func gorLeaked(start, end gorSample) bool { return end.own()-start.own() > leakSlack }

// gorOver lists the ranks of start whose end sample is missing or leaked.
func gorOver(start, end map[string]gorSample) map[string]bool {
	over := map[string]bool{}
	for id, st := range start {
		if e, ok := end[id]; !ok || gorLeaked(st, e) {
			over[id] = true
		}
	}
	return over
}

// procStatus reads RssAnon (bytes) and Threads of a process.
func procStatus(pid int) (anon int64, threads int, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		fs := strings.Fields(v)
		if len(fs) == 0 {
			continue
		}
		switch k {
		case "RssAnon":
			kb, _ := strconv.ParseInt(fs[0], 10, 64)
			anon = kb << 10
		case "Threads":
			threads, _ = strconv.Atoi(fs[0])
		}
	}
	return anon, threads, sc.Err()
}

// SoakResult is a soak's report, what it checked, and what it found.
type SoakResult struct {
	Run        report.Run
	Faults     map[scenario.FaultKind]int // faults made, by kind
	Violations []string
	MaxAnon    map[string]int64 // rank -> largest RssAnon seen, bytes
	MaxThreads map[string]int
	// MaxGoroutines is each rank's most goroutines seen; StartOwn and
	// EndOwn its goroutines beyond its sessions' at time 0 and after the
	// drain (what the leak check compares).
	MaxGoroutines    map[string]int
	StartOwn, EndOwn map[string]int
}

// Soak runs sc (SoakScenario) under policy with the continuous checks,
// then the end checks: no corrupt load, no leaked slot, nothing stuck.
func Soak(ctx context.Context, sc *scenario.Scenario, policy string, opt Options) (SoakResult, error) {
	st := newSoakState()
	opt.soak = st
	res, err := Run(ctx, sc, policy, opt)
	out := SoakResult{Run: res, Faults: map[scenario.FaultKind]int{}, MaxAnon: st.maxAnon, MaxThreads: st.maxThreads,
		MaxGoroutines: st.maxGor, StartOwn: map[string]int{}, EndOwn: map[string]int{}}
	for id, g := range st.gorStart {
		out.StartOwn[id] = g.own()
	}
	for id, g := range st.gorEnd {
		out.EndOwn[id] = g.own()
	}
	for _, f := range sc.Faults {
		out.Faults[f.Kind]++
	}
	if err != nil {
		return out, err
	}
	rep := res.Report
	if rep.CorruptLoads > 0 {
		st.violate("%d corrupt loads", rep.CorruptLoads)
	}
	if rep.LeakedSlots > 0 {
		st.violate("%d slots still held after the drain (leaked)", rep.LeakedSlots)
	}
	if rep.Stuck > 0 {
		st.violate("%d requests unresolved at the end", rep.Stuck)
	}
	out.Violations = st.violations
	return out, nil
}
