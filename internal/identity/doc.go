// Package identity is a node's TLS identity: its credentials (Creds, read
// from files and reloaded when they change or on SIGHUP), the check that
// a connection may speak for the peer id it claims (CheckClaim: a rank's
// certificate under TLS, the source address under plain TCP), and the
// record coalescing that gets a chunk's TLS records to the socket in one
// write (CoalescedTLS).
//
// Contract: everything here is safe from any goroutine (the node's
// accept and dial goroutines call it; its loop never does), holds no
// package-level state, and never reads the wall clock for a decision a
// test must control: MaybeReload takes now.
package identity
