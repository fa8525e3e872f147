package session

import (
	"fmt"
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/health"
	"github.com/kvp2p/kvp2p/internal/store"
	"github.com/kvp2p/kvp2p/internal/wire"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

const testBlockBytes = 4096

func slots(first, n int) []store.Slot {
	s := make([]store.Slot, n)
	for i := range s {
		s[i] = store.Slot(first + i)
	}
	return s
}

// fakeBlocks is a producer's block store: keys it holds, keys being filled,
// and a pin count per slot so that tests can prove every pin is dropped.
type fakeBlocks struct {
	held    map[wire.Key]store.Slot
	pending map[wire.Key]bool
	pins    map[store.Slot]int
	next    store.Slot
	src     *SourceQuota // shared with other sessions of the source; nil: none
}

func (b *fakeBlocks) SourceQuota() *SourceQuota { return b.src }

func newFakeBlocks() *fakeBlocks {
	return &fakeBlocks{held: map[wire.Key]store.Slot{}, pending: map[wire.Key]bool{}, pins: map[store.Slot]int{}, next: 1000}
}

func (b *fakeBlocks) add(ks ...wire.Key) {
	for _, k := range ks {
		b.held[k] = b.next
		b.next++
		delete(b.pending, k)
	}
}

func (b *fakeBlocks) PinKey(k wire.Key) (store.Slot, bool) {
	s, ok := b.held[k]
	if ok {
		b.pins[s]++
	}
	return s, ok
}

func (b *fakeBlocks) Unpin(s store.Slot) error {
	if b.pins[s] == 0 {
		return fmt.Errorf("unpin of unpinned slot %d", s)
	}
	if b.pins[s]--; b.pins[s] == 0 {
		delete(b.pins, s)
	}
	return nil
}

func (b *fakeBlocks) Pending(k wire.Key) bool { return b.pending[k] }

func (b *fakeBlocks) pinned() int {
	n := 0
	for _, c := range b.pins {
		n += c
	}
	return n
}

// side is one session and everything it decided, accumulated.
type side struct {
	s        *Session
	blocks   *fakeBlocks
	inbox    []wire.Message // sent by this side, not yet delivered to the other
	sent     []wire.Message // every message this side sent
	data     []DataOp
	loads    []LoadResult
	stores   []StoreResult
	releases []uint64
	newFetch []string
	ended    health.Cause
	// reportedEnd: a script trace has shown the end already.
	reportedEnd bool
}

func (sd *side) collect(t *testing.T) {
	t.Helper()
	o := sd.s.TakeOut()
	for _, m := range o.Msgs {
		b, err := wire.Append(nil, m) // every message crosses the codec, as on the wire
		if err != nil {
			t.Fatalf("encode %T: %v", m, err)
		}
		c, err := wire.Decode(wire.Type(b[5]), b[6:], wire.DefaultLimits())
		if err != nil {
			t.Fatalf("decode %T: %v", m, err)
		}
		sd.inbox = append(sd.inbox, c)
		sd.sent = append(sd.sent, c)
	}
	sd.data = append(sd.data, o.Data...)
	sd.loads = append(sd.loads, o.Loads...)
	sd.stores = append(sd.stores, o.Stores...)
	sd.releases = append(sd.releases, o.Releases...)
	sd.newFetch = append(sd.newFetch, o.NewFetch...)
	if o.Ended != health.CauseNone {
		if sd.ended != health.CauseNone {
			t.Fatalf("session ended twice: %v then %v", sd.ended, o.Ended)
		}
		sd.ended = o.Ended
	}
}

// sentOf returns the messages of type T this side sent, in order.
func sentOf[T wire.Message](sd *side) []T {
	var out []T
	for _, m := range sd.sent {
		if x, ok := m.(T); ok {
			out = append(out, x)
		}
	}
	return out
}

// dataOf returns the data ops of kind k for job.
func (sd *side) dataOf(k DataOpKind, job uint64) []DataOp {
	var out []DataOp
	for _, op := range sd.data {
		if op.Kind == k && op.Job == job {
			out = append(out, op)
		}
	}
	return out
}

// loadResults returns every result published for job.
func (sd *side) loadResults(job uint64) []LoadResult {
	var out []LoadResult
	for _, r := range sd.loads {
		if r.Job == job {
			out = append(out, r)
		}
	}
	return out
}

func (sd *side) storeResults(job uint64) []StoreResult {
	var out []StoreResult
	for _, r := range sd.stores {
		if r.Job == job {
			out = append(out, r)
		}
	}
	return out
}

func (sd *side) released(job uint64) int {
	n := 0
	for _, j := range sd.releases {
		if j == job {
			n++
		}
	}
	return n
}

// pair is a consumer session (c, outbound) and a producer session (p,
// inbound) joined by a hand-driven control link. The data path is the
// test's: it calls sendEnd/dataEnd when it wants the writer or the reader
// to finish.
type pair struct {
	t    *testing.T
	now  time.Time
	cfg  *Config
	c, p *side
}

func testConfig() *Config {
	return &Config{
		LocalID: "10.0.0.2:7777", Incarnation: 1, BlockBytes: testBlockBytes, HashSeed: "s", Fingerprint: "fp",
		MaxInflight:      64,
		HandshakeTimeout: 5 * time.Second, HeartbeatInterval: 500 * time.Millisecond, HeartbeatTimeout: 2 * time.Second,
		LoadTimeoutSymmetric: 10 * time.Second, LoadTimeoutPD: 30 * time.Second, AbortAckTimeout: 5 * time.Second,
		LookupTimeout: 2 * time.Second, StoreTimeout: 30 * time.Second, CancelDrainTimeout: 10 * time.Second,
		LookupPendingTimeout: 5 * time.Second,
	}
}

// newPair builds a pair and completes the handshake unless raw.
func newPair(t *testing.T, mod func(c, p *Config)) *pair {
	t.Helper()
	cc, pc := testConfig(), testConfig()
	pc.LocalID = "10.0.0.1:7777"
	if mod != nil {
		mod(cc, pc)
	}
	pr := &pair{t: t, now: t0, cfg: cc}
	pr.c = &side{blocks: newFakeBlocks()}
	pr.p = &side{blocks: newFakeBlocks()}
	pr.c.s = New(cc, pr.c.blocks, "10.0.0.1:7777", true, t0) // the id the consumer dials
	pr.p.s = New(pc, pr.p.blocks, "", false, t0)
	return pr
}

// connect starts both ends (the dial succeeded) and runs the handshake.
func (pr *pair) connect() {
	pr.t.Helper()
	pr.c.s.Start(pr.now)
	pr.p.s.Start(pr.now)
	pr.flush()
	if !pr.c.s.Ready() || !pr.p.s.Ready() {
		pr.t.Fatalf("handshake did not complete: consumer ready=%v producer ready=%v", pr.c.s.Ready(), pr.p.s.Ready())
	}
}

func readyPair(t *testing.T, mod func(c, p *Config)) *pair {
	t.Helper()
	pr := newPair(t, mod)
	pr.connect()
	return pr
}

// flush delivers control messages both ways until both sides are quiet.
func (pr *pair) flush() {
	pr.t.Helper()
	for i := 0; ; i++ {
		pr.c.collect(pr.t)
		pr.p.collect(pr.t)
		if len(pr.c.inbox) == 0 && len(pr.p.inbox) == 0 {
			return
		}
		if i > 1000 {
			pr.t.Fatal("control messages never settle")
		}
		toP, toC := pr.c.inbox, pr.p.inbox
		pr.c.inbox, pr.p.inbox = nil, nil
		for _, m := range toP {
			pr.p.s.Receive(pr.now, m)
		}
		for _, m := range toC {
			pr.c.s.Receive(pr.now, m)
		}
	}
}

// advance moves the clock in 10 ms steps, ticking both sides and keeping
// the link flushed, as the node's loop does.
func (pr *pair) advance(d time.Duration) {
	pr.t.Helper()
	end := pr.now.Add(d)
	for pr.now.Before(end) {
		step := 10 * time.Millisecond
		if r := end.Sub(pr.now); r < step {
			step = r
		}
		pr.now = pr.now.Add(step)
		pr.c.s.Tick(pr.now)
		pr.p.s.Tick(pr.now)
		pr.flush()
	}
}

// load starts a consumer load and flushes it to the producer.
func (pr *pair) load(job uint64, id string, ks []wire.Key, pd bool) {
	pr.t.Helper()
	if err := pr.c.s.RequestBlocks(pr.now, job, id, ks, slots(int(job)*100, len(ks)), pd); err != nil {
		pr.t.Fatalf("RequestBlocks: %v", err)
	}
	pr.flush()
}

// lookup registers keys for id, flushes the lookup and returns the verdicts
// after the producer answered.
func (pr *pair) lookup(id string, ks []wire.Key) []Verdict {
	pr.t.Helper()
	for _, k := range ks {
		pr.c.s.RegisterLookup(id, k)
	}
	pr.c.s.FlushLookups(pr.now)
	pr.flush()
	vs := make([]Verdict, len(ks))
	for i, k := range ks {
		vs[i] = pr.c.s.RegisterLookup(id, k)
	}
	return vs
}

// sendEnd: the producer's writer wrote job's terminal frame. dataEnd: the
// consumer's reader saw it.
func (pr *pair) sendEnd(job uint64, ok bool, bytes uint64) {
	pr.t.Helper()
	pr.p.s.SendEnd(pr.now, job, ok, bytes)
	pr.flush()
}

func (pr *pair) dataEnd(job uint64, ok bool, bytes uint64) {
	pr.t.Helper()
	pr.c.s.DataEnd(pr.now, job, ok, bytes)
	pr.flush()
}

// complete runs a whole successful data transfer of n blocks for job.
func (pr *pair) complete(job uint64, n int) {
	pr.t.Helper()
	b := uint64(n) * testBlockBytes
	pr.dataEnd(job, true, b)
	pr.sendEnd(job, true, b)
}

// sends returns the blocks handed to the writer for job, and whether the
// last OpSend closed the job.
func (pr *pair) sends(job uint64) (int, bool) {
	n, last := 0, false
	for _, op := range pr.p.dataOf(OpSend, job) {
		n += len(op.Blocks)
		last = last || op.Last
	}
	return n, last
}

func (pr *pair) oneLoad(job uint64) LoadResult {
	pr.t.Helper()
	rs := pr.c.loadResults(job)
	if len(rs) != 1 {
		pr.t.Fatalf("job %d: %d load results, want exactly 1: %+v", job, len(rs), rs)
	}
	return rs[0]
}

func (pr *pair) noLoad(job uint64) {
	pr.t.Helper()
	if rs := pr.c.loadResults(job); len(rs) != 0 {
		pr.t.Fatalf("job %d: unexpected result %+v", job, rs)
	}
}
