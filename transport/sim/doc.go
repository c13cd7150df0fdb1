// Package sim is a simulated network for tests: a discrete-event fabric
// (Net) that carries messages between many nodes in one process, and a
// messenger transport (Transport, an ext.Transport) on top of it.
//
// # The fabric
//
// A Net holds endpoints by name. A message sent from one endpoint to
// another on a lane becomes a transfer with a due time: the link's
// bandwidth serializes the transfers of one (source, destination) pair,
// then each transfer waits the base latency plus a jitter drawn for it.
// Lanes are ordered channels: a transfer is never due before the one sent
// before it on its lane, so order holds per lane while lanes overtake one
// another. A transfer may be lost (Config.Loss), and Cut partitions two
// endpoints (what is in flight between them is dropped, and sends between
// them fail with ErrPartitioned) until Heal. Every random choice comes
// from one generator seeded by Config.Seed.
//
// # Time
//
// The Net keeps no clock of its own: it reads time.Now and waits on
// timers. Inside a testing/synctest bubble those are the bubble's virtual
// clock, so a run that simulates minutes of traffic takes as long as its
// computation, and timers of the code under test (heartbeats, lingers,
// watchdogs) run on the same clock as the network. The alternative, an
// explicit clock that the code under test would have to read, was
// rejected: the mux and the messenger read time.Now and arm time.Timers
// themselves, and threading a clock through them would change hot paths
// for the sake of tests. Outside a bubble the Net runs on real time.
//
// # Driving it
//
// A Net delivers in one of two ways. Run starts a pump goroutine that
// delivers each transfer when it is due; this is what Transport uses,
// and what the conformance suite runs against. Without Run, the caller
// drives the Net itself: Settle schedules what was sent since the last
// call, Next says when the next transfer is due, and Step delivers it on
// the caller's goroutine. A deterministic harness runs inside a bubble
// and calls synctest.Wait before each Settle and Step, so that the code
// under test is quiescent whenever the Net draws a random number or
// delivers: then the same seed gives the same run, and Trace the same
// list of events (Settle orders the sends it schedules by source,
// destination and lane, so that two goroutines that sent in one instant
// draw in the same order every run).
//
// # The trace
//
// Every send, delivery, drop, refusal, cut, heal and kill is an Event in
// the Net's trace, stamped with the virtual time since the Net was made.
// Config.Describe labels a message in the trace (by default a hash of
// its bytes); a caller whose messages carry fields in an order that does
// not matter (the mux's control records, written from maps) describes
// them canonically.
package sim
