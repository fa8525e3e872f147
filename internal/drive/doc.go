// Package drive is what the demo and the lab share to drive
// internal/workload's engines on wall time (the simulator drives the same
// engines on virtual time itself): the fixed-step loop that paces the
// engines' steps (Steps), warming a consumer's session to a source before
// time 0 (Warm), and a sleep that a context cuts short (Sleep).
//
// What each driver does inside a step (its faults, its polls, its
// checks) stays in the driver; this package only says when.
package drive
