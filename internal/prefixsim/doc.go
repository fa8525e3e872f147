// Package prefixsim measures how well peers find each other's prefixes
// from summaries alone (internal/summary): a fleet of pods behind a
// round-robin balancer, a workload of shared prefixes (documents reused
// with a Zipf popularity, multi-turn sessions), every pod's CPU tier an
// LRU of chunks, and every pod's summary the real Producer, flushed every
// Interval through the real wire encoding into the real Index. Each
// request loads, beyond what its own pod holds, from the peer Find names
// (what that peer really holds decides, as its lookup answer would); an
// oracle that knows every cache names the best peer instead. The report
// compares the two, and gives the summaries' traffic and memory.
//
// The ranks of a pod hold the same blocks (each its slice of them) and
// rank r talks to rank r of the other pods, so one rank group is
// simulated and its figures are per rank: the other groups are copies.
// Every receiver applies the same updates in the same order, so one Index
// holds what every node holds of its peers (each node's own entry aside);
// its memory per node is that Index's, less one peer.
//
// Deterministic: a run is a pure function of Config (a seeded PCG, no
// clock, no map iteration order in any decision).
package prefixsim
