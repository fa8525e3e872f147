package faultnet

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/kvp2p/kvp2p/internal/nodetest"
	"github.com/kvp2p/kvp2p/internal/wire"
)

// TestFrameFilter: whole frames are dropped while black, a job whose
// stream was cut stays cut, other frames flow again after the heal, and a
// stream fed byte by byte gives the same result.
func TestFrameFilter(t *testing.T) {
	chunk := func(job uint64, payload string) []byte {
		return nodetest.ChunkFrame(wire.Chunk{Job: job, Len: uint32(len(payload))}, []byte(payload))
	}
	var stream [][]byte
	stream = append(stream, nodetest.Frame(t, &wire.DataAttach{PeerID: "10.0.0.2:7777", Incarnation: 1}))
	stream = append(stream, chunk(1, "aaaa"), nodetest.Frame(t, &wire.Progress{Job: 1, Bytes: 4}))
	blackFrom := len(stream)
	stream = append(stream, chunk(1, "bbbb"), chunk(2, "cccc"), nodetest.Frame(t, &wire.Probe{Seq: 0}))
	healFrom := len(stream)
	stream = append(stream, chunk(1, "dddd"), nodetest.Frame(t, &wire.Done{Job: 1, Bytes: 12}), chunk(3, "eeee"), nodetest.Frame(t, &wire.Probe{Seq: 5}))

	for _, step := range []int{1, 7, 1 << 20} {
		var f frameFilter
		f.first = true
		cut := map[uint64]bool{}
		black := false
		var got []byte
		decide := func(head []byte, first bool) ([]byte, bool) {
			if first {
				return nil, false
			}
			if len(head) >= 14 && dataJob(wire.Type(head[5])) {
				job := binary.BigEndian.Uint64(head[6:14])
				if black {
					cut[job] = true
				}
				return nil, black || cut[job]
			}
			return nil, black
		}
		for i, fr := range stream {
			black = i >= blackFrom && i < healFrom
			for len(fr) > 0 {
				k := min(step, len(fr))
				f.process(fr[:k], func(b []byte) { got = append(got, b...) }, decide)
				fr = fr[k:]
			}
			if !f.atBoundary() {
				t.Fatalf("step %d: not at a boundary after frame %d", step, i)
			}
		}
		var want []byte
		for _, i := range []int{0, 1, 2, healFrom + 2, healFrom + 3} {
			want = append(want, stream[i]...)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("step %d: filtered stream\n got  %x\n want %x", step, got, want)
		}
	}
}
