// Package testpki makes throwaway certificate authorities and leaf
// certificates in process, for tests and the demo's TLS fleet: nothing
// here is meant for production keys, and no private key is ever committed
// to the repository (every key is generated at run time).
package testpki
