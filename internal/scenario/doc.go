// Package scenario is the scenario file format shared by the simulator,
// the demo and the lab (docs/design.md §7): the model (fleet, workload, fault
// timeline), the YAML parser and its validation, fault targets, and the
// built-in scenarios. It does no I/O beyond reading a scenario.
//
// What a run of a scenario produces and how it is scored is
// internal/report; how it is drawn is internal/chart.
package scenario
