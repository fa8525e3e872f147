package node

import "time"

// SlotUse is what a node's store holds and what owns it, counted in one
// turn of the node's loop so that the counts agree with each other. It is
// for a harness's leak check while running (issue 8): counting leaks only
// after every node shut down can hardly fail, since closing sessions
// releases everything anyway. The demo takes it at every step, as the
// simulator takes loads.Table.Held.
type SlotUse struct {
	// Filling and Pinned are the store's slots in those states.
	Filling, Pinned int
	// LoadSlots is how many slots the node's loads hold Filling (a load
	// keeps its destination slots until no peer write can land in them),
	// StorePins how many pins its store jobs hold (parked or bound), and
	// Sessions how many sessions it has: a session's served lookups hold
	// pins of their own until it ends.
	LoadSlots, StorePins, Sessions int
}

// InUse is the slots held, Filling or Pinned.
func (u SlotUse) InUse() int { return u.Filling + u.Pinned }

// Orphans is how many held slots nothing owns: Filling slots beyond the
// loads', and, once the node has no session left, pinned slots beyond the
// store jobs' (while a session lives its lookup pins get the benefit of
// the doubt). The simulator counts the same way (internal/sim's
// checkSlots).
func (u SlotUse) Orphans() int {
	n := max(u.Filling-u.LoadSlots, 0)
	if u.Sessions == 0 {
		n += max(u.Pinned-u.StorePins, 0)
	}
	return n
}

// SlotUse counts the node's held slots and their owners. It allocates
// nothing beyond the call itself: a harness may take it every few
// milliseconds.
func (m *Manager) SlotUse() (SlotUse, error) {
	var u SlotUse
	err := m.do(func(time.Time) {
		st := m.n.st.Stats()
		u.Filling, u.Pinned = st.Filling, st.Pinned
		u.LoadSlots, u.StorePins, u.Sessions = m.n.tb.Held()
	})
	return u, err
}
