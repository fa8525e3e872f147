package sim

import "github.com/kvp2p/kvp2p/internal/loads"

// ends is a node's connection ends by conn id. A table numbers its conns
// from 1 up and never reuses an id, so a slice indexed by id serves where
// a map did: every message a node sends looks its end up, and a map's
// lookup there cost more than the rest of sending it. A closed end's slot
// is cleared; the slice holds one pointer per connection the node ever
// made, which a simulated minute keeps small.
type ends struct {
	byID []*end
	n    int // open slots in use
}

func (es *ends) get(id loads.ConnID) *end {
	if id < loads.ConnID(len(es.byID)) {
		return es.byID[id]
	}
	return nil
}

func (es *ends) put(id loads.ConnID, e *end) {
	for loads.ConnID(len(es.byID)) <= id {
		es.byID = append(es.byID, nil)
	}
	if es.byID[id] == nil {
		es.n++
	}
	es.byID[id] = e
}

func (es *ends) del(id loads.ConnID) {
	if id < loads.ConnID(len(es.byID)) && es.byID[id] != nil {
		es.byID[id] = nil
		es.n--
	}
}

// sorted returns the ends in connection order.
func (es *ends) sorted() []*end {
	out := make([]*end, 0, es.n)
	for _, e := range es.byID {
		if e != nil {
			out = append(out, e)
		}
	}
	return out
}
