package store

import (
	"encoding/binary"
	"errors"
	"testing"

	"go.uber.org/goleak"

	"github.com/kvp2p/kvp2p/internal/wire"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// key makes a distinct key from a small integer without allocating.
func key(i int) wire.Key {
	var k wire.Key
	binary.LittleEndian.PutUint64(k[:], uint64(i)+1) // +1: never the zero key
	k[15] = 0xAB
	return k
}

func newStore(t testing.TB, numSlots, blockBytes int) *Store {
	t.Helper()
	s, err := New(numSlots, blockBytes)
	if err != nil {
		t.Fatalf("New(%d, %d): %v", numSlots, blockBytes, err)
	}
	return s
}

// block returns blockBytes bytes all equal to b.
func block(blockBytes int, b byte) []byte {
	d := make([]byte, blockBytes)
	for i := range d {
		d[i] = b
	}
	return d
}

func mustPut(t testing.TB, s *Store, k wire.Key, b byte) Slot {
	t.Helper()
	slot, err := s.Put(k, block(s.BlockBytes(), b))
	if err != nil {
		t.Fatalf("Put: %v", err)
	}
	return slot
}

func mustReserve(t testing.TB, s *Store, k wire.Key) Slot {
	t.Helper()
	slot, err := s.Reserve(k)
	if err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	return slot
}

func mustNil(t testing.TB, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func mustIs(t testing.TB, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: got %v, want %v", what, err, target)
	}
}

func check(t testing.TB, s *Store) {
	t.Helper()
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
}

func wantStats(t testing.TB, s *Store, want Stats) {
	t.Helper()
	check(t, s)
	if got := s.Stats(); got != want {
		t.Fatalf("Stats = %+v, want %+v", got, want)
	}
}
