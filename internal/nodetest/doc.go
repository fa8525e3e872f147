// Package nodetest holds the helpers that the tests of several packages
// share: test keys and blocks, loopback nodes started and stopped with the
// test, PD and symmetric transfer params, frames for a data connection,
// and polling with a deadline.
//
// Only tests import it (the tools/srccheck check fails on a production
// file that does): it depends on the testing package and its helpers
// fail the test that calls them.
//
// It imports the decision core (loads, wire) but not the node, so that
// the node's own in-package tests can use it; helpers that need a node
// take it through a small interface or a constructor.
package nodetest
