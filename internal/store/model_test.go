package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/kvp2p/kvp2p/internal/wire"
)

// model is the naive reference: plain maps and slices, every operation a
// scan. It shares no code with Store. Recency is a slice of every indexed
// Ready slot, pinned or not, oldest first; eviction scans it for the first
// unpinned one. Store instead keeps pinned slots off its list and re-adds
// them as most recent on their last Unpin; the model gets the same order by
// moving a slot to the end on that Unpin.
type model struct {
	n         int
	state     []State
	pins      []int
	keys      []wire.Key
	orphan    []bool
	data      []uint64 // what a Filling or Ready slot's bytes should hold
	index     map[wire.Key]int
	recency   []int
	evictions uint64
}

func newModel(n int) *model {
	return &model{
		n: n, state: make([]State, n), pins: make([]int, n), keys: make([]wire.Key, n),
		orphan: make([]bool, n), data: make([]uint64, n), index: map[wire.Key]int{},
	}
}

func (m *model) valid(slot Slot) bool { return int64(slot) < int64(m.n) }

func (m *model) touch(slot int) {
	m.recency = slices.DeleteFunc(m.recency, func(x int) bool { return x == slot })
	m.recency = append(m.recency, slot)
}

func (m *model) free(slot int) {
	m.state[slot], m.pins[slot], m.keys[slot], m.orphan[slot] = StateFree, 0, wire.Key{}, false
}

// unindex mirrors Remove and supersession.
func (m *model) unindex(slot int) {
	delete(m.index, m.keys[slot])
	m.recency = slices.DeleteFunc(m.recency, func(x int) bool { return x == slot })
	if m.pins[slot] > 0 {
		m.orphan[slot] = true
	} else {
		m.free(slot)
	}
}

func (m *model) lookup(k wire.Key) (int, bool) {
	slot, ok := m.index[k]
	if ok {
		m.touch(slot)
	}
	return slot, ok
}

func (m *model) pin(slot Slot) error {
	if !m.valid(slot) || m.state[slot] != StateReady || m.orphan[slot] {
		return ErrState
	}
	m.pins[slot]++
	return nil
}

func (m *model) unpin(slot Slot) error {
	if !m.valid(slot) || m.pins[slot] == 0 {
		return ErrState
	}
	m.pins[slot]--
	switch {
	case m.pins[slot] > 0:
	case m.orphan[slot]:
		m.free(int(slot))
	default:
		m.touch(int(slot))
	}
	return nil
}

// victim says what Reserve must do: take any Free slot (anyFree), take the
// returned slot, or fail with ErrFull.
func (m *model) victim() (slot int, anyFree bool, err error) {
	if slices.Contains(m.state, StateFree) {
		return -1, true, nil
	}
	for _, s := range m.recency {
		if m.pins[s] == 0 {
			return s, false, nil
		}
	}
	return -1, false, ErrFull
}

// reserve applies a Reserve that the store answered with slot.
func (m *model) reserve(slot int, k wire.Key) {
	if m.state[slot] == StateReady {
		delete(m.index, m.keys[slot])
		m.recency = slices.DeleteFunc(m.recency, func(x int) bool { return x == slot })
		m.evictions++
	}
	m.state[slot], m.keys[slot] = StateFilling, k
}

func (m *model) commit(slot Slot) error {
	if !m.valid(slot) || m.state[slot] != StateFilling {
		return ErrState
	}
	if old, ok := m.index[m.keys[slot]]; ok {
		m.unindex(old)
	}
	m.state[slot] = StateReady
	m.index[m.keys[slot]] = int(slot)
	m.touch(int(slot))
	return nil
}

func (m *model) abandon(slot Slot) error {
	if !m.valid(slot) || m.state[slot] != StateFilling {
		return ErrState
	}
	m.free(int(slot))
	return nil
}

func (m *model) stats() Stats {
	st := Stats{Evictions: m.evictions}
	for i := range m.n {
		switch m.state[i] {
		case StateFree:
			st.Free++
		case StateFilling:
			st.Filling++
		case StateReady:
			st.Ready++
		}
		if m.pins[i] > 0 {
			st.Pinned++
		}
		if m.orphan[i] {
			st.Orphaned++
		}
	}
	return st
}

// harness drives a Store and a model with the same operations.
type harness struct {
	s    *Store
	m    *model
	keys int    // size of the key pool: small, so keys collide
	seq  uint64 // stamps written into slots, to catch mixed-up bytes

	// Coverage, so a test can tell that the sequence was not vacuous.
	hits     [numOps]int // operations that succeeded, by kind
	orphaned bool        // an orphan existed at some point
}

const modelBlockBytes = 8

func newHarness(tb testing.TB, n int) *harness {
	s, err := New(n, modelBlockBytes)
	if err != nil {
		tb.Fatal(err)
	}
	return &harness{s: s, m: newModel(n), keys: 2*n + 1}
}

const numOps = 11

// step applies operation op (mod numOps) with argument arg to both sides
// and compares every answer, then the whole visible state. arg picks a key
// from the pool, or a slot: mostly valid, sometimes just past the end.
func (h *harness) step(op, arg int) error {
	s, m := h.s, h.m
	k := key(arg % h.keys)
	slot := Slot(arg % (m.n + 1))
	if arg%97 == 96 {
		slot = NoSlot
	}
	var desc string
	var err error
	before := s.Stats()
	switch op % numOps {
	case 0, 1: // Reserve twice as often: it is where the pressure is.
		desc = fmt.Sprintf("Reserve(%d)", arg%h.keys)
		want, anyFree, wantErr := m.victim()
		got, gotErr := s.Reserve(k)
		switch {
		case wantErr != nil || gotErr != nil:
			if gotErr != wantErr || got != NoSlot {
				err = fmt.Errorf("got %d, %v; want %v", got, gotErr, wantErr)
			}
		case anyFree && (!m.valid(got) || m.state[got] != StateFree):
			err = fmt.Errorf("got non-free slot %d while free slots exist", got)
		case !anyFree && int(got) != want:
			err = fmt.Errorf("evicted %d, want LRU victim %d", got, want)
		default:
			m.reserve(int(got), k)
			h.seq++ // the filler writes its bytes while Filling
			binary.LittleEndian.PutUint64(s.Bytes(got), h.seq)
			m.data[got] = h.seq
		}
	case 2:
		desc = fmt.Sprintf("Commit(%d)", slot)
		err = sameErr(s.Commit(slot), m.commit(slot))
	case 3:
		desc = fmt.Sprintf("CancelFill(%d)", slot)
		err = sameErr(s.CancelFill(slot), m.abandon(slot))
	case 4:
		desc = fmt.Sprintf("Put(%d)", arg%h.keys)
		h.seq++
		var d [modelBlockBytes]byte
		binary.LittleEndian.PutUint64(d[:], h.seq)
		want, anyFree, wantErr := m.victim()
		got, gotErr := s.Put(k, d[:])
		switch {
		case wantErr != nil || gotErr != nil:
			if gotErr != wantErr {
				err = fmt.Errorf("got %d, %v; want %v", got, gotErr, wantErr)
			}
		case !anyFree && int(got) != want:
			err = fmt.Errorf("evicted %d, want %d", got, want)
		case anyFree && (!m.valid(got) || m.state[got] != StateFree):
			err = fmt.Errorf("got non-free slot %d", got)
		default:
			m.reserve(int(got), k)
			m.data[got] = h.seq
			err = m.commit(got)
		}
	case 5:
		desc = fmt.Sprintf("Lookup(%d)", arg%h.keys)
		want, wantOK := m.lookup(k)
		got, ok := s.Lookup(k)
		err = h.sameHit(got, ok, want, wantOK)
	case 6:
		desc = fmt.Sprintf("Contains(%d)", arg%h.keys)
		if _, want := m.index[k]; s.Contains(k) != want {
			err = fmt.Errorf("Contains = %v, want %v", !want, want)
		}
	case 7:
		desc = fmt.Sprintf("PinKey(%d)", arg%h.keys)
		want, wantOK := m.lookup(k)
		if wantOK {
			wantOK = m.pin(Slot(want)) == nil
		}
		got, ok := s.PinKey(k)
		err = h.sameHit(got, ok, want, wantOK)
	case 8:
		desc = fmt.Sprintf("Pin(%d)", slot)
		err = sameErr(s.Pin(slot), m.pin(slot))
	case 9:
		desc = fmt.Sprintf("Unpin(%d)", slot)
		err = sameErr(s.Unpin(slot), m.unpin(slot))
	case 10:
		desc = fmt.Sprintf("Remove(%d)", arg%h.keys)
		slot, want := m.index[k]
		if want {
			m.unindex(slot)
		}
		if got := s.Remove(k); got != want {
			err = fmt.Errorf("Remove = %v, want %v", got, want)
		}
	}
	if err == nil {
		err = h.compare()
	}
	if err != nil {
		return fmt.Errorf("%s: %w", desc, err)
	}
	if after := s.Stats(); after != before {
		h.hits[op%numOps]++
	}
	h.orphaned = h.orphaned || s.Stats().Orphaned > 0
	return nil
}

func (h *harness) sameHit(got Slot, ok bool, want int, wantOK bool) error {
	if ok != wantOK || ok && int(got) != want || !ok && got != NoSlot {
		return fmt.Errorf("got %d, %v; want %d, %v", got, ok, want, wantOK)
	}
	if ok {
		if d := binary.LittleEndian.Uint64(h.s.Bytes(got)); d != h.m.data[got] {
			return fmt.Errorf("slot %d holds stamp %d, want %d", got, d, h.m.data[got])
		}
	}
	return nil
}

func sameErr(got, want error) error {
	if (got == nil) != (want == nil) || want != nil && !errors.Is(got, want) {
		return fmt.Errorf("error %v, want %v", got, want)
	}
	return nil
}

// compare checks the invariants and every observable of every slot.
func (h *harness) compare() error {
	s, m := h.s, h.m
	if err := s.Check(); err != nil {
		return err
	}
	if got, want := s.Stats(), m.stats(); got != want {
		return fmt.Errorf("Stats %+v, want %+v", got, want)
	}
	for i := range Slot(m.n) {
		k, ok := s.Key(i)
		if s.State(i) != m.state[i] || s.Pins(i) != m.pins[i] || s.Orphaned(i) != m.orphan[i] ||
			ok != (m.state[i] != StateFree) || ok && k != m.keys[i] {
			return fmt.Errorf("slot %d: %v pins %d orphan %v key %x; want %v %d %v %x",
				i, s.State(i), s.Pins(i), s.Orphaned(i), k, m.state[i], m.pins[i], m.orphan[i], m.keys[i])
		}
		if m.state[i] != StateFree {
			if d := binary.LittleEndian.Uint64(s.Bytes(i)); d != m.data[i] {
				return fmt.Errorf("slot %d holds stamp %d, want %d", i, d, m.data[i])
			}
		}
	}
	return nil
}

func TestModel(t *testing.T) {
	for _, n := range []int{1, 2, 3, 5, 8, 16} {
		for seed := range uint64(6) {
			t.Run(fmt.Sprintf("slots=%d/seed=%d", n, seed), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(seed, uint64(n)))
				h := newHarness(t, n)
				for i := range 5000 {
					if err := h.step(rng.IntN(numOps), rng.IntN(1<<16)); err != nil {
						t.Fatalf("op %d: %v", i, err)
					}
				}
				// Every state-changing operation must have changed state at
				// least once (Lookup and Contains never change Stats).
				for op, hits := range h.hits {
					if hits == 0 && op != 5 && op != 6 {
						t.Errorf("operation %d never changed the state", op)
					}
				}
				if h.m.evictions == 0 || n > 1 && !h.orphaned {
					t.Errorf("no eviction or no orphan: %+v", h.s.Stats())
				}
			})
		}
	}
}

// FuzzStoreOps reads the first byte as the slot count and then pairs of
// bytes as (operation, argument).
func FuzzStoreOps(f *testing.F) {
	f.Add([]byte{3, 0, 1, 2, 0, 0, 2, 2, 1, 7, 1, 8, 1, 10, 1, 9, 0})
	f.Add([]byte{1, 0, 1, 2, 0, 7, 1, 4, 1, 9, 0, 4, 2, 0, 3})
	f.Add([]byte{2, 4, 1, 8, 0, 4, 1, 1, 2, 2, 2, 0, 5, 3, 5, 9, 0})
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) == 0 {
			return
		}
		h := newHarness(t, 1+int(ops[0])%8)
		for i := 1; i+1 < len(ops); i += 2 {
			if err := h.step(int(ops[i]), int(ops[i+1])); err != nil {
				t.Fatalf("op %d: %v", i/2, err)
			}
		}
	})
}
