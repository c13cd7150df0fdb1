package mux

import (
	"strings"
	"testing"
	"testing/synctest"
)

// TestSimCatchesABrokenCreditRule breaks the credit rule on purpose (every
// slot opens with one credit more than the owner granted: a C+2 buffer
// where the book has C+1) and runs seeds until the harness reports it. It
// must within 1,000 seeds; the message says which seed did and what it
// saw, so that a harness that went blind shows here first.
//
// It runs twice: with every check, and with the producer's credit check
// off, so that what the consumer's ingress sees of the wire (a record past
// the credit it granted: over_credit) must catch it alone.
func TestSimCatchesABrokenCreditRule(t *testing.T) {
	oneProc(t)
	testCreditSkew = 1
	t.Cleanup(func() { testCreditSkew, simBlindProducer = 0, false })
	t.Run("all checks", catchBrokenCredit)
	simBlindProducer = true
	t.Run("consumer side only", catchBrokenCredit)
}

func catchBrokenCredit(t *testing.T) {
	for seed := range uint64(1000) {
		var r simResult
		synctest.Test(t, func(t *testing.T) { r = runSeed(seed) })
		if len(r.bad) == 0 {
			continue
		}
		credit := false
		for _, v := range r.bad {
			credit = credit || strings.Contains(v, "credit")
		}
		if !credit {
			t.Fatalf("seed %d failed, but not on credit:\n%s", seed, r.report(seed))
		}
		t.Logf("caught at seed %d (after %d seeds): %s", seed, seed+1, r.bad[0])
		return
	}
	t.Fatal("1,000 seeds ran with a broken credit rule and no invariant failed")
}
