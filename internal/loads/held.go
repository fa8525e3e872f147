package loads

// Held reports what the table's jobs hold in its store, for a driver's
// leak check while running (the simulator checks it at every engine step):
// fill is how many slots its loads hold Filling (every load keeps its
// destination slots until no peer write can land in them), storePins how
// many pins its store jobs hold (parked or bound), and sessions how many
// sessions it still has: a session's served lookups hold pins of their own
// until it ends. It allocates nothing.
func (t *Table) Held() (fill, storePins, sessions int) {
	for _, j := range t.jobs {
		switch j.kind {
		case JobLoad:
			fill += len(j.slots)
		case JobStore:
			storePins += len(j.slots)
		}
	}
	return fill, storePins, len(t.conns)
}
