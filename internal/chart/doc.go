// Package chart draws the runs of one scenario as an SVG timeline (kvp2p
// sim/demo/lab --svg): one panel per policy on a shared time axis, a band
// of requests per source pod coloured by outcome, and the scenario's
// faults shaded over the pods they hit. It reads internal/report's records
// and classifies them with report.FaultIndex, as the report does.
package chart
