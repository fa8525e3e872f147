package session

import (
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/health"
	"github.com/kvp2p/kvp2p/internal/nodetest/testkeys"
	"github.com/kvp2p/kvp2p/internal/wire"
)

// pdInFlight is a ready pair with PD job 1 (4 blocks) fetched and half
// supplied: the writer has 2 blocks and has not ended the job.
func pdInFlight(t *testing.T) *pair {
	pr := readyPair(t, nil)
	ks := testkeys.Keys("a", 4)
	pr.p.s.AddStoredBlocks(pr.now, "kv", ks[:2], slots(500, 2), 77)
	pr.load(1, "kv", ks, true)
	if n, last := pr.sends(1); n != 2 || last {
		t.Fatalf("writer has %d blocks (last=%v), want 2 and not last", n, last)
	}
	return pr
}

// TestAbortAckOnlyAfterWriterStops: an Abort cancels the writer's job; the
// AbortAck is sent only when the writer reports SendEnd, and the consumer
// frees the slots only after both the AbortAck and its reader's terminal
// frame. The store job fails exactly once.
func TestAbortAckOnlyAfterWriterStops(t *testing.T) {
	pr := pdInFlight(t)
	pr.c.s.FinishConsumer(pr.now, "kv") // sends Abort
	pr.flush()
	if r := pr.oneLoad(1); r.OK {
		t.Fatalf("aborted load reported OK: %+v", r)
	}
	if len(pr.p.dataOf(OpCancel, 1)) != 1 {
		t.Fatal("abort did not cancel the writer's job")
	}
	if n := len(sentOf[*wire.AbortAck](pr.p)); n != 0 {
		t.Fatal("AbortAck before the writer stopped")
	}
	if len(pr.p.stores) != 0 {
		t.Fatal("store settled while the writer may still read its slots")
	}
	pr.sendEnd(1, false, 2*testBlockBytes)
	if n := len(sentOf[*wire.AbortAck](pr.p)); n != 1 {
		t.Fatalf("%d AbortAcks after SendEnd, want 1", n)
	}
	if rs := pr.p.storeResults(77); len(rs) != 1 || rs[0].OK {
		t.Fatalf("store results %+v, want one failure", rs)
	}
	if pr.c.released(1) != 0 {
		t.Fatal("slots released on AbortAck while the reader may still write")
	}
	pr.dataEnd(1, false, 2*testBlockBytes)
	if pr.c.released(1) != 1 {
		t.Fatal("slots not released after AbortAck and the reader's end")
	}
	pr.oneLoad(1)
	if pr.c.s.Busy() || pr.p.s.Busy() {
		t.Fatal("sessions still busy after the abort settled")
	}
}

// TestAbortDataEndBeforeAck: the same with the reader's end first; release
// waits for the AbortAck.
func TestAbortDataEndBeforeAck(t *testing.T) {
	pr := pdInFlight(t)
	pr.c.s.FinishConsumer(pr.now, "kv")
	pr.flush()
	pr.dataEnd(1, false, 0)
	if pr.c.released(1) != 0 {
		t.Fatal("released before the AbortAck")
	}
	pr.sendEnd(1, false, 0)
	if pr.c.released(1) != 1 {
		t.Fatal("not released after the AbortAck")
	}
	pr.oneLoad(1)
}

// TestAbortForcedAckAfterCancelDrainTimeout: a writer that never confirms
// the cancel gets CancelDrainTimeout; then the producer acks anyway, keeps
// its pins until SendEnd, and never reports the store as served.
func TestAbortForcedAckAfterCancelDrainTimeout(t *testing.T) {
	pr := pdInFlight(t)
	pr.cfg.AbortAckTimeout = time.Minute // the consumer outwaits the drain
	pr.c.s.FinishConsumer(pr.now, "kv")
	pr.flush()
	pr.advance(10*time.Second - 10*time.Millisecond)
	if n := len(sentOf[*wire.AbortAck](pr.p)); n != 0 {
		t.Fatal("AbortAck before CancelDrainTimeout")
	}
	pr.advance(10 * time.Millisecond)
	if n := len(sentOf[*wire.AbortAck](pr.p)); n != 1 {
		t.Fatalf("%d AbortAcks at CancelDrainTimeout, want 1", n)
	}
	if len(pr.p.stores) != 0 {
		t.Fatal("store settled while the writer may still read its slots")
	}
	pr.advance(20 * time.Second) // no second ack
	if n := len(sentOf[*wire.AbortAck](pr.p)); n != 1 {
		t.Fatalf("%d AbortAcks, want 1", n)
	}
	// The writer finally finishes the job, even successfully: the round was
	// aborted, so the store is not served.
	pr.sendEnd(1, true, 4*testBlockBytes)
	if rs := pr.p.storeResults(77); len(rs) != 1 || rs[0].OK {
		t.Fatalf("store results %+v, want one failure", rs)
	}
	if n := len(sentOf[*wire.TransferDone](pr.p)); n != 0 {
		t.Fatal("TransferDone for an aborted round")
	}
}

// TestAbortIdempotent: a repeated Abort neither re-cancels nor re-acks, and
// does not reset the drain deadline.
func TestAbortIdempotent(t *testing.T) {
	pr := pdInFlight(t)
	ab := &wire.Abort{ReqID: "kv", Round: 0, Job: 1}
	pr.p.s.Receive(pr.now, ab)
	pr.flush()
	pr.advance(6 * time.Second)
	pr.p.s.Receive(pr.now, ab)
	pr.flush()
	if n := len(pr.p.dataOf(OpCancel, 1)); n != 1 {
		t.Fatalf("%d cancels, want 1", n)
	}
	pr.advance(4 * time.Second) // 10 s after the first Abort
	if n := len(sentOf[*wire.AbortAck](pr.p)); n != 1 {
		t.Fatalf("%d AbortAcks 10 s after the first Abort, want 1", n)
	}
	pr.sendEnd(1, false, 0)
	if n := len(sentOf[*wire.AbortAck](pr.p)); n != 1 {
		t.Fatalf("%d AbortAcks after SendEnd, want still 1", n)
	}
}

// TestAbortOfFinishedRoundAcksAtOnce: an Abort for a job the producer no
// longer has (finished, or never seen) is acked at once.
func TestAbortOfFinishedRoundAcksAtOnce(t *testing.T) {
	pr := readyPair(t, nil)
	pr.p.s.Receive(pr.now, &wire.Abort{ReqID: "kv", Round: 3, Job: 9})
	pr.flush()
	acks := sentOf[*wire.AbortAck](pr.p)
	if len(acks) != 1 || acks[0].Job != 9 || acks[0].Round != 3 {
		t.Fatalf("acks %+v", acks)
	}
}

// TestAbortAckTimeoutEndsSession: a producer that never acks an abort
// within AbortAckTimeout ends the session (the load failed at abort time;
// its slots are freed by DataClosed, never before).
func TestAbortAckTimeoutEndsSession(t *testing.T) {
	pr := pdInFlight(t)
	pr.c.s.FinishConsumer(pr.now, "kv")
	pr.c.collect(t)
	pr.c.inbox = nil // the Abort is lost
	pr.oneLoad(1)
	for i := 0; i < 499; i++ {
		pr.now = pr.now.Add(10 * time.Millisecond)
		pr.c.s.Tick(pr.now)
		pr.c.s.Receive(pr.now, &wire.Pong{}) // the peer is otherwise alive
		pr.c.collect(t)
		pr.c.inbox = nil
	}
	if pr.c.ended != health.CauseNone {
		t.Fatalf("ended %v before AbortAckTimeout", pr.c.ended)
	}
	pr.now = pr.now.Add(10 * time.Millisecond)
	pr.c.s.Tick(pr.now)
	pr.c.collect(t)
	if pr.c.ended != health.CauseProtocolError {
		t.Fatalf("cause %v, want protocol-error at AbortAckTimeout", pr.c.ended)
	}
	if pr.c.released(1) != 0 {
		t.Fatal("slots released before DataClosed")
	}
	pr.c.s.DataClosed(pr.now)
	pr.c.collect(t)
	if pr.c.released(1) != 1 {
		t.Fatal("slots not released by DataClosed")
	}
	pr.oneLoad(1)
}

// TestAckedAbortWithSilentReaderEndsSession: the producer acked (perhaps a
// forced ack) but the consumer's reader never saw the job's terminal frame.
// The slots must not leak for the session's life: AbortAckTimeout after the
// abort the session ends, and DataClosed frees them.
func TestAckedAbortWithSilentReaderEndsSession(t *testing.T) {
	pr := pdInFlight(t)
	pr.c.s.FinishConsumer(pr.now, "kv")
	pr.flush()
	pr.p.s.SendEnd(pr.now, 1, false, 0) // producer acks; the reader's end never comes
	pr.flush()
	pr.advance(5 * time.Second)
	if pr.c.ended == health.CauseNone {
		t.Fatal("a failed load held its slots past AbortAckTimeout with the session alive")
	}
	if pr.c.released(1) != 0 {
		t.Fatal("released before DataClosed")
	}
	pr.c.s.DataClosed(pr.now)
	pr.c.collect(t)
	if pr.c.released(1) != 1 {
		t.Fatal("not released by DataClosed")
	}
}

// TestSendInFetchOrder: the producer hands matched blocks to the writer in
// the fetch's order whatever order supply came in, so the consumer's
// reader can read ahead into each next block (datapath's guess).
func TestSendInFetchOrder(t *testing.T) {
	pr := readyPair(t, nil)
	ks := testkeys.Keys("a", 16)
	rev := make([]wire.Key, len(ks))
	for i, k := range ks {
		rev[len(ks)-1-i] = k
	}
	pr.p.s.AddStoredBlocks(pr.now, "kv", rev, slots(500, len(ks)), 77)
	pr.load(1, "kv", ks, true)
	var idx []uint32
	for _, op := range pr.p.dataOf(OpSend, 1) {
		for _, b := range op.Blocks {
			idx = append(idx, b.Index)
		}
	}
	if len(idx) != len(ks) {
		t.Fatalf("%d blocks sent, want %d", len(idx), len(ks))
	}
	for i, x := range idx {
		if x != uint32(i) {
			t.Fatalf("blocks sent in order %v, want the fetch's", idx)
		}
	}
}
