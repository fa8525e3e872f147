package prom

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/kvp2p/kvp2p/internal/metrics"
)

// Collector turns the node's snapshot into metrics at every scrape. The
// snapshot is taken once per scrape, so every metric of one scrape is of
// the same instant.
type Collector struct {
	src   metrics.Source
	defs  []metrics.Def
	descs []*prometheus.Desc
	up    *prometheus.Desc
}

// NewCollector returns a collector over src. constLabels (e.g. peer_id)
// go on every metric.
func NewCollector(src metrics.Source, constLabels prometheus.Labels) *Collector {
	c := &Collector{src: src}
	for _, d := range metrics.Defs() {
		desc := prometheus.NewDesc(d.Name, d.Help, d.Labels, constLabels)
		if d.Up() {
			c.up = desc
			continue
		}
		c.defs = append(c.defs, d)
		c.descs = append(c.descs, desc)
	}
	return c
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
	ch <- c.up
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), metrics.ScrapeTimeout)
	defer cancel()
	s, err := c.src(ctx)
	if err != nil {
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 1)
	for i, d := range c.defs {
		d.Emit(s, &emitter{ch: ch, desc: c.descs[i], typ: d.Type})
	}
}

// NewRegistry returns a registry with the node's collector and the Go
// runtime's and process's collectors: one per node, nothing global.
func NewRegistry(src metrics.Source, constLabels prometheus.Labels) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCollector(src, constLabels),
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// emitter writes one Def's samples (a metrics.Sink).
type emitter struct {
	ch   chan<- prometheus.Metric
	desc *prometheus.Desc
	typ  string
}

func (e *emitter) Value(v float64, labels ...string) {
	t := prometheus.GaugeValue
	if e.typ == "counter" {
		t = prometheus.CounterValue
	}
	e.ch <- prometheus.MustNewConstMetric(e.desc, t, v, labels...)
}

func (e *emitter) Hist(h metrics.Hist, labels ...string) {
	e.ch <- prometheus.MustNewConstHistogram(e.desc, h.Count, h.Sum, h.Cumulative(), labels...)
}
