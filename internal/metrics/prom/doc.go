// Package prom is the Prometheus face of a node's metrics: a collector
// that asks a metrics.Source for one snapshot per scrape and emits every
// metrics.Def from it as constant metrics, and a registry per node.
//
// It is the only package that imports Prometheus besides the HTTP handler
// (internal/status) and the command that wires them: the node's loop
// counts in plain internal/metrics types, so a program that embeds the
// library without serving metrics links no Prometheus.
package prom
