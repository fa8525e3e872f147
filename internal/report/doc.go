// Package report is what a run of a scenario produces and how it is
// scored (docs/design.md §7): the per-request records a driver (the simulator,
// the demo, the lab) makes, the fault windows the scenario's timeline
// implies (the ground truth a policy is judged against), the report
// computed from the two, and its output as JSON and as a table.
//
// It does no I/O of its own: Table writes to the io.Writer it is given.
// The timeline picture of the same records is internal/chart, which
// classifies requests with the same FaultIndex so that the picture and
// the numbers cannot disagree.
package report
