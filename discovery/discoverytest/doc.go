// Package discoverytest holds conformance suites for discovery backends.
// A backend written anywhere runs RunPeer and RunService from its own tests
// to show that it behaves as the node expects.
package discoverytest
