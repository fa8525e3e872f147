// Package cpuwait tells when the machine, not kvp2p, is the limit: Linux's
// pressure stall information (/proc/pressure/cpu) counts the time during
// which at least one runnable task waited for a CPU. Over a run, its share
// of the wall time is how often something, ours or another process's,
// could not run when it was ready to.
package cpuwait
