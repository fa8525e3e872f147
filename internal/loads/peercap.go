package loads

// SetMaxPeers changes the cap on live sessions (Config.MaxPeers) from now
// on: a node whose deployment grows (find's membership) raises it. Sessions
// over a lowered cap stay; new ones are refused until the count is below
// it. A value below 1 is ignored.
func (t *Table) SetMaxPeers(n int) {
	if n > 0 {
		t.cfg.MaxPeers = n
	}
}

// MaxPeers is the cap on live sessions now.
func (t *Table) MaxPeers() int { return t.cfg.MaxPeers }
