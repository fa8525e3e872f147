package node

import "time"

// pendingDial is a dial the loop started whose connect its goroutine has
// not reported yet.
type pendingDial struct {
	probe *dialProbe
	at    time.Time // the loop's clock when the dial started
}

// dialProbeAfter is how old a pending dial must be before the loop asks
// the kernel about it: half of the unanswered window (health.Waits.
// Unanswered, 50 ms), so that the answer is in before the table judges,
// and a dial its goroutine reports at once costs no system call.
const dialProbeAfter = 25 * time.Millisecond

// checkDials asks the kernel, for each dial pending longer than
// dialProbeAfter, whether its connect finished, and tells the table of
// those that did (loads.Table.DialAnswered), as their goroutines would
// once they run. The loop calls it before the table judges: before each
// engine call and each tick.
func (n *Node) checkDials(now time.Time) {
	for id, d := range n.dialing {
		if c := n.conns[id]; c == nil || c.closing() {
			delete(n.dialing, id)
			continue
		}
		if now.Sub(d.at) >= dialProbeAfter && d.probe.connected() {
			delete(n.dialing, id)
			n.tb.DialAnswered(now, id)
		}
	}
}
