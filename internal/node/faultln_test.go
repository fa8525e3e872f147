package node

import (
	"net"

	"github.com/kvp2p/kvp2p/internal/faultnet"
)

// testFaults acts on the data connections a test node accepts (a
// producer's data connections are accepted: the consumer dials), through
// the demo's injector, internal/faultnet, which tells data from control by
// the first frame and acts on whole frames:
//
//   - pause: let the next n bytes written on data connections through, then
//     hold every data write until resume or the connection's close;
//   - flip: corrupt one payload byte of the next chunk written (a copy:
//     the source slot is never touched);
//   - blackhole: data frames vanish both ways, control lives on.
type testFaults struct {
	inj   *faultnet.Injector
	label string
}

// faultLabel is the rank label of a test node's accepted connections.
const faultLabel = "node"

func newTestFaults(ln net.Listener) (*testFaults, net.Listener) {
	inj := faultnet.NewInjector()
	return &testFaults{inj: inj, label: faultLabel}, faultnet.NewListener(ln, inj, faultLabel)
}

// pauseAfter arms the pause: n more bytes of data writes pass, then writes
// hold. The returned channel is closed when a write holds.
func (f *testFaults) pauseAfter(n int64) <-chan struct{} { return f.inj.PauseData(f.label, n) }

// resume lets held and later data writes through.
func (f *testFaults) resume() { f.inj.ResumeData(f.label) }

// flipNext corrupts one byte of the next chunk payload; the returned
// channel is closed when it happened.
func (f *testFaults) flipNext() <-chan struct{} { return f.inj.CorruptNextChunk(f.label) }

func (f *testFaults) blackhole(on bool) {
	f.inj.Set(f.label, func(rf *faultnet.RankFault) { rf.DataBlack = on })
}
