package metrics

// Sink receives one Def's samples: a value, or a histogram, each with the
// values of the Def's labels in order. The Prometheus collector
// (internal/metrics/prom) is one; keeping the interface here keeps
// Prometheus out of every package that only counts (the node's loop).
type Sink interface {
	Value(v float64, labels ...string)
	Hist(h Hist, labels ...string)
}

// Up reports whether d is the liveness metric (kvp2p_up), which no
// snapshot yields: the collector emits it from whether it got one.
func (d Def) Up() bool { return d.emit == nil }

// Emit writes d's samples of s to sink; nothing for the liveness metric.
func (d Def) Emit(s *Snapshot, sink Sink) {
	if d.emit != nil {
		d.emit(s, &emitter{sink: sink})
	}
}

// emitter is what Defs' functions write to.
type emitter struct{ sink Sink }

func (e *emitter) value(v float64, labels ...string) { e.sink.Value(v, labels...) }

func (e *emitter) hist(h Hist, labels ...string) { e.sink.Hist(h, labels...) }
