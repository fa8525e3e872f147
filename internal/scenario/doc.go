// Package scenario is the scenario model shared by the simulator and the
// demo (design.md §7): the YAML file format and its validation, the
// built-in scenarios, the per-request records a run produces, and the
// report computed from them. It does no I/O beyond reading a scenario.
package scenario
