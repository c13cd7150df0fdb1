// Package storetest is the conformance suite for hub stores, and
// FaultStore, an in-memory store that fails on request for testing a hub.
//
// Every store of this module runs the suite, and a store written outside
// the module should too. Give Run a Factory that builds an empty store on
// the clock and TTL the suite asks for:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, storetest.Factory{
//			New: func(t testing.TB, o storetest.Options) store.Store {
//				s, err := mystore.New(mystore.WithTTL(o.TTL), mystore.WithClock(o.Now))
//				if err != nil {
//					t.Fatal(err)
//				}
//				return s
//			},
//		})
//	}
//
// The suite checks that incarnations grow, that Put, Remove and Touch
// refuse a stale incarnation, that the removal hook's snapshot and the
// hook share one point in time and the hook hears each removal once and
// before the call that caused or raced it returns, TTL expiry on the
// injected clock (through store.Reaper; skipped without it), op-id
// read-back, that reads copy, continuity and Close, and concurrent
// writers. The suite closes each store it builds.
package storetest
